#pragma once
// The prefill attention kernel (FlashAttention-2's structure on mma.sync): varlen, causal or
// bidirectional, over the paged cache or contiguous key/value rows.
//
// A CTA tile is kBlockM query rows: (token, head) pairs of 2^heads_per_tile_shift query heads
// of one KV head, token-major, so those heads share every K/V tile it loads. Each warp owns 16
// rows. Per K/V tile of kBlockN keys: S = Q·Kᵀ on the tensor cores (Q fragments in registers
// for head sizes up to 128, read from shared memory for 256), the online softmax in registers
// (log2 units), O += P·V with P re-packed from S's accumulators as the A operand. K/V tiles are
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

#include "freezeframe/core/convert.cuh"
#include "kernels/mma.cuh"
#include "prefill/prefill_params.h"

namespace freezeframe::prefill {

template <typename T, typename KV, int D>
struct KernelConfig {
  using MT = typename kernels::MmaType<KV>::type;  // what the tensor cores multiply
  static constexpr bool kFp8 = sizeof(KV) == 1;
  static constexpr int kBlockN = D == 256 ? 32 : 64;  // keys of a K/V tile
  static constexpr bool kQInRegisters = D <= 128;
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

template <typename T, typename KV, int D>
__global__ void __launch_bounds__(kThreads)
    prefill_kernel(const __grid_constant__ PrefillParams p) {
  using Cfg = KernelConfig<T, KV, D>;
  using MT = typename Cfg::MT;
  constexpr int kBlockN = Cfg::kBlockN;
  constexpr int kChunks = Cfg::kChunks;
  constexpr int kRowBytes = Cfg::kRowBytes;
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

  // Padding rows: output 0, LSE −inf.
  {
    const std::int64_t pad_rows = header.padding_end - header.padding_begin;
    const std::int64_t elems = pad_rows * p.num_heads * D;
    for (std::int64_t i = blockIdx.x * std::int64_t(kThreads) + tid; i < elems;
         i += std::int64_t(gridDim.x) * kThreads) {
      const std::int64_t row = header.padding_begin + i / (std::int64_t(p.num_heads) * D);
      const int head = static_cast<int>(i / D % p.num_heads), d = static_cast<int>(i % D);
      static_cast<T*>(p.out)[row * p.out_stride_token + head * p.out_stride_head + d] =
          kernels::from_float<T>(0.0f);
      if (d == 0 && p.lse != nullptr) p.lse[row * p.lse_stride_token + head] = -INFINITY;
    }
  }

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

    // The keys a query at new token `tok` sees: [first, last].
    const int context = kv_len - q_len;
    auto first_key = [&](int tok) {
      return p.sliding_window > 0 ? max(0, context + tok - p.sliding_window + 1) : 0;
    };
    auto last_key = [&](int tok) {
      const int pos = context + tok;
      if (p.causal) return pos;
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
    // Q: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
    const int q_row = warp * 16 + (mat & 1) * 8 + mrow;
    auto q_fragment = [&](int kk, std::uint32_t(&a)[4]) {
      kernels::ldmatrix_x4(a, q_smem + swizzle<kRowBytes>(q_row, 2 * kk + (mat >> 1)));
    };
    std::uint32_t qf[Cfg::kQInRegisters ? kKSteps : 1][4];
    if constexpr (Cfg::kQInRegisters) {
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) q_fragment(kk, qf[kk]);
    }

    // This lane's rows (g and g + 8 of its warp): their tokens, positions and slopes.
    int row_tok[2], row_first[2], row_last[2];
    float row_slope[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int m = warp * 16 + g + 8 * i;
      row_tok[i] = tok0 + (m >> hp_shift);
      row_first[i] = first_key(row_tok[i]);
      row_last[i] = min(last_key(row_tok[i]), kv_len - 1);
      row_slope[i] = p.use_alibi ? p.alibi[head0 + (m & ((1 << hp_shift) - 1))] : 0.0f;
    }
    const bool plain_scores = p.softcap <= 0.0f && !p.use_alibi;
    const float scale_log2 = p.q_scale * kernels::kLog2e;

    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    float o[kDimTiles][4];
#pragma unroll
    for (int n = 0; n < kDimTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

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
      float s[kKeyTiles][4];
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        std::uint32_t a[4];
        if constexpr (Cfg::kQInRegisters) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[e] = qf[kk][e];
        } else {
          q_fragment(kk, a);
        }
#pragma unroll
        for (int pair = 0; pair < kKeyTiles / 2; ++pair) {
          std::uint32_t b[4];
          const int key = pair * 16 + (mat >> 1) * 8 + mrow;
          kernels::ldmatrix_x4(b, k_tile + swizzle<kRowBytes>(key, 2 * kk + (mat & 1)));
          kernels::mma_16816<MT>(s[2 * pair], a[0], a[1], a[2], a[3], b[0], b[1]);
          kernels::mma_16816<MT>(s[2 * pair + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
        }
      }

      // Scores in log2 units, masked where this tile crosses a row's visible range.
      const bool masked = n0 < always_first || n0 + kBlockN - 1 > always_last;
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e / 2;
          const int key = n0 + 8 * n + 2 * t + (e & 1);
          float x;
          if (plain_scores) {
            x = s[n][e] * scale_log2;
          } else {
            x = s[n][e] * p.q_scale;
            if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
            x = (x + row_slope[i] * float(key - (context + row_tok[i]))) * kernels::kLog2e;
          }
          if (masked && (key < row_first[i] || key > row_last[i])) x = -INFINITY;
          s[n][e] = x;
          tile_max[i] = fmaxf(tile_max[i], x);
        }
      }
      float correction[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
        tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
        const float new_max = fmaxf(row_max[i], tile_max[i]);
        // A row with no visible key yet keeps max −inf: subtract 0 instead (its p are 0).
        const float base = new_max == -INFINITY ? 0.0f : new_max;
        correction[i] = kernels::fast_exp2(row_max[i] - base);
        row_max[i] = new_max;
        row_sum[i] *= correction[i];
#pragma unroll
        for (int n = 0; n < kKeyTiles; ++n) {
          s[n][2 * i] = kernels::fast_exp2(s[n][2 * i] - base);
          s[n][2 * i + 1] = kernels::fast_exp2(s[n][2 * i + 1] - base);
          row_sum[i] += s[n][2 * i] + s[n][2 * i + 1];
        }
      }
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        o[n][0] *= correction[0];
        o[n][1] *= correction[0];
        o[n][2] *= correction[1];
        o[n][3] *= correction[1];
      }

      // O += P·V: P's A fragments from S's accumulators; V matrices transposed:
      // (keys 0-7, dims 0-7), (keys 8-15, dims 0-7), (keys 0-7, dims 8-15), (keys 8-15, dims 8-15).
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        const std::uint32_t a0 = kernels::pack2<MT>(s[2 * kk][0], s[2 * kk][1]);
        const std::uint32_t a1 = kernels::pack2<MT>(s[2 * kk][2], s[2 * kk][3]);
        const std::uint32_t a2 = kernels::pack2<MT>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        const std::uint32_t a3 = kernels::pack2<MT>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        const int key = kk * 16 + (mat & 1) * 8 + mrow;
#pragma unroll
        for (int pair = 0; pair < kDimTiles / 2; ++pair) {
          std::uint32_t b[4];
          kernels::ldmatrix_x4_trans(b, v_tile + swizzle<kRowBytes>(key, 2 * pair + (mat >> 1)));
          kernels::mma_16816<MT>(o[2 * pair], a0, a1, a2, a3, b[0], b[1]);
          kernels::mma_16816<MT>(o[2 * pair + 1], a0, a1, a2, a3, b[2], b[3]);
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
    for (int i = 0; i < 2; ++i) {
      float sum = row_sum[i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int m = warp * 16 + g + 8 * i;
      if (row_tok[i] >= tok_end) continue;
      const int head = head0 + (m & ((1 << hp_shift) - 1));
      const std::int64_t row = q_first + row_tok[i];
      const float inv = sum > 0.0f ? p.v_scale / sum : 0.0f;
      T* dst = out + row * p.out_stride_token + head * p.out_stride_head + 2 * t;
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        *reinterpret_cast<std::uint32_t*>(dst + 8 * n) =
            kernels::pack2<T>(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
      }
      if (p.lse != nullptr && t == 0) {
        p.lse[row * p.lse_stride_token + head] =
            sum > 0.0f ? (row_max[i] + log2f(sum)) * kernels::kLn2 : -INFINITY;
      }
    }
  }
}

}  // namespace freezeframe::prefill
