#include "attention_io.h"

#include <algorithm>

#include "attention_call.h"
#include "freezeframe/backends/attention_params.h"
#include "freezeframe/base/dtype.h"

namespace freezeframe {

void fill_attention_io(const AttentionCall& call, const AttentionParams& params, AttentionIo& io) {
  const AttentionMetadata& md = *call.md;
  io.q = call.query.data();
  io.q_stride_token = call.query.stride(0);
  io.q_stride_head = call.query.stride(1);
  io.out = call.output.data();
  io.out_stride_token = call.output.stride(0);
  io.out_stride_head = call.output.stride(1);
  io.lse = call.lse_ln.defined() ? call.lse_ln.data_as<float>() : nullptr;
  io.lse_stride_token = call.lse_ln.defined() ? call.lse_ln.stride(0) : 0;
  io.k = call.k.data();
  io.v = call.v.data();
  if (call.paged) {
    const int block_size = static_cast<int>(call.k.size(1));
    io.stride_block = call.k.stride(0);
    io.stride_token = call.k.stride(1);
    io.stride_head = call.k.stride(2);
    io.block_table = md.block_table;
    io.block_table_stride = md.block_table_stride;
    io.block_shift = 0;
    while ((1 << io.block_shift) < block_size) ++io.block_shift;
  } else {
    io.stride_token = call.k.stride(0);
    io.stride_head = call.k.stride(1);
  }
  io.query_start_loc = md.query_start_loc;
  io.seq_lens = md.seq_lens;
  io.num_heads = params.num_heads;
  io.num_kv_heads = params.num_kv_heads;
  const bool fp8 = is_fp8(call.k.dtype());
  io.q_scale = params.scale * (fp8 ? call.layer->k_scale : 1.0f);
  io.v_scale = fp8 ? call.layer->v_scale : 1.0f;
  io.softcap = params.logits_soft_cap;
  io.sliding_window = params.sliding_window.value_or(0);
  io.use_alibi = !params.alibi_slopes.empty();
  std::copy(params.alibi_slopes.begin(), params.alibi_slopes.end(), io.alibi);
}

}  // namespace freezeframe
