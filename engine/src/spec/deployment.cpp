#include "freezeframe/engine/spec/deployment.h"

#include <algorithm>

#include "freezeframe/backends/dcp_shard.h"
#include "freezeframe/base/error.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/engine/spec/tensor_parallel.h"

namespace freezeframe {

DeploymentGeometry DeploymentGeometry::of(const EngineSpec& spec, int tp_rank, int dcp_rank) {
  const ModelSpec& model = spec.model;
  RankView rank;
  rank.tp_rank = tp_rank;
  rank.tp_size = spec.tp.world_size;
  rank.dcp_rank = dcp_rank;
  rank.dcp_world_size = spec.dcp.world_size;
  rank.dcp_interleave_size = spec.dcp.interleave_size;
  FF_CHECK(rank.tp_size >= 1 && rank.tp_rank >= 0 && rank.tp_rank < rank.tp_size &&
               rank.dcp_world_size >= 1 && rank.dcp_rank >= 0 &&
               rank.dcp_rank < rank.dcp_world_size && rank.dcp_interleave_size >= 1,
           ErrorCode::kInvalidArgument, "rank view tp ", rank.tp_rank, "/", rank.tp_size, ", dcp ",
           rank.dcp_rank, "/", rank.dcp_world_size, " is not a rank of its groups");
  DeploymentGeometry g;
  g.rank = rank;

  DeploymentLimits& l = g.limits;
  l.max_num_seqs = spec.scheduler.max_num_seqs;
  l.max_num_batched_tokens = spec.scheduler.max_num_batched_tokens;
  l.max_model_len = spec.scheduler.max_model_len;
  l.block_size = spec.cache.block_size;
  l.vocab_size = model.vocab_size;
  // A row holds a max-length sequence's virtual blocks (each block_size · dcp_world_size
  // positions).
  l.max_blocks_per_req = static_cast<int>(
      DcpSharding{rank.dcp_world_size, rank.dcp_interleave_size, l.block_size}.table_width(
          l.max_model_len));
  l.max_prefill_context_tokens =
      spec.scheduler.max_prefill_context_tokens > 0
          ? spec.scheduler.max_prefill_context_tokens
          : std::max<std::int64_t>(l.max_num_batched_tokens, l.max_model_len);

  KvGeometry& kv = g.kv;
  kv.dtype = spec.kv_cache_dtype();
  kv.latent = model.is_mla();
  // Tensor parallelism splits the KV heads; past their count each rank keeps a replica.
  kv.num_kv_heads = tp_shard(spec).kv_heads;
  kv.head_width =
      kv.latent ? model.mla->kv_lora_rank + model.mla->qk_rope_head_dim : model.head_size;
  return g;
}

DeploymentGeometry DeploymentGeometry::with_num_blocks(std::int64_t num_blocks) const {
  FF_CHECK(num_blocks >= 0 && num_blocks <= kMaxKvBlocks, ErrorCode::kInvalidArgument,
           "a KV cache of ", num_blocks, " blocks: block ids are 32-bit, at most ", kMaxKvBlocks);
  DeploymentGeometry g = *this;
  g.limits.num_blocks = static_cast<std::int32_t>(num_blocks);
  return g;
}

BatchLimits DeploymentGeometry::batch_limits() const {
  BatchLimits b;
  b.max_num_reqs = limits.max_num_seqs;
  b.max_num_tokens = limits.max_num_batched_tokens;
  b.max_blocks_per_req = limits.max_blocks_per_req;
  b.block_size = limits.block_size;
  b.max_prefill_context_tokens = limits.max_prefill_context_tokens;
  b.num_blocks = limits.num_blocks;
  return b;
}

}  // namespace freezeframe
