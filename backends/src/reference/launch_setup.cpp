#include "reference/launch.h"

namespace freezeframe::reference {

AttentionLaunch attention_launch(const AttentionParams& p, const AttentionMetadata& md,
                                 const TensorView& query, const TensorView& output,
                                 const TensorView& lse_ln) {
  AttentionLaunch launch;
  launch.query = query;
  launch.output = output;
  launch.lse_ln = lse_ln;
  launch.num_rows = md.num_tokens;
  launch.req_end = md.num_reqs;
  launch.query_start_loc = md.query_start_loc;
  launch.seq_lens = md.seq_lens;
  launch.num_heads = p.num_heads;
  launch.num_kv_heads = p.num_kv_heads;
  launch.head_size_qk = p.head_size;
  launch.head_size_v = p.head_size;
  launch.scale = p.scale;
  launch.softcap = p.logits_soft_cap;
  launch.sliding_window = p.sliding_window.value_or(0);
  launch.causal = p.attn_type == AttentionType::kDecoder;
  launch.alibi_slopes = p.alibi_slopes;
  return launch;
}

PagedSource paged_source(const TensorView& kv_cache, const AttentionMetadata& md, float k_scale,
                         float v_scale) {
  const TensorView k_cache = kv_cache.select(0, 0);
  PagedSource source;
  source.k = k_cache.data();
  source.v = kv_cache.select(0, 1).data();
  source.dtype = kv_cache.dtype();
  source.stride_block = k_cache.stride(0);
  source.stride_token = k_cache.stride(1);
  source.stride_head = k_cache.stride(2);
  source.block_table = md.block_table;
  source.block_table_stride = md.block_table_stride;
  source.block_size = static_cast<int>(k_cache.size(1));
  source.k_scale = is_fp8(kv_cache.dtype()) ? k_scale : 1.0f;
  source.v_scale = is_fp8(kv_cache.dtype()) ? v_scale : 1.0f;
  return source;
}

}  // namespace freezeframe::reference
