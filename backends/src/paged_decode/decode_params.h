#pragma once
// Parameters of the paged decode kernels (host-visible; the kernels are in decode_kernel.cuh).

#include <cstdint>

namespace freezeframe::paged_decode {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kMaxHeads = 256;
inline constexpr int kMaxSplits = 128;

struct DecodeParams {
  const void* q = nullptr;
  std::int64_t q_stride_token = 0, q_stride_head = 0;
  void* out = nullptr;
  std::int64_t out_stride_token = 0, out_stride_head = 0;
  float* lse = nullptr;  // natural log, [rows, heads], when the caller wants it
  std::int64_t lse_stride_token = 0;
  float* partial_out = nullptr;  // [splits, rows, heads, D] f32, when num_splits > 1
  float* partial_lse = nullptr;  // [splits, rows, heads], natural log
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  std::int64_t stride_block = 0, stride_token = 0, stride_head = 0;
  const std::int32_t* block_table = nullptr;
  int block_table_stride = 0;
  int block_shift = 0;  // log2 of the block size (a power of two)
  const std::int32_t* query_start_loc = nullptr;
  const std::int32_t* seq_lens = nullptr;
  int num_reqs = 0;
  int num_rows = 0;
  int num_heads = 0, num_kv_heads = 0;
  int num_splits = 1;
  float q_scale = 1.0f;  // softmax scale × k dequantisation scale
  float v_scale = 1.0f;
  float softcap = 0.0f;
  int sliding_window = 0;
  bool use_alibi = false;
  float alibi[kMaxHeads] = {};
};

}  // namespace freezeframe::paged_decode
