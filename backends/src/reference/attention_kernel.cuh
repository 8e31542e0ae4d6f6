#pragma once
// The reference attention kernel: one CTA per (query row, query head), online softmax over
// chunks of kThreads keys. Simple and exact in float, not fast: the fast decode backend lives
// elsewhere. One body serves every attention type through a key/value source policy:
//   PagedKv       — the paged cache through a block table (decoder, cross-attention, MLA decode)
//   ContiguousKv  — K/V rows of the step itself (encoder, encoder-only, MLA prefill)
//
// The launch shape is (rows, heads): it depends on the batch shape only. Rows past the last
// request are padding and get zeros (and LSE −inf).

#include <cstdint>

#include "freezeframe/backends/dcp_shard.h"
#include "freezeframe/core/convert.cuh"
#include "kernels/block_reduce.cuh"

namespace freezeframe::kernels {

inline constexpr int kAttentionThreads = 128;
inline constexpr int kMaxHeads = 256;       // ALiBi slopes travel in the params
inline constexpr int kMaxQkHeadSize = 640;  // MLA's absorbed 512 + 64 fits

/// Keys and values in the paged cache. Element (block, offset, kv_head, d) sits at
/// block·stride_block + offset·stride_token + kv_head·stride_head + d.
template <typename CacheT>
struct PagedKv {
  const CacheT* k = nullptr;
  const CacheT* v = nullptr;
  std::int64_t stride_block = 0, stride_token = 0, stride_head = 0;
  const std::int32_t* block_table = nullptr;
  int block_table_stride = 0;
  int block_size = 0;
  float k_scale = 1.0f, v_scale = 1.0f;  // dequantisation (value = stored × scale)

  __device__ std::int64_t offset(int req, int pos, int kv_head) const {
    const int block =
        block_table[static_cast<std::int64_t>(req) * block_table_stride + pos / block_size];
    return block * stride_block + (pos % block_size) * stride_token + kv_head * stride_head;
  }
  __device__ const CacheT* key(int req, int pos, int kv_head) const {
    return k + offset(req, pos, kv_head);
  }
  __device__ const CacheT* value(int req, int pos, int kv_head) const {
    return v + offset(req, pos, kv_head);
  }
};

/// Keys and values as rows of tensors: request r's key j is row start[r] − start[base_req] + j.
template <typename T>
struct ContiguousKv {
  const T* k = nullptr;
  const T* v = nullptr;
  std::int64_t k_stride_token = 0, k_stride_head = 0;
  std::int64_t v_stride_token = 0, v_stride_head = 0;
  const std::int32_t* start = nullptr;
  int base_req = 0;
  float k_scale = 1.0f, v_scale = 1.0f;

  __device__ std::int64_t row(int req, int pos) const { return start[req] - start[base_req] + pos; }
  __device__ const T* key(int req, int pos, int kv_head) const {
    return k + row(req, pos) * k_stride_token + kv_head * k_stride_head;
  }
  __device__ const T* value(int req, int pos, int kv_head) const {
    return v + row(req, pos) * v_stride_token + kv_head * v_stride_head;
  }
};

template <typename QT, typename OT, typename Kv>
struct AttentionKernelParams {
  const QT* q = nullptr;
  std::int64_t q_stride_token = 0, q_stride_head = 0;
  OT* out = nullptr;
  std::int64_t out_stride_token = 0, out_stride_head = 0;
  float* lse = nullptr;  // natural log, [rows, heads] with lse_stride_token; may be null
  std::int64_t lse_stride_token = 0;
  Kv kv;
  const std::int32_t* query_start_loc = nullptr;
  const std::int32_t* seq_lens = nullptr;  // KV length of each request
  int row_begin = 0;                       // first query row of this launch
  int req_begin = 0, req_end = 0;          // requests this launch may meet
  int num_heads = 0, num_kv_heads = 0;
  int head_size_qk = 0, head_size_v = 0;
  float scale = 1.0f;
  float softcap = 0.0f;
  int sliding_window = 0;  // 0 = none
  bool causal = true;
  bool skip_single_token_queries = false;  // rows of one-token requests belong to a decode kernel
  bool use_alibi = false;
  float alibi[kMaxHeads] = {};
  // Under DCP (dcp_world > 1) the keys are this rank's shard; a request's first new position.
  const std::int32_t* first_positions = nullptr;
  int dcp_world = 1, dcp_rank = 0, dcp_interleave_size = 1;
};

template <typename QT, typename OT, typename Kv, int kValuesPerThread>
__global__ void __launch_bounds__(kAttentionThreads)
    reference_attention_kernel(const __grid_constant__ AttentionKernelParams<QT, OT, Kv> p) {
  using Reduce = BlockAllReduce<kAttentionThreads>;
  __shared__ float s_q[kMaxQkHeadSize];
  __shared__ float s_p[kAttentionThreads];
  __shared__ typename Reduce::Storage s_reduce;

  const int row = p.row_begin + static_cast<int>(blockIdx.x);
  const int head = static_cast<int>(blockIdx.y);
  const int tid = static_cast<int>(threadIdx.x);
  OT* out = p.out + row * p.out_stride_token + head * p.out_stride_head;

  // The request this row belongs to: the last r with query_start_loc[r] <= row.
  int req = -1;
  if (row < p.query_start_loc[p.req_end]) {
    int lo = p.req_begin, hi = p.req_end - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.query_start_loc[mid] <= row)
        lo = mid;
      else
        hi = mid - 1;
    }
    req = lo;
  }
  if (req < 0) {  // padding row
    for (int d = tid; d < p.head_size_v; d += kAttentionThreads) out[d] = from_float<OT>(0.0f);
    if (p.lse != nullptr && tid == 0) p.lse[row * p.lse_stride_token + head] = -INFINITY;
    return;
  }

  const int query_len = p.query_start_loc[req + 1] - p.query_start_loc[req];
  if (p.skip_single_token_queries && query_len == 1) return;
  const int kv_len = p.seq_lens[req];
  // The query's position in its sequence and, causally, the last key it sees: over a DCP
  // shard the keys at positions <= pos are the shard's first dcp_shard_tokens(pos + 1).
  const bool sharded = p.dcp_world > 1;
  const int pos =
      (sharded ? p.first_positions[req] : kv_len - query_len) + (row - p.query_start_loc[req]);
  int first = 0, last = kv_len - 1;
  if (p.causal) {
    last = sharded ? dcp_shard_tokens(pos + 1, p.dcp_world, p.dcp_interleave_size, p.dcp_rank) - 1
                   : pos;
  }
  if (p.sliding_window > 0) {
    first = max(0, pos - p.sliding_window + 1);
    if (!p.causal) last = min(last, pos + p.sliding_window - 1);
  }
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const float slope = p.use_alibi ? p.alibi[head] : 0.0f;

  const QT* q = p.q + row * p.q_stride_token + head * p.q_stride_head;
  for (int d = tid; d < p.head_size_qk; d += kAttentionThreads) s_q[d] = to_float(q[d]);
  __syncthreads();

  float m = -INFINITY, l = 0.0f;
  float acc[kValuesPerThread];
#pragma unroll
  for (int i = 0; i < kValuesPerThread; ++i) acc[i] = 0.0f;

  for (int chunk = first; chunk <= last; chunk += kAttentionThreads) {
    const int j = chunk + tid;
    float s = -INFINITY;
    if (j <= last) {
      const auto* k = p.kv.key(req, j, kv_head);
      float dot = 0.0f;
      for (int d = 0; d < p.head_size_qk; ++d) dot += s_q[d] * to_float(k[d]);
      s = dot * p.kv.k_scale * p.scale;
      if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
      s += slope * static_cast<float>(j - pos);
    }
    const float m_new = fmaxf(m, Reduce::max(s_reduce, s));  // finite: key `chunk` is valid
    const float prob = (j <= last) ? expf(s - m_new) : 0.0f;
    s_p[tid] = prob;
    const float chunk_sum = Reduce::sum(s_reduce, prob);  // its barriers publish s_p
    const float correction = expf(m - m_new);             // 0 on the first chunk
    const int count = min(kAttentionThreads, last - chunk + 1);
#pragma unroll
    for (int i = 0; i < kValuesPerThread; ++i) acc[i] *= correction;
    for (int jj = 0; jj < count; ++jj) {
      const float pj = s_p[jj];
      const auto* v = p.kv.value(req, chunk + jj, kv_head);
#pragma unroll
      for (int i = 0; i < kValuesPerThread; ++i) {
        const int d = tid + i * kAttentionThreads;
        if (d < p.head_size_v) acc[i] += pj * to_float(v[d]);
      }
    }
    l = l * correction + chunk_sum;
    m = m_new;
    __syncthreads();  // s_p is rewritten by the next chunk
  }

  const float inv_l = l > 0.0f ? p.kv.v_scale / l : 0.0f;
#pragma unroll
  for (int i = 0; i < kValuesPerThread; ++i) {
    const int d = tid + i * kAttentionThreads;
    if (d < p.head_size_v) out[d] = from_float<OT>(acc[i] * inv_l);
  }
  if (p.lse != nullptr && tid == 0) {
    p.lse[row * p.lse_stride_token + head] = l > 0.0f ? m + logf(l) : -INFINITY;
  }
}

}  // namespace freezeframe::kernels
