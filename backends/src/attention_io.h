#pragma once
// What the decode and prefill kernels both take from an attention call: the query, output and
// LSE with their strides, the keys and values, the step's requests, the head counts and the
// score's scales. Each kernel's parameters extend it (DecodeParams, PrefillParams), and
// fill_attention_io sets it from the call, once for both. Host-visible and kernel-visible.

#include <cstdint>

namespace freezeframe {

struct AttentionCall;
struct AttentionParams;

inline constexpr int kMaxAttentionHeads = 256;

struct AttentionIo {
  const void* q = nullptr;  // [rows, H, D]
  std::int64_t q_stride_token = 0, q_stride_head = 0;
  void* out = nullptr;  // [rows, H, D]
  std::int64_t out_stride_token = 0, out_stride_head = 0;
  float* lse = nullptr;  // natural log, [rows, H], when the caller wants it
  std::int64_t lse_stride_token = 0;
  // Keys and values: the paged cache halves when block_table is set (element (block, offset,
  // head, d) at block·stride_block + offset·stride_token + head·stride_head + d), else rows
  // [T, H_kv, D] (stride_token, stride_head).
  const void* k = nullptr;
  const void* v = nullptr;
  std::int64_t stride_block = 0, stride_token = 0, stride_head = 0;
  const std::int32_t* block_table = nullptr;
  int block_table_stride = 0;
  int block_shift = 0;  // log2 of the block size (a power of two)
  const std::int32_t* query_start_loc = nullptr;
  const std::int32_t* seq_lens = nullptr;
  int num_heads = 0, num_kv_heads = 0;
  float q_scale = 1.0f;  // softmax scale × k dequantisation scale
  float v_scale = 1.0f;
  float softcap = 0.0f;
  int sliding_window = 0;
  bool use_alibi = false;
  float alibi[kMaxAttentionHeads] = {};
};

/// `io` from `call` (checked by its impl) and the layer's `params`.
void fill_attention_io(const AttentionCall& call, const AttentionParams& params, AttentionIo& io);

}  // namespace freezeframe
