#pragma once
// The prefill attention kernel (FlashAttention-2's structure on mma.sync): varlen, causal or
// bidirectional, over the paged cache or contiguous key/value rows.
//
// A CTA tile is kBlockM query rows: (token, head) pairs of 2^heads_per_tile_shift query heads
// of one KV head, token-major, so those heads share every K/V tile it loads. Each warp owns
// kMTiles m-tiles of 16 rows (two up to head size 128, so every K/V fragment it reads feeds two
// multiplies). Per K/V tile of kBlockN keys: S = Q·Kᵀ on the tensor cores (Q fragments read
// from shared memory), the online softmax in registers (log2 units; O rescaled only when a
// row's maximum moved), O += P·V with P packed to 16 bits from S's accumulators as the A
// operand. K/V tiles are
// double-buffered in shared memory: cp.async brings tile n + 1 while tile n is multiplied (an
// fp8 cache goes through registers instead, widened to f16 on the way). Shared-memory rows are
// XOR-swizzled in 16-byte chunks so ldmatrix reads them without bank conflicts.
//
// Persistent: the grid is a fixed number of CTAs that walk the host-planned tiles (longest
// first) in turn, so the launch depends on the padded step size only. Before that, the CTAs
// zero the step's padding rows.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "freezeframe/backends/dcp_shard.h"
#include "freezeframe/core/convert.cuh"
#include "kernels/mma.cuh"
#include "prefill/online_softmax.cuh"
#include "prefill/padding_rows.cuh"
#include "prefill/prefill_params.h"

namespace freezeframe::prefill {

template <typename T, typename KV, int D>
struct KernelConfig {
  using MT = typename kernels::MmaType<KV>::type;  // what the tensor cores multiply
  static constexpr bool kFp8 = sizeof(KV) == 1;
  static constexpr int kBlockN = D == 64 ? 64 : 32;  // keys of a K/V tile
  /// m-tiles of 16 rows a warp owns: two where the registers allow (each K/V fragment then
  /// feeds twice the multiplies), one for head size 256.
  static constexpr int kMTiles = D <= 128 ? 2 : 1;
  static constexpr int kBlockM = kWarps * 16 * kMTiles;  // query rows of a CTA tile
  /// Q fragments are read from shared memory per use: registers go to the accumulators.
  static constexpr bool kQInRegisters = false;
  static constexpr int kChunks = D / 8;  // 16-byte chunks of a 16-bit row
  static constexpr int kRowBytes = D * 2;
  static constexpr int kQBytes = kBlockM * kRowBytes;
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static constexpr int kSmemBytes = kQBytes + 4 * kTileBytes;  // Q, K[2], V[2]
  /// 8-byte fp8 chunks (8 elements) a thread stages per K or V tile.
  static constexpr int kFp8Loads = kBlockN * kChunks / kThreads;
};

/// Byte offset of 16-byte chunk `chunk` of row `row`: chunks are XOR-swizzled by row % 8.
template <int kRowBytes>
__device__ __forceinline__ std::uint32_t swizzle(int row, int chunk) {
  return static_cast<std::uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

/// Swizzled byte offsets of one lane's ldmatrix row for chunks 2j + c, j = 0, 1, …: the row is
/// ≡ `row` (mod 8) and only chunk bits 0-2 meet the swizzle, so four values cover every j
/// (offset(j) = base[j % 4] + (j / 4) · 128). Held in four registers instead of one per j.
template <int kRowBytes>
struct LaneSwizzle {
  std::uint32_t base[4];
  __device__ __forceinline__ LaneSwizzle(int row, int c) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      base[q] = static_cast<std::uint32_t>(row * kRowBytes + (((2 * q + c) ^ (row & 7)) << 4));
    }
  }
  __device__ __forceinline__ std::uint32_t at(int j) const { return base[j % 4] + (j / 4) * 128; }
};

template <typename T, typename KV, int D>
__global__ void __launch_bounds__(kThreads)
    prefill_kernel(const __grid_constant__ PrefillParams p) {
  using Cfg = KernelConfig<T, KV, D>;
  using MT = typename Cfg::MT;
  constexpr int kBlockN = Cfg::kBlockN;
  constexpr int kChunks = Cfg::kChunks;
  constexpr int kRowBytes = Cfg::kRowBytes;
  constexpr int kBlockM = Cfg::kBlockM;
  constexpr int kMTiles = Cfg::kMTiles;
  constexpr int kKSteps = D / 16;         // mma k-steps over the head dim (S = Q·Kᵀ)
  constexpr int kKeyTiles = kBlockN / 8;  // n-tiles of S
  constexpr int kDimTiles = D / 8;        // n-tiles of O

  extern __shared__ __align__(128) std::uint8_t smem[];
  std::uint8_t* s_q = smem;
  std::uint8_t* s_k = smem + Cfg::kQBytes;                        // two tiles
  std::uint8_t* s_v = smem + Cfg::kQBytes + 2 * Cfg::kTileBytes;  // two tiles

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const auto* plan = static_cast<const std::uint8_t*>(p.plan);
  const PlanHeader header = *reinterpret_cast<const PlanHeader*>(plan);
  const auto* tiles = reinterpret_cast<const PlanTile*>(plan + sizeof(PlanHeader));

  zero_padding_rows<T, D, kThreads>(p, header, tid);

  const int hp_shift = p.heads_per_tile_shift;
  const int tile_tokens = kBlockM >> hp_shift;
  const int subtiles = kPlanTileTokens / tile_tokens;
  const int head_groups = p.num_heads >> hp_shift;
  const int group_size = p.num_heads / p.num_kv_heads;
  const int planned = header.num_tiles + (p.single_token_rows ? header.num_single_tiles : 0);
  const int items = planned * subtiles * head_groups;
  const bool paged = p.block_table != nullptr;
  const int block_mask = (1 << p.block_shift) - 1;
  const auto* k_base = static_cast<const std::uint8_t*>(p.k);
  const auto* v_base = static_cast<const std::uint8_t*>(p.v);

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int head_group = item % head_groups;
    const int rest = item / head_groups;
    const PlanTile tile = tiles[rest / subtiles];
    const int req = tile.req;
    const int q_first = p.query_start_loc[req];
    const int q_len = p.query_start_loc[req + 1] - q_first;
    const int tok0 = tile.token_begin + (rest % subtiles) * tile_tokens;
    if (tok0 >= q_len) continue;  // the planned tile's last CTA tiles may be empty
    const int tok_end = min(q_len, tok0 + tile_tokens);
    const int kv_len = p.seq_lens[req];
    const int head0 = head_group << hp_shift;
    const int kv_head = head0 / group_size;

    // The keys a query at new token `tok` (position context + tok) sees: [first, last]; under
    // DCP the first keys of the rank's shard that precede it.
    const int context = tile.context;
    auto first_key = [&](int tok) {
      return p.sliding_window > 0 ? max(0, context + tok - p.sliding_window + 1) : 0;
    };
    auto last_key = [&](int tok) {
      const int pos = context + tok;
      if (p.causal) {
        return p.dcp_world > 1
                   ? dcp_shard_tokens(pos + 1, p.dcp_world, p.dcp_interleave_size, p.dcp_rank) - 1
                   : pos;
      }
      return p.sliding_window > 0 ? min(kv_len - 1, pos + p.sliding_window - 1) : kv_len - 1;
    };
    const int kv_begin = first_key(tok0) / kBlockN * kBlockN;
    const int kv_end = last_key(tok_end - 1) + 1;
    const int num_kv_tiles = (kv_end - kv_begin + kBlockN - 1) / kBlockN;
    // Tiles inside [always_first, always_last] need no mask for any row of this CTA tile.
    const int always_first = first_key(tok_end - 1), always_last = last_key(tok0);

    // Q: row m is token tok0 + m / hp, head head0 + m % hp; rows past the tokens read zeros.
    {
      const T* q = static_cast<const T*>(p.q);
      constexpr int kQRowStep = kThreads / kChunks;
#pragma unroll
      for (int k = 0; k < kBlockM / kQRowStep; ++k) {
        const int m = tid / kChunks + k * kQRowStep, c = tid % kChunks;
        const int tok = tok0 + (m >> hp_shift);
        const bool valid = tok < tok_end;
        const T* src =
            valid ? q + std::int64_t(q_first + tok) * p.q_stride_token +
                        std::int64_t(head0 + (m & ((1 << hp_shift) - 1))) * p.q_stride_head + c * 8
                  : q;
        kernels::cp_async_16(kernels::shared_address(s_q + swizzle<kRowBytes>(m, c)), src, valid);
      }
    }

    // Byte offset of key j's chunk c (of 8 elements) for this KV head.
    const std::int32_t* blocks =
        paged ? p.block_table + std::int64_t(req) * p.block_table_stride : nullptr;
    const int kv_row0 = paged ? 0 : p.kv_start[req];
    auto key_offset = [&](int j, int c) -> std::int64_t {
      std::int64_t e;
      if (paged) {
        e = std::int64_t(blocks[j >> p.block_shift]) * p.stride_block +
            std::int64_t(j & block_mask) * p.stride_token;
      } else {
        e = std::int64_t(kv_row0 + j) * p.stride_token;
      }
      return (e + std::int64_t(kv_head) * p.stride_head + c * 8) * std::int64_t(sizeof(KV));
    };
    // A thread loads chunk tid % kChunks of rows tid / kChunks + k · kRowStep: every row's
    // block id is fetched before any copy is issued, so one load latency covers the tile.
    constexpr int kRowStep = kThreads / kChunks;
    constexpr int kRowsPerThread = kBlockN / kRowStep;
    const int load_chunk = tid % kChunks, load_row = tid / kChunks;
    auto load_tile_async = [&](int n0, int buf) {  // 16-bit caches
      std::int64_t off[kRowsPerThread];
#pragma unroll
      for (int k = 0; k < kRowsPerThread; ++k) {
        const int j = n0 + load_row + k * kRowStep;
        off[k] = j < kv_end ? key_offset(j, load_chunk) : -1;
      }
#pragma unroll
      for (int k = 0; k < kRowsPerThread; ++k) {
        const std::uint32_t dst =
            swizzle<kRowBytes>(load_row + k * kRowStep, load_chunk) + buf * Cfg::kTileBytes;
        const bool valid = off[k] >= 0;
        kernels::cp_async_16(kernels::shared_address(s_k + dst), k_base + (valid ? off[k] : 0),
                             valid);
        kernels::cp_async_16(kernels::shared_address(s_v + dst), v_base + (valid ? off[k] : 0),
                             valid);
      }
    };
    uint2 fp8_k[Cfg::kFp8 ? Cfg::kFp8Loads : 1], fp8_v[Cfg::kFp8 ? Cfg::kFp8Loads : 1];
    auto load_tile_fp8 = [&](int n0) {  // into registers; stored by store_tile_fp8
#pragma unroll
      for (int k = 0; k < Cfg::kFp8Loads; ++k) {
        const int i = tid + k * kThreads;
        const int r = i / kChunks, c = i % kChunks;
        const int j = n0 + r;
        fp8_k[k] = fp8_v[k] = make_uint2(0, 0);
        if (j < kv_end) {
          const std::int64_t off = key_offset(j, c);
          fp8_k[k] = __ldg(reinterpret_cast<const uint2*>(k_base + off));
          fp8_v[k] = __ldg(reinterpret_cast<const uint2*>(v_base + off));
        }
      }
    };
    auto store_tile_fp8 = [&](int buf) {
#pragma unroll
      for (int k = 0; k < Cfg::kFp8Loads; ++k) {
        const int i = tid + k * kThreads;
        const int r = i / kChunks, c = i % kChunks;
        const std::uint32_t dst = swizzle<kRowBytes>(r, c) + buf * Cfg::kTileBytes;
        auto widen = [](uint2 x) {
          return make_uint4(
              kernels::fp8x2_to_f16x2(x.x & 0xffff), kernels::fp8x2_to_f16x2(x.x >> 16),
              kernels::fp8x2_to_f16x2(x.y & 0xffff), kernels::fp8x2_to_f16x2(x.y >> 16));
        };
        *reinterpret_cast<uint4*>(s_k + dst) = widen(fp8_k[k]);
        *reinterpret_cast<uint4*>(s_v + dst) = widen(fp8_v[k]);
      }
    };

    if constexpr (Cfg::kFp8) {
      kernels::cp_async_commit();
      load_tile_fp8(kv_begin);
      store_tile_fp8(0);
      kernels::cp_async_wait<0>();
    } else {
      load_tile_async(kv_begin, 0);
      kernels::cp_async_commit();
      if (num_kv_tiles > 1) load_tile_async(kv_begin + kBlockN, 1);
      kernels::cp_async_commit();
      kernels::cp_async_wait<1>();
    }
    __syncthreads();
    if constexpr (!std::is_same_v<T, MT>) {  // bf16 queries over an fp8 cache: Q to f16
      for (int i = tid; i < kBlockM * kChunks; i += kThreads) {
        auto* x = reinterpret_cast<uint4*>(s_q + swizzle<kRowBytes>(i / kChunks, i % kChunks));
        uint4 v = *x;
        v.x = kernels::bf16x2_to_f16x2(v.x);
        v.y = kernels::bf16x2_to_f16x2(v.y);
        v.z = kernels::bf16x2_to_f16x2(v.z);
        v.w = kernels::bf16x2_to_f16x2(v.w);
        *x = v;
      }
      __syncthreads();
    }

    // ldmatrix addresses of this lane: matrix l / 8, its row l % 8.
    const int mat = lane / 8, mrow = lane % 8;
    const std::uint32_t q_smem = kernels::shared_address(s_q);
    const std::uint32_t k_smem = kernels::shared_address(s_k);
    const std::uint32_t v_smem = kernels::shared_address(s_v);
    const int warp_row = warp * 16 * kMTiles;  // the warp's first row; m-tile mt adds 16 mt
    // Q: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
    // K: (keys 0-7, k 0-7), (keys 0-7, k 8-15), (keys 8-15, k 0-7), (keys 8-15, k 8-15).
    // V, transposed: (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15), ...
    const LaneSwizzle<kRowBytes> q_swizzle((mat & 1) * 8 + mrow, mat >> 1);
    const LaneSwizzle<kRowBytes> k_swizzle((mat >> 1) * 8 + mrow, mat & 1);
    const LaneSwizzle<kRowBytes> v_swizzle((mat & 1) * 8 + mrow, mat >> 1);
    auto q_fragment = [&](int mt, int kk, std::uint32_t(&a)[4]) {
      kernels::ldmatrix_x4(a, q_smem + (warp_row + 16 * mt) * kRowBytes + q_swizzle.at(kk));
    };
    std::uint32_t qf[Cfg::kQInRegisters ? kMTiles : 1][Cfg::kQInRegisters ? kKSteps : 1][4];
    if constexpr (Cfg::kQInRegisters) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) q_fragment(mt, kk, qf[mt][kk]);
      }
    }

    // This lane's rows, r = 2 mt + i: row g + 8 i of m-tile mt. Their tokens, visible keys and
    // ALiBi slopes are recomputed where needed (masked tiles, ALiBi) rather than held in
    // registers, which the accumulators need.
    constexpr int kRows = 2 * kMTiles;
    auto lane_row = [&](int r) { return warp_row + 16 * (r / 2) + g + 8 * (r % 2); };
    auto row_token = [&](int r) { return tok0 + (lane_row(r) >> hp_shift); };
    // Without a soft cap or ALiBi the scores stay raw until the exponent, where one FFMA
    // applies the scale (positive, so the row maximum is the same key either way).
    const bool plain_scores = p.softcap <= 0.0f && !p.use_alibi;
    const float exp_scale = plain_scores ? p.q_scale * kernels::kLog2e : 1.0f;

    float row_max[kRows], row_sum[kRows];  // log2 units; row_sum is this lane's partial sum
    float o[kMTiles][kDimTiles][4];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.0f;
    }
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n)
        o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    }

    for (int it = 0; it < num_kv_tiles; ++it) {
      const int buf = it & 1;
      const int n0 = kv_begin + it * kBlockN;
      const bool more = it + 1 < num_kv_tiles;
      if constexpr (Cfg::kFp8) {
        if (more) load_tile_fp8(n0 + kBlockN);
      } else if (it > 0) {
        // Tile it is in flight since the last iteration; tile it + 1 starts now.
        if (more) load_tile_async(n0 + kBlockN, buf ^ 1);
        kernels::cp_async_commit();
        kernels::cp_async_wait<1>();
        __syncthreads();
      }
      const std::uint32_t k_tile = k_smem + buf * Cfg::kTileBytes;
      const std::uint32_t v_tile = v_smem + buf * Cfg::kTileBytes;

      // S = Q·Kᵀ. K matrices: (keys 0-7, k 0-7), (keys 0-7, k 8-15), (keys 8-15, k 0-7), ...
      // Each K fragment feeds every m-tile of the warp.
      float s[kMTiles][kKeyTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n)
          s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
      }
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        std::uint32_t a[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          if constexpr (Cfg::kQInRegisters) {
#pragma unroll
            for (int e = 0; e < 4; ++e) a[mt][e] = qf[mt][kk][e];
          } else {
            q_fragment(mt, kk, a[mt]);
          }
        }
#pragma unroll
        for (int pair = 0; pair < kKeyTiles / 2; ++pair) {
          std::uint32_t b[4];
          kernels::ldmatrix_x4(b, k_tile + pair * 16 * kRowBytes + k_swizzle.at(kk));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            kernels::mma_16816<MT>(s[mt][2 * pair], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0],
                                   b[1]);
            kernels::mma_16816<MT>(s[mt][2 * pair + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3],
                                   b[2], b[3]);
          }
        }
      }

      // Scores (raw, or in log2 units with a cap or ALiBi), masked where this tile crosses a
      // row's visible range; then the online softmax.
      const bool masked = n0 < always_first || n0 + kBlockN - 1 > always_last;
      std::uint32_t probs[kMTiles][kKeyTiles][2];  // P as 16-bit pairs: rows g and g + 8
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = 2 * mt + e / 2;
            const int key = n0 + 8 * n + 2 * t + (e & 1);
            float x = s[mt][n][e];
            if (!plain_scores) {
              x *= p.q_scale;
              if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
              if (p.use_alibi) {
                const float slope = p.alibi[head0 + (lane_row(r) & ((1 << hp_shift) - 1))];
                x += slope * float(key - (context + row_token(r)));
              }
              x *= kernels::kLog2e;
            }
            if (masked) {
              const int tok = row_token(r);
              if (key < first_key(tok) || key > min(last_key(tok), kv_len - 1)) x = -INFINITY;
            }
            s[mt][n][e] = x;
            tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
          }
        }
        float correction[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = 2 * mt + i;
          correction[i] =
              online_softmax_update(quad_max(tile_max[i]), exp_scale, row_max[r], row_sum[r]);
          const float base = softmax_base(row_max[r]);
#pragma unroll
          for (int n = 0; n < kKeyTiles; ++n) {
            const float p0 = kernels::fast_exp2(s[mt][n][2 * i] * exp_scale - base);
            const float p1 = kernels::fast_exp2(s[mt][n][2 * i + 1] * exp_scale - base);
            row_sum[r] += p0 + p1;
            probs[mt][n][i] = kernels::pack2<MT>(p0, p1);  // S's registers are free from here
          }
        }
        // Rescale only when a row's maximum moved (rarely, once a row has seen many keys).
        if (__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) {
#pragma unroll
          for (int n = 0; n < kDimTiles; ++n) {
            o[mt][n][0] *= correction[0];
            o[mt][n][1] *= correction[0];
            o[mt][n][2] *= correction[1];
            o[mt][n][3] *= correction[1];
          }
        }
      }

      // O += P·V: P's A fragments from S's accumulators; V matrices transposed:
      // (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 8-15).
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        std::uint32_t a[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          a[mt][0] = probs[mt][2 * kk][0];
          a[mt][1] = probs[mt][2 * kk][1];
          a[mt][2] = probs[mt][2 * kk + 1][0];
          a[mt][3] = probs[mt][2 * kk + 1][1];
        }
#pragma unroll
        for (int pair = 0; pair < kDimTiles / 2; ++pair) {
          std::uint32_t b[4];
          kernels::ldmatrix_x4_trans(b, v_tile + kk * 16 * kRowBytes + v_swizzle.at(pair));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            kernels::mma_16816<MT>(o[mt][2 * pair], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0],
                                   b[1]);
            kernels::mma_16816<MT>(o[mt][2 * pair + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3],
                                   b[2], b[3]);
          }
        }
      }

      if constexpr (Cfg::kFp8) {
        if (more) store_tile_fp8(buf ^ 1);
      }
      __syncthreads();  // every warp is done with `buf` before it is refilled
    }
    kernels::cp_async_wait<0>();

    // Normalise and write this lane's rows.
    T* out = static_cast<T*>(p.out);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float sum = row_sum[r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int m = lane_row(r), tok = row_token(r);
      if (tok >= tok_end) continue;
      const int head = head0 + (m & ((1 << hp_shift) - 1));
      const std::int64_t row = q_first + tok;
      const float inv = sum > 0.0f ? p.v_scale / sum : 0.0f;
      T* dst = out + row * p.out_stride_token + head * p.out_stride_head + 2 * t;
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        *reinterpret_cast<std::uint32_t*>(dst + 8 * n) =
            kernels::pack2<T>(o[r / 2][n][2 * (r % 2)] * inv, o[r / 2][n][2 * (r % 2) + 1] * inv);
      }
      if (p.lse != nullptr && t == 0) {
        p.lse[row * p.lse_stride_token + head] =
            sum > 0.0f ? (row_max[r] + log2f(sum)) * kernels::kLn2 : -INFINITY;
      }
    }
  }
}

}  // namespace freezeframe::prefill
