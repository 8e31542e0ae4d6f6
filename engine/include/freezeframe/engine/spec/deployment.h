#pragma once
// DeploymentGeometry: what the planner, the step validation, the batcher and the engine need
// to know about the shape of a deployment, derived once from its spec: the limits of a step
// and of a sequence, the geometry of this rank's KV cache, and which rank this engine is.

#include <cstdint>

#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/base/dtype.h"

namespace freezeframe {

struct EngineSpec;

/// Which rank of the deployment this engine is. Tensor parallelism splits heads and weights
/// over tp_size ranks; decode context parallelism shards each sequence's KV cache by token
/// over dcp_world_size of them (dcp_world_size divides tp_size), dcp_interleave_size tokens at a
/// time.
struct RankView {
  int tp_rank = 0;
  int tp_size = 1;
  int dcp_rank = 0;
  int dcp_world_size = 1;
  int dcp_interleave_size = 1;

  bool operator==(const RankView&) const = default;
};

/// Where decode context parallelism puts a sequence's tokens (vLLM's layout; docs/DESIGN.md,
/// "Decode context parallelism"). Runs of `interleave` positions go to the ranks in turn, so
/// position p lives on rank (p div I) mod W. The scheduler sees virtual blocks of
/// block_size · W positions; every rank keeps the same block ids in its own pool, and in a
/// virtual block a rank's positions fill its physical block of that id in order.
struct DcpSharding {
  int world_size = 1;       ///< W: ranks sharing each sequence
  int interleave_size = 1;  ///< I: consecutive positions per rank; divides block_size
  int block_size = 16;

  [[nodiscard]] std::int64_t virtual_block_size() const {
    return std::int64_t(block_size) * world_size;
  }
  /// The rank holding position `position`.
  [[nodiscard]] int owner(std::int64_t position) const {
    return static_cast<int>((position / interleave_size) % world_size);
  }
  /// The offset in its rank's physical block of virtual-block offset `v`:
  /// (v div (W·I))·I + v mod I.
  [[nodiscard]] std::int64_t local_offset(std::int64_t v) const {
    return (v / (std::int64_t(world_size) * interleave_size)) * interleave_size +
           v % interleave_size;
  }
  /// Cache slot on `rank` of position `position` of a request whose virtual block table is
  /// `blocks`; −1 when another rank holds it.
  [[nodiscard]] std::int64_t slot(const std::int32_t* blocks, std::int64_t position,
                                  int rank) const {
    if (owner(position) != rank) return -1;
    const std::int64_t v = position % virtual_block_size();
    return std::int64_t(blocks[position / virtual_block_size()]) * block_size + local_offset(v);
  }
  /// Block-table row length for sequences up to `max_len`: ceil(max_len / virtual block size).
  [[nodiscard]] std::int64_t table_width(std::int64_t max_len) const {
    return (max_len + virtual_block_size() - 1) / virtual_block_size();
  }
};

/// This rank's KV cache per layer that owns one.
struct KvGeometry {
  int num_kv_heads = 0;  ///< heads this rank keeps (MLA: 1, the shared latent)
  int head_width = 0;    ///< elements per head and token (MLA: kv_lora_rank + qk_rope_head_dim)
  DType dtype = DType::kBF16;
  bool latent = false;  ///< MLA: one latent per token instead of key and value heads

  bool operator==(const KvGeometry&) const = default;
};

/// What one step and one sequence may hold.
struct DeploymentLimits {
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
  std::int64_t max_model_len = 0;
  int block_size = 0;
  /// KV blocks in this rank's pool: block ids lie in [0, num_blocks); 0 until planned.
  std::int32_t num_blocks = 0;
  /// Block-table row length: the blocks this rank needs for a max_model_len sequence.
  int max_blocks_per_req = 0;
  /// Σ seq_len over the prefills of one step, for workspaces that expand a context.
  std::int64_t max_prefill_context_tokens = 0;
  std::int32_t vocab_size = 0;  ///< token ids lie below it

  bool operator==(const DeploymentLimits&) const = default;
};

struct DeploymentGeometry {
  DeploymentLimits limits;
  KvGeometry kv;
  RankView rank;

  /// The geometry of a validated spec for the rank with these indices in its groups (group
  /// sizes from the spec; num_blocks left 0).
  [[nodiscard]] static DeploymentGeometry of(const EngineSpec& spec, int tp_rank = 0,
                                             int dcp_rank = 0);

  /// The same with the plan's KV blocks. Block ids are 32-bit: throws kInvalidArgument past
  /// 2^31 − 1 (the planner caps the cache there).
  [[nodiscard]] DeploymentGeometry with_num_blocks(std::int64_t num_blocks) const;

  /// The limits metadata builders and attention workspaces are sized for.
  [[nodiscard]] BatchLimits batch_limits() const;

  /// This deployment's DCP layout.
  [[nodiscard]] DcpSharding dcp_sharding() const {
    return {rank.dcp_world_size, rank.dcp_interleave_size, limits.block_size};
  }

  bool operator==(const DeploymentGeometry&) const = default;
};

/// The largest block count a pool may have (block ids are int32).
inline constexpr std::int64_t kMaxKvBlocks = 0x7fffffff;

}  // namespace freezeframe
