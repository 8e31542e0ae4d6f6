#pragma once
// The paged decode kernel: split-KV (FlashDecoding) attention of single-token queries over the
// paged cache, for the H100/H200 class of GPUs, where decode is bound by reading the cache.
//
// Grid: (split, kv head × head group, row). One CTA reads one KV head's slice of one request's
// cache once and serves all HeadsPerCta query heads of its group from it. Each lane owns 16
// bytes of a key/value row (kLanesPerToken lanes per row), so a warp's loads are 16-byte and
// coalesced; kUnroll rows per lane are loaded before any is used. Each warp keeps its own
// online softmax over its tokens; the CTA's warps merge through shared memory at the end, and
// the splits of a row merge in a separate combine kernel (or the CTA writes the output itself
// when there is one split).
//
// Rows whose request has more than one new token (prefill) and padding rows are skipped: the
// launch covers every row of the step, so its shape depends on the batch shape alone.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/convert.cuh"
#include "paged_decode/decode_params.h"

namespace freezeframe::paged_decode {

inline constexpr int kUnroll = 4;
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

/// 16 bytes of a cache row as floats.
template <typename KV>
struct Vec16;

template <>
struct Vec16<__nv_bfloat16> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void to_float(const uint4& raw, float* out) {
    const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(pairs[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};

template <>
struct Vec16<__half> {
  static constexpr int kElems = 8;
  static __device__ __forceinline__ void to_float(const uint4& raw, float* out) {
    const auto* pairs = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(pairs[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};

template <>
struct Vec16<__nv_fp8_e4m3> {
  static constexpr int kElems = 16;
  static __device__ __forceinline__ void to_float(const uint4& raw, float* out) {
    const auto* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const __half2 h = __nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3);
      const float2 f = __half22float2(h);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};

/// The decode request of `row`, or −1 when the row is padding or part of a prefill.
__device__ __forceinline__ int decode_request(const std::int32_t* query_start_loc, int num_reqs,
                                              int row) {
  if (row >= query_start_loc[num_reqs]) return -1;
  int lo = 0, hi = num_reqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start_loc[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return query_start_loc[lo + 1] - query_start_loc[lo] == 1 ? lo : -1;
}

template <typename T, typename KV, int D, int HeadsPerCta>
__global__ void __launch_bounds__(kThreads)
    paged_decode_kernel(const __grid_constant__ DecodeParams p) {
  using Vec = Vec16<KV>;
  constexpr int kElems = Vec::kElems;
  constexpr int kLanesPerToken = D / kElems;
  static_assert(kLanesPerToken >= 1 && kLanesPerToken <= 32 && 32 % kLanesPerToken == 0);
  constexpr int kTokensPerStep = 32 / kLanesPerToken;
  constexpr int kTokensPerIter = kTokensPerStep * kUnroll;

  __shared__ float s_acc[kWarps][HeadsPerCta][D];
  __shared__ float s_m[kWarps][HeadsPerCta];
  __shared__ float s_l[kWarps][HeadsPerCta];

  const int row = blockIdx.z;
  const int split = blockIdx.x;
  const int req = decode_request(p.query_start_loc, p.num_reqs, row);
  if (req < 0) return;

  const int group_size = p.num_heads / p.num_kv_heads;
  const int groups_per_kv = group_size / HeadsPerCta;
  const int kv_head = blockIdx.y / groups_per_kv;
  const int head0 = kv_head * group_size + (blockIdx.y % groups_per_kv) * HeadsPerCta;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slot = lane / kLanesPerToken;  // which token of a step this lane reads
  const int sub = lane % kLanesPerToken;   // which 16 bytes of the row

  // This split's slice of the visible keys, in whole 16-token tiles.
  const int len = p.seq_lens[req];
  const int pos = len - 1;
  const int first = p.sliding_window > 0 ? max(0, len - p.sliding_window) : 0;
  const int tiles = (len - first + 15) / 16;
  const int tiles_per_split = (tiles + p.num_splits - 1) / p.num_splits;
  const int begin = first + split * tiles_per_split * 16;
  const int end = min(len, begin + tiles_per_split * 16);

  // This lane's slice of the queries, pre-scaled.
  float q[HeadsPerCta][kElems];
#pragma unroll
  for (int h = 0; h < HeadsPerCta; ++h) {
    const T* src = static_cast<const T*>(p.q) + row * p.q_stride_token +
                   (head0 + h) * p.q_stride_head + sub * kElems;
#pragma unroll
    for (int e = 0; e < kElems; ++e) q[h][e] = kernels::to_float(src[e]) * p.q_scale;
  }

  float m[HeadsPerCta], l[HeadsPerCta], acc[HeadsPerCta][kElems];
#pragma unroll
  for (int h = 0; h < HeadsPerCta; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < kElems; ++e) acc[h][e] = 0.0f;
  }

  const auto* k_base = static_cast<const std::uint8_t*>(p.k_cache);
  const auto* v_base = static_cast<const std::uint8_t*>(p.v_cache);
  const std::int32_t* blocks = p.block_table + static_cast<std::int64_t>(req) * p.block_table_stride;

  // Loads of the next iteration are issued before the current one is computed, so each warp
  // keeps two iterations' rows in flight.
  constexpr int kStride = kWarps * kTokensPerIter;
  auto load = [&](int j0, uint4 (&k_raw)[kUnroll], uint4 (&v_raw)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int token = j0 + u * kTokensPerStep + slot;
      const int t = token < end ? token : j0;  // a valid row stands in for a masked one
      const std::int64_t offset =
          (static_cast<std::int64_t>(blocks[t / p.block_size]) * p.stride_block +
           (t % p.block_size) * p.stride_token + kv_head * p.stride_head + sub * kElems) *
          static_cast<std::int64_t>(sizeof(KV));
      k_raw[u] = __ldg(reinterpret_cast<const uint4*>(k_base + offset));
      v_raw[u] = __ldg(reinterpret_cast<const uint4*>(v_base + offset));
    }
  };
  uint4 k_raw[kUnroll], v_raw[kUnroll];
  int j0 = begin + warp * kTokensPerIter;
  if (j0 < end) load(j0, k_raw, v_raw);
  for (; j0 < end; j0 += kStride) {
    uint4 k_next[kUnroll], v_next[kUnroll];
    if (j0 + kStride < end) load(j0 + kStride, k_next, v_next);
    int token[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) token[u] = j0 + u * kTokensPerStep + slot;

    float s[kUnroll][HeadsPerCta];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[kElems];
      Vec::to_float(k_raw[u], k);
#pragma unroll
      for (int h = 0; h < HeadsPerCta; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kElems; ++e) dot += q[h][e] * k[e];
#pragma unroll
        for (int o = kLanesPerToken / 2; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        if (p.softcap > 0.0f) dot = p.softcap * tanhf(dot / p.softcap);
        if (p.use_alibi) dot += p.alibi[head0 + h] * static_cast<float>(token[u] - pos);
        s[u][h] = token[u] < end ? dot * kLog2e : -INFINITY;
      }
    }

#pragma unroll
    for (int h = 0; h < HeadsPerCta; ++h) {
      float chunk_max = s[0][h];
#pragma unroll
      for (int u = 1; u < kUnroll; ++u) chunk_max = fmaxf(chunk_max, s[u][h]);
#pragma unroll
      for (int o = kLanesPerToken; o < 32; o *= 2) {
        chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, o));
      }
      const float m_new = fmaxf(m[h], chunk_max);  // finite: token j0 is valid
      const float correction = exp2f(m[h] - m_new);
      m[h] = m_new;
      l[h] *= correction;
#pragma unroll
      for (int e = 0; e < kElems; ++e) acc[h][e] *= correction;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float v[kElems];
      Vec::to_float(v_raw[u], v);
#pragma unroll
      for (int h = 0; h < HeadsPerCta; ++h) {
        const float prob = exp2f(s[u][h] - m[h]);
        l[h] += prob;
#pragma unroll
        for (int e = 0; e < kElems; ++e) acc[h][e] += prob * v[e];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      k_raw[u] = k_next[u];
      v_raw[u] = v_next[u];
    }
  }

  // Sum the warp's token slots (m is already uniform across the warp).
#pragma unroll
  for (int h = 0; h < HeadsPerCta; ++h) {
#pragma unroll
    for (int o = kLanesPerToken; o < 32; o *= 2) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], o);
#pragma unroll
      for (int e = 0; e < kElems; ++e) acc[h][e] += __shfl_xor_sync(0xffffffffu, acc[h][e], o);
    }
  }
  if (slot == 0) {
#pragma unroll
    for (int h = 0; h < HeadsPerCta; ++h) {
#pragma unroll
      for (int e = 0; e < kElems; ++e) s_acc[warp][h][sub * kElems + e] = acc[h][e];
      if (sub == 0) {
        s_m[warp][h] = m[h];
        s_l[warp][h] = l[h];
      }
    }
  }
  __syncthreads();

  // Merge the warps (log2 units) and write this split's state.
  for (int idx = threadIdx.x; idx < HeadsPerCta * D; idx += kThreads) {
    const int h = idx / D, d = idx % D;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w][h]);
    float out = 0.0f, lse = -INFINITY;
    if (m_all != -INFINITY) {
      float sum = 0.0f, weighted = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float scale = exp2f(s_m[w][h] - m_all);
        sum += scale * s_l[w][h];
        weighted += scale * s_acc[w][h][d];
      }
      out = weighted / sum * p.v_scale;
      lse = (m_all + log2f(sum)) * kLn2;
    }
    const int head = head0 + h;
    if (p.num_splits == 1) {
      static_cast<T*>(p.out)[row * p.out_stride_token + head * p.out_stride_head + d] =
          kernels::from_float<T>(out);
      if (d == 0 && p.lse != nullptr) p.lse[row * p.lse_stride_token + head] = lse;
    } else {
      const std::int64_t state = (static_cast<std::int64_t>(split) * p.num_rows + row) * p.num_heads + head;
      p.partial_out[state * D + d] = out;
      if (d == 0) p.partial_lse[state] = lse;
    }
  }
}

}  // namespace freezeframe::paged_decode
