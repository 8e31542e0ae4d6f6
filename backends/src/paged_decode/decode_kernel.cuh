#pragma once
// The paged decode kernel: split-KV (FlashDecoding) attention of single-token queries over the
// paged cache, for the H100/H200 class of GPUs, where decode is bound by reading the cache.
//
// Grid: (split, kv head × head group, row). One CTA reads one KV head's slice of one request's
// cache once and serves all HeadsPerCta (≤ 8) query heads of its group from it. Each warp
// walks 16-token tiles: every lane loads 16-byte pieces of two key rows and two value rows,
// the tensor cores form S = Q·Kᵀ (heads × tokens) and Oᵀ += Vᵀ·Pᵀ (dims × heads) from them,
// and the softmax runs online per warp. The CTA's warps merge through shared memory at the
// end; a row's splits merge in the combine kernel (or the CTA writes the output itself when
// there is one split).
//
// Note [Permuted dot products]: a dot product does not depend on the order of its terms, so
// each lane's k-slices of Q and K may be any dims, as long as both agree. Lane t of a row's
// four lanes holds, for load j, the E consecutive elements at j·4E + t·E (E = 8 for 16-bit,
// 16 for fp8 caches): 16-byte loads feed the mma fragments directly. Output dims come out in
// the same permuted order and are put back where they belong when the warp writes them out.
//
// Rows whose request has more than one new token (prefill) and padding rows are skipped: the
// launch covers every row of the step, so its shape depends on the batch shape alone.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "freezeframe/core/convert.cuh"
#include "kernels/mma.cuh"
#include "paged_decode/decode_params.h"

namespace freezeframe::paged_decode {

using kernels::kLn2;
using kernels::kLog2e;
using kernels::mma_16816;
using kernels::MmaType;
using kernels::pack2;

/// Tokens a warp reads per iteration; a split covers whole tiles.
inline constexpr int kTile = 16;
/// A split reads at least this many tiles: a short sequence uses few splits (the others exit at
/// once and the combine skips them) instead of many splits with a tile each.
inline constexpr int kMinTilesPerSplit = 4;

/// How a row's visible keys [first, len) are shared by the launch's splits: evenly, in whole
/// tiles, at least kMinTilesPerSplit each; `active` splits have keys. The lengths shape the
/// work inside the kernels only; the launch is the same for any lengths.
struct SplitRange {
  int first = 0;
  int tiles_per_split = 0;
  int active = 0;
};
__device__ __forceinline__ SplitRange split_range(int len, int sliding_window, int num_splits) {
  SplitRange r;
  r.first = sliding_window > 0 ? max(0, len - sliding_window) : 0;
  const int tiles = (len - r.first + kTile - 1) / kTile;
  r.tiles_per_split = max(kMinTilesPerSplit, (tiles + num_splits - 1) / num_splits);
  r.active = (tiles + r.tiles_per_split - 1) / r.tiles_per_split;
  return r;
}

/// The decode request of `row`, or −1 when the row is padding or part of a prefill.
__device__ __forceinline__ int decode_request(const std::int32_t* query_start_loc, int num_reqs,
                                              int row) {
  // Decode requests come first in a batch, so row r is usually request r: three independent
  // loads decide it, where the search is a chain of dependent ones.
  if (row < num_reqs) {
    const int start = query_start_loc[row], next = query_start_loc[row + 1];
    if (start == row) return next == row + 1 ? row : -1;
  }
  if (row >= query_start_loc[num_reqs]) return -1;
  int lo = 0, hi = num_reqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start_loc[mid] <= row)
      lo = mid;
    else
      hi = mid - 1;
  }
  return query_start_loc[lo + 1] - query_start_loc[lo] == 1 ? lo : -1;
}

/// Transposes an 8×8 matrix of 16-bit pairs held one row pair per lane (row lane/4, columns
/// 2·(lane%4) and +1) into the same layout of its transpose.
__device__ __forceinline__ std::uint32_t transpose_8x8(std::uint32_t x) {
  std::uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

/// One lane's 16-byte loads of a row, as D/8 registers of MT pairs in permuted dim order.
template <typename KV, int D>
struct RowPieces {
  static constexpr int kElems = 16 / sizeof(KV);  // E
  static constexpr int kLoads = D / (4 * kElems);
  static constexpr int kRegs = D / 8;
  uint4 raw[kLoads];

  __device__ __forceinline__ void load(const std::uint8_t* row_base, int lane_t) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      raw[j] = __ldg(reinterpret_cast<const uint4*>(row_base + (j * 4 * kElems + lane_t * kElems) *
                                                                   sizeof(KV)));
    }
  }
  /// Register w (elements 2w', 2w'+1 of this lane's pieces).
  __device__ __forceinline__ std::uint32_t reg(int w) const {
    if constexpr (sizeof(KV) == 2) {
      return reinterpret_cast<const std::uint32_t*>(raw)[w];
    } else {
      return kernels::fp8x2_to_f16x2(reinterpret_cast<const __nv_fp8x2_storage_t*>(raw)[w]);
    }
  }
  /// The dim that element e (0 or 1) of register w of lane t holds.
  static __device__ __forceinline__ int dim(int lane_t, int w, int e) {
    constexpr int kPairs = kElems / 2;
    return (w / kPairs) * 4 * kElems + lane_t * kElems + 2 * (w % kPairs) + e;
  }
};

template <typename T, typename KV, int D, int HeadsPerCta>
__global__ void __launch_bounds__(kThreads)
    paged_decode_kernel(const __grid_constant__ DecodeParams p) {
  static_assert(HeadsPerCta <= 8, "one mma n-tile holds 8 heads");
  using MT = typename MmaType<KV>::type;
  using Rows = RowPieces<KV, D>;
  constexpr int kSteps = D / 16;     // mma k-steps over the head dim
  constexpr int kDimTiles = D / 16;  // mma m-tiles over the output dims

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
  const int g = lane / 4;  // token of a tile (loads), head (scores), dim row (outputs)
  const int t = lane % 4;

  // This split's slice of the visible keys, in whole 16-token tiles. With one split the CTA
  // writes the output itself, so it runs even with no keys (the output is then 0).
  const int len = p.seq_lens[req];
  const int pos = len - 1;
  const SplitRange range = split_range(len, p.sliding_window, p.num_splits);
  if (p.num_splits > 1 && split >= range.active) return;
  const int begin = range.first + split * range.tiles_per_split * kTile;
  const int end = min(len, begin + range.tiles_per_split * kTile);

  // Q as the A operand (rows = heads; rows 8-15 are zero), in the permuted dim order.
  const bool head_valid = g < HeadsPerCta;
  std::uint32_t qa[kSteps][2];
  {
    const T* q = static_cast<const T*>(p.q) + row * p.q_stride_token +
                 (head0 + min(g, HeadsPerCta - 1)) * p.q_stride_head;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int w = 2 * s + half;
        const float lo = head_valid ? kernels::to_float(q[Rows::dim(t, w, 0)]) : 0.0f;
        const float hi = head_valid ? kernels::to_float(q[Rows::dim(t, w, 1)]) : 0.0f;
        qa[s][half] = pack2<MT>(lo, hi);
      }
    }
  }
  const float qk_scale = p.q_scale;
  const float slope = (p.use_alibi && head_valid) ? p.alibi[head0 + g] : 0.0f;

  float m = -INFINITY, l = 0.0f;  // per head g, log2 units; l is this lane's partial sum
  float o[kDimTiles][4];
#pragma unroll
  for (int i = 0; i < kDimTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

  const auto* k_base = static_cast<const std::uint8_t*>(p.k);
  const auto* v_base = static_cast<const std::uint8_t*>(p.v);
  const std::int32_t* blocks =
      p.block_table + static_cast<std::int64_t>(req) * p.block_table_stride;
  const int block_mask = (1 << p.block_shift) - 1;

  // A tile's two rows for this lane (a valid row stands in for a masked one), and their
  // byte offsets in the cache given their blocks.
  auto tile_token = [&](int j0, int i) {
    const int token = j0 + 8 * i + g;
    return token < end ? token : j0;
  };
  auto load_ids = [&](int j0, int(&ids)[2]) {
#pragma unroll
    for (int i = 0; i < 2; ++i) ids[i] = j0 < end ? blocks[tile_token(j0, i) >> p.block_shift] : 0;
  };
  auto row_offset = [&](int j0, int i, int block) {
    return (static_cast<std::int64_t>(block) * p.stride_block +
            (tile_token(j0, i) & block_mask) * p.stride_token + kv_head * p.stride_head) *
           static_cast<std::int64_t>(sizeof(KV));
  };

  // One tile: S = Q·Kᵀ, the online softmax, Oᵀ += Vᵀ·Pᵀ.
  auto attend = [&](int j0, const Rows(&k_rows)[2], const Rows(&v_rows)[2]) {
    // S for the two 8-token halves: lane holds head g's scores of tokens 2t, 2t+1.
    float s[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
      for (int step = 0; step < kSteps; ++step) {
        mma_16816<MT>(s[i], qa[step][0], 0u, qa[step][1], 0u, k_rows[i].reg(2 * step),
                      k_rows[i].reg(2 * step + 1));
      }
    }

    float score[2][2];
    float chunk_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int token = j0 + 8 * i + 2 * t + e;
        float x = s[i][e] * qk_scale;
        if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
        x += slope * static_cast<float>(token - pos);
        score[i][e] = token < end ? x * kLog2e : -INFINITY;
        chunk_max = fmaxf(chunk_max, score[i][e]);
      }
    }
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, 1));
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, 2));
    const float m_new = fmaxf(m, chunk_max);  // finite: token j0 is valid
    const float correction = exp2f(m - m_new);
    m = m_new;
    float prob[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) prob[i][e] = exp2f(score[i][e] - m);
    }
    l = l * correction + (prob[0][0] + prob[0][1]) + (prob[1][0] + prob[1][1]);

    // Pᵀ as B: column = head g, k = tokens 2t, 2t+1 (+8).
    const std::uint32_t pb0 = pack2<MT>(prob[0][0], prob[0][1]);
    const std::uint32_t pb1 = pack2<MT>(prob[1][0], prob[1][1]);
    // Output columns are heads 2t and 2t+1: their corrections live in lanes 8t and 8t+4.
    const float corr_lo = __shfl_sync(0xffffffffu, correction, 8 * t);
    const float corr_hi = __shfl_sync(0xffffffffu, correction, 8 * t + 4);
#pragma unroll
    for (int mt = 0; mt < kDimTiles; ++mt) {
      const std::uint32_t a0 = transpose_8x8(v_rows[0].reg(2 * mt));
      const std::uint32_t a1 = transpose_8x8(v_rows[0].reg(2 * mt + 1));
      const std::uint32_t a2 = transpose_8x8(v_rows[1].reg(2 * mt));
      const std::uint32_t a3 = transpose_8x8(v_rows[1].reg(2 * mt + 1));
      o[mt][0] *= corr_lo;
      o[mt][1] *= corr_hi;
      o[mt][2] *= corr_lo;
      o[mt][3] *= corr_hi;
      mma_16816<MT>(o[mt], a0, a1, a2, a3, pb0, pb1);
    }
  };

  // Block ids are fetched one tile ahead of their use, so a tile's KV loads never wait on
  // the block table.
  constexpr int kStride = kWarps * kTile;  // a warp's next tile
  const int first_tile = begin + warp * kTile;
  int ids[2];
  load_ids(first_tile, ids);
  // KV straight into registers, one tile in flight per warp. (A cp.async ring of 2-4 tiles
  // per warp in shared memory, at the fewer CTAs per SM its size allows, measured 10-15%
  // slower at batch 64.)
  for (int j0 = first_tile; j0 < end; j0 += kStride) {
    const int cur[2] = {ids[0], ids[1]};
    load_ids(j0 + kStride, ids);
    Rows k_rows[2], v_rows[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const std::int64_t offset = row_offset(j0, i, cur[i]);
      k_rows[i].load(k_base + offset, t);
      v_rows[i].load(v_base + offset, t);
    }
    attend(j0, k_rows, v_rows);
  }

  // Head g's sum over its four lanes; publish the warp's state.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  if (t == 0 && head_valid) {
    s_m[warp][g] = m;
    s_l[warp][g] = l;
  }
  // o[mt] holds (dim row g of register 2mt / 2mt+1's 8×8 tile, heads 2t and 2t+1).
#pragma unroll
  for (int mt = 0; mt < kDimTiles; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int w = 2 * mt + half;
      const int d = Rows::dim(g / 2, w, g % 2);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int head = 2 * t + e;
        if (head < HeadsPerCta) s_acc[warp][head][d] = o[mt][2 * half + e];
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
      const std::int64_t state =
          (static_cast<std::int64_t>(split) * p.num_rows + row) * p.num_heads + head;
      p.partial_out[state * D + d] = out;
      if (d == 0) p.partial_lse[state] = lse;
    }
  }
}

}  // namespace freezeframe::paged_decode
