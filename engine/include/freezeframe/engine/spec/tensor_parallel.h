#pragma once
// TpShard: the shapes one tensor-parallel rank holds of the model; every rank holds the same.
// Column-parallel projections (q/k/v, gate/up, the vocabulary rows of the embedding and the LM
// head) keep 1/T of their output rows, row-parallel ones (o_proj, down) 1/T of their input
// columns; norms and MLA's compressions (q_a, kv_a) are replicated.

#include <cstdint>
#include <string_view>

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

/// Which part of a whole weight one rank holds: along `axis` (0: output rows, 1: input
/// columns; −1: all of it, replicated), the `offset`-th element onwards of a whole extent
/// `whole`, as many as the rank's shape has. The vocabulary's last shard may reach past
/// `whole` (padding rows, which no token reads and whose logits are dropped).
struct WeightShard {
  int axis = -1;
  std::int64_t offset = 0;
  std::int64_t whole = 0;  ///< the whole tensor's extent along `axis`
};

/// The part of the model program's weight `name` (ProgramWeight::name, e.g.
/// "layers.3.self_attn.o_proj") that tensor-parallel rank `tp_rank` holds. Query heads, MLP
/// width and vocabulary split evenly; over more ranks than KV heads, rank r keeps KV head
/// r div (T / num_kv_heads); norms, biases of replicated rows and MLA's compressions are whole.
/// Under DCP an MLA rank holds the query and key/value up-projection rows of its whole DCP
/// group's heads (its impl computes them all against its shard of the latent).
[[nodiscard]] WeightShard weight_shard(const EngineSpec& spec, std::string_view name, int tp_rank);

}  // namespace freezeframe
