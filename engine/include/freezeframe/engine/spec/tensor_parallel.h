#pragma once
// TpShard: the shapes one tensor-parallel rank holds of the model; every rank holds the same.
// Column-parallel projections (q/k/v, gate/up, the vocabulary rows of the embedding and the LM
// head) keep 1/T of their output rows, row-parallel ones (o_proj, down) 1/T of their input
// columns; norms and MLA's compressions (q_a, kv_a) are replicated.

#include <cstdint>

namespace freezeframe {

struct EngineSpec;

struct TpShard {
  int world = 1;                  ///< T, tp.world_size
  int query_heads = 0;            ///< num_heads / T: this rank's q_proj rows and o_proj columns
  int attention_heads = 0;        ///< heads one attention call computes: with DCP the group's
                                  ///< queries are gathered, num_heads / T · D
  int kv_heads = 0;               ///< max(1, num_kv_heads / T): over more ranks than KV heads
                                  ///< each rank keeps a replica (MLA: 1, the latent, on all)
  std::int64_t padded_vocab = 0;  ///< vocab_size rounded up to a multiple of T
  std::int64_t vocab_rows = 0;    ///< padded_vocab / T: embedding and LM head rows per rank

  /// This rank's share of an MLP's intermediate width (validated: T divides it).
  [[nodiscard]] std::int64_t intermediate(std::int64_t width) const { return width / world; }
};

/// The shard of a validated spec's model on each of its tp.world_size ranks.
[[nodiscard]] TpShard tp_shard(const EngineSpec& spec);

}  // namespace freezeframe
