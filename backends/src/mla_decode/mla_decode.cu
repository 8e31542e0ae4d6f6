// The tensor-core MLA attention kernel (mla_decode.h).
//
// A CTA takes one row (a decode's, or a prefill token's), 16·MT of its heads (the M of every mma)
// and one split of the row's positions, in tiles of 64 positions double-buffered through cp.async.
// Eight warps:
//   S = Q·Kᵀ   warp w scores positions [8w, 8w + 8) of the tile for all the CTA's heads,
//              reducing over the 576 key dims (36 mma k-steps);
//   softmax    the tile's row maxima meet in shared memory, so every warp rescales by the same
//              running maximum and keeps only its own share of the row sums (added at the end);
//   O += P·V   P goes through shared memory in the mma's 16-bit type, and warp w accumulates
//              latent dims [64w, 64w + 64) over the tile's 64 positions.
// Shared-memory rows are padded to 584 elements (1168 bytes, 16 mod 128), so the eight rows an
// ldmatrix reads fall in distinct bank groups. An fp8 cache's tiles are staged as they are and
// widened to bf16 (times the cache's scale) before they are multiplied.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "freezeframe/backends/dcp_shard.h"
#include "freezeframe/base/error.h"
#include "freezeframe/core/cuda_check.h"
#include "kernels/dynamic_shared_memory.h"
#include "kernels/merge_state.cuh"
#include "kernels/mma.cuh"
#include "mla_decode/mla_decode.h"

namespace freezeframe::mla_decode {
namespace {

using kernels::cp_async_16;
using kernels::ldmatrix_x4;
using kernels::ldmatrix_x4_trans;
using kernels::shared_address;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 64;              // positions per tile
constexpr int kRowElems = kQk + 8;     // a padded shared-memory row of Q or K
constexpr int kPRowElems = kTile + 8;  // a padded row of P
/// 16-byte copies per cached position.
template <typename CacheT>
constexpr int kChunksPerRow = kQk* int(sizeof(CacheT)) / 16;

/// The shared-memory layout. A 16-bit cache's tiles go straight into two padded K buffers; an
/// fp8 cache's into two staging buffers, each widened (times its scale) into one K buffer
/// before it is multiplied.
template <int MT, bool kFp8>
struct Smem {
  static constexpr int kHeads = 16 * MT;
  static constexpr std::size_t q = 0;
  static constexpr std::size_t k = q + std::size_t(kHeads) * kRowElems * 2;
  static constexpr std::size_t stage = k + std::size_t(kFp8 ? 1 : 2) * kTile * kRowElems * 2;
  static constexpr std::size_t p = stage + (kFp8 ? std::size_t(2) * kTile * kQk : 0);
  static constexpr std::size_t row_max = p + std::size_t(kHeads) * kPRowElems * 2;
  static constexpr std::size_t row_sum = row_max + std::size_t(kWarps) * kHeads * 4;
  static constexpr std::size_t bytes = row_sum + std::size_t(kWarps) * kHeads * 4;
};

/// Positions [begin, end) of this CTA's split: whole tiles, split evenly.
__device__ __forceinline__ void split_range(int len, int splits, int split, int& begin, int& end) {
  const int tiles = (len + kTile - 1) / kTile;
  const int per_split = (tiles + splits - 1) / splits;
  begin = min(len, split * per_split * kTile);
  end = min(len, (split + 1) * per_split * kTile);
}

template <typename T, typename CacheT, int MT>
__global__ void __launch_bounds__(kThreads, 1) mla_decode_kernel(MlaDecodeParams p) {
  constexpr bool kFp8 = std::is_same_v<CacheT, __nv_fp8_e4m3>;
  static_assert(kFp8 || std::is_same_v<CacheT, T>, "a 16-bit cache is the mma's type");
  using S = Smem<MT, kFp8>;
  constexpr int kHeads = S::kHeads;
  extern __shared__ __align__(128) unsigned char smem[];
  T* s_q = reinterpret_cast<T*>(smem + S::q);
  T* s_k = reinterpret_cast<T*>(smem + S::k);
  auto* s_stage = reinterpret_cast<std::uint8_t*>(smem + S::stage);
  T* s_p = reinterpret_cast<T*>(smem + S::p);
  float* s_max = reinterpret_cast<float*>(smem + S::row_max);
  float* s_sum = reinterpret_cast<float*>(smem + S::row_sum);

  const int split = static_cast<int>(blockIdx.x);
  const int head0 = static_cast<int>(blockIdx.y) * kHeads;
  const int row = static_cast<int>(blockIdx.z);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // the mma fragment's row and column pair

  int req = row, len = 0;
  if (p.query_start_loc == nullptr) {
    len = p.seq_lens[row];
  } else if (row < p.query_start_loc[p.num_reqs]) {
    int lo = 0, hi = p.num_reqs - 1;  // the last request starting at or before the row
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.query_start_loc[mid] <= row) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    req = lo;
    const int kv_len = p.seq_lens[req];
    const int req_start = p.query_start_loc[req];
    const int new_tokens = p.query_start_loc[req + 1] - req_start;
    const bool sharded = p.dcp_world > 1;
    const int pos = (sharded ? p.first_positions[req] : kv_len - new_tokens) + (row - req_start);
    len = sharded ? dcp_shard_tokens(pos + 1, p.dcp_world, p.dcp_interleave, p.dcp_rank) : pos + 1;
    len = min(len, kv_len);
  }  // else a padding row: no positions
  int begin = 0, end = 0;
  split_range(len, p.num_splits, split, begin, end);
  const int num_tiles = (end - begin + kTile - 1) / kTile;

  const auto* cache = static_cast<const unsigned char*>(p.cache);
  const std::int32_t* blocks = p.block_table + std::int64_t(req) * p.block_table_stride;
  constexpr int kChunks = kChunksPerRow<CacheT>;
  auto load_tile = [&](int buffer, int first) {
    for (int c = tid; c < kTile * kChunks; c += kThreads) {
      const int key = c / kChunks, chunk = c % kChunks;
      const int pos = first + key;
      const bool valid = pos < end;
      const unsigned char* src = cache;
      if (valid) {
        const std::int64_t block = blocks[pos / p.block_size];
        src += (block * p.cache_stride_block +
                std::int64_t(pos % p.block_size) * p.cache_stride_token) *
                   std::int64_t(sizeof(CacheT)) +
               chunk * 16;
      }
      const void* dst =
          kFp8 ? static_cast<const void*>(s_stage + (std::size_t(buffer) * kTile + key) * kQk +
                                          chunk * 16)
               : static_cast<const void*>(s_k + (std::size_t(buffer) * kTile + key) * kRowElems +
                                          chunk * 8);
      cp_async_16(shared_address(dst), src, valid);
    }
    kernels::cp_async_commit();
  };
  if (num_tiles > 0) load_tile(0, begin);

  // The query tile, rounded to the mma's 16-bit type; heads past num_heads are zeros.
  for (int i = tid; i < kHeads * kQk; i += kThreads) {
    const int h = i / kQk, d = i % kQk;
    const float v = head0 + h < p.num_heads ? p.q[std::int64_t(row) * p.q_stride_row +
                                                  std::int64_t(head0 + h) * p.q_stride_head + d]
                                            : 0.0f;
    s_q[h * kRowElems + d] = static_cast<T>(v);
  }

  const float scale_log2 = p.scale * kernels::kLog2e;
  float o[MT][8][4];
  float m_run[MT][2], l_part[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_part[mt][0] = l_part[mt][1] = 0.0f;
  }

  // ldmatrix lanes: an A tile's row (l % 16) and 8-column half (l / 16); a pair of B tiles'
  // row (l % 8) and which of the four 8×8 matrices (l / 8).
  const int a_row = lane % 16, a_col = (lane / 16) * 8;
  const int b_row = lane % 8, b_matrix = lane / 8;

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int first = begin + tile * kTile;
    if (tile + 1 < num_tiles) {
      load_tile((tile + 1) & 1, first + kTile);
      kernels::cp_async_wait<1>();
    } else {
      kernels::cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (kFp8) {
      // Widen the staged tile into the K buffer: 16 values a piece, times the cache's scale.
      const std::uint8_t* staged = s_stage + std::size_t(tile & 1) * kTile * kQk;
      for (int c = tid; c < kTile * kChunks; c += kThreads) {
        const int key = c / kChunks, chunk = c % kChunks;
        const uint4 raw = *reinterpret_cast<const uint4*>(staged + key * kQk + chunk * 16);
        const auto* pairs = reinterpret_cast<const std::uint16_t*>(&raw);
        std::uint32_t wide[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const std::uint32_t h = kernels::fp8x2_to_f16x2(pairs[i]);
          const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
          wide[i] = kernels::pack2<T>(f.x * p.cache_scale, f.y * p.cache_scale);
        }
        auto* out = reinterpret_cast<uint4*>(s_k + key * kRowElems + chunk * 16);
        out[0] = make_uint4(wide[0], wide[1], wide[2], wide[3]);
        out[1] = make_uint4(wide[4], wide[5], wide[6], wide[7]);
      }
      __syncthreads();
    }
    const T* k_tile = kFp8 ? s_k : s_k + std::size_t(tile & 1) * kTile * kRowElems;

    // S for positions [8·warp, 8·warp + 8): two k-steps per B load (four 8×8 matrices along
    // the key dims of the warp's eight positions).
    float s[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) s[mt][0] = s[mt][1] = s[mt][2] = s[mt][3] = 0.0f;
#pragma unroll 2
    for (int ks = 0; ks < kQk / 16; ks += 2) {
      std::uint32_t b[4];
      ldmatrix_x4(b,
                  shared_address(k_tile + (warp * 8 + b_row) * kRowElems + ks * 16 + b_matrix * 8));
#pragma unroll
      for (int step = 0; step < 2; ++step) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          std::uint32_t a[4];
          ldmatrix_x4(
              a, shared_address(s_q + (mt * 16 + a_row) * kRowElems + (ks + step) * 16 + a_col));
          kernels::mma_16816<T>(s[mt], a[0], a[1], a[2], a[3], b[2 * step], b[2 * step + 1]);
        }
      }
    }

    // Scores in the log2 domain, positions past the split's end masked; the warp's row maxima.
    const int key0 = first + warp * 8 + 2 * t;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[mt][i] = key0 + (i & 1) < end ? s[mt][i] * scale_log2 : -INFINITY;
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float mx = fmaxf(s[mt][2 * half], s[mt][2 * half + 1]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        if (t == 0) s_max[warp * kHeads + mt * 16 + g + 8 * half] = mx;
      }
    }
    __syncthreads();

    // The tile's row maxima across warps; rescale, exponentiate, publish P.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = mt * 16 + g + 8 * half;
        float tile_max = s_max[r];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) tile_max = fmaxf(tile_max, s_max[w * kHeads + r]);
        const float m_new = fmaxf(m_run[mt][half], tile_max);  // finite: the tile has a key
        const float alpha = kernels::fast_exp2(m_run[mt][half] - m_new);
        m_run[mt][half] = m_new;
        const float p0 = kernels::fast_exp2(s[mt][2 * half] - m_new);
        const float p1 = kernels::fast_exp2(s[mt][2 * half + 1] - m_new);
        l_part[mt][half] = l_part[mt][half] * alpha + p0 + p1;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          o[mt][n][2 * half] *= alpha;
          o[mt][n][2 * half + 1] *= alpha;
        }
        *reinterpret_cast<std::uint32_t*>(s_p + r * kPRowElems + warp * 8 + 2 * t) =
            kernels::pack2<T>(p0, p1);
      }
    }
    __syncthreads();

    // O[:, 64·warp + 64) += P · V over the tile's 64 positions (V: the latent dims of K).
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      std::uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        ldmatrix_x4(a[mt], shared_address(s_p + (mt * 16 + a_row) * kPRowElems + kk * 16 + a_col));
      }
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        // Matrices: positions +0..7 / +8..15 of dims d0..d0+7, then of d0+8..d0+15.
        std::uint32_t b[4];
        const int key = kk * 16 + b_row + (b_matrix % 2) * 8;
        const int dim = warp * 64 + nb * 16 + (b_matrix / 2) * 8;
        ldmatrix_x4_trans(b, shared_address(k_tile + key * kRowElems + dim));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          kernels::mma_16816<T>(o[mt][2 * nb], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0], b[1]);
          kernels::mma_16816<T>(o[mt][2 * nb + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[2],
                                b[3]);
        }
      }
    }
    __syncthreads();  // the next load overwrites this tile's buffer, the next tile s_max and s_p
  }

  // Row sums: the quad's, then the warps'.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float l = l_part[mt][half];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      if (t == 0) s_sum[warp * kHeads + mt * 16 + g + 8 * half] = l;
    }
  }
  __syncthreads();

  const bool split_out = p.num_splits > 1;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = mt * 16 + g + 8 * half;
      const int head = head0 + r;
      if (head >= p.num_heads) continue;
      float l = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) l += s_sum[w * kHeads + r];
      const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
      const float lse = l > 0.0f ? (m_run[mt][half] + log2f(l)) * kernels::kLn2 : -INFINITY;
      float* out;
      if (split_out) {
        const std::int64_t state = (std::int64_t(split) * p.num_rows + row) * p.num_heads + head;
        out = p.partial_out + state * kLatent;
        if (warp == 0 && t == 0) p.partial_lse[state] = lse;
      } else {
        out = p.out + std::int64_t(row) * p.out_stride_row + std::int64_t(head) * p.out_stride_head;
        if (p.lse != nullptr && warp == 0 && t == 0) {
          p.lse[std::int64_t(row) * p.lse_stride_row + head] = lse;
        }
      }
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        *reinterpret_cast<float2*>(out + warp * 64 + n * 8 + 2 * t) =
            make_float2(o[mt][n][2 * half] * inv_l, o[mt][n][2 * half + 1] * inv_l);
      }
    }
  }
}

/// One CTA per (row, head): the splits' partial states merged by their LSE.
__global__ void __launch_bounds__(128) mla_combine_kernel(MlaDecodeParams p) {
  const int row = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y);
  const std::int64_t state = std::int64_t(row) * p.num_heads + head;
  const std::int64_t stride = std::int64_t(p.num_rows) * p.num_heads;
  auto lse_at = [&](int s) { return p.partial_lse[s * stride + state]; };
  const float m = kernels::max_lse(p.num_splits, lse_at);
  float* out =
      p.out + std::int64_t(row) * p.out_stride_row + std::int64_t(head) * p.out_stride_head;
  if (m == -INFINITY) {  // an empty row (a DCP shard without positions)
    for (int d = static_cast<int>(threadIdx.x); d < kLatent; d += blockDim.x) out[d] = 0.0f;
    if (p.lse != nullptr && threadIdx.x == 0)
      p.lse[std::int64_t(row) * p.lse_stride_row + head] = -INFINITY;
    return;
  }
  const float sum = kernels::weight_sum(p.num_splits, m, lse_at);
  for (int d = static_cast<int>(threadIdx.x); d < kLatent; d += blockDim.x) {
    out[d] = kernels::merged_value(p.num_splits, m, sum, lse_at, [&](int s) {
      return p.partial_out[(s * stride + state) * kLatent + d];
    });
  }
  if (p.lse != nullptr && threadIdx.x == 0) {
    p.lse[std::int64_t(row) * p.lse_stride_row + head] = m + logf(sum);
  }
}

template <typename T, typename CacheT, int MT>
void launch_for(const MlaDecodeParams& p, cudaStream_t stream) {
  constexpr auto bytes = Smem<MT, std::is_same_v<CacheT, __nv_fp8_e4m3>>::bytes;
  auto* kernel = &mla_decode_kernel<T, CacheT, MT>;
  kernels::allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel),
                                       static_cast<int>(bytes));
  const dim3 grid(p.num_splits, (p.num_heads + 16 * MT - 1) / (16 * MT), p.num_rows);
  kernel<<<grid, kThreads, bytes, stream>>>(p);
  FF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

MlaDecodeWorkspace::MlaDecodeWorkspace(int num_heads, int splits, int rows) {
  if (splits <= 1) return;
  const std::size_t states = std::size_t(splits) * rows * num_heads;
  partial_lse_offset = (states * kLatent * sizeof(float) + 255) / 256 * 256;
  total = partial_lse_offset + states * sizeof(float);
}

void launch_mla_decode(const MlaDecodeParams& p, DType cache_dtype, cudaStream_t stream) {
  FF_CHECK(p.num_splits >= 1 && p.num_splits <= kMaxSplits &&
               (p.num_splits == 1 || (p.partial_out != nullptr && p.partial_lse != nullptr)),
           ErrorCode::kInvalidArgument, "MLA decode: ", p.num_splits, " splits (1 to ", kMaxSplits,
           ", with partial buffers beyond 1)");
  FF_CHECK(p.block_size > 0 && p.num_heads > 0, ErrorCode::kInvalidArgument,
           "MLA decode: block size ", p.block_size, " and ", p.num_heads, " heads");
  if (p.num_rows == 0) return;
  FF_CHECK(std::isfinite(p.cache_scale) && p.cache_scale > 0.0f, ErrorCode::kInvalidArgument,
           "MLA decode: the cache's scale must be positive and finite, got ", p.cache_scale);
  const bool wide = heads_per_cta(p.num_heads) == 32;
  using bf16 = __nv_bfloat16;
  if (cache_dtype == DType::kBF16) {
    wide ? launch_for<bf16, bf16, 2>(p, stream) : launch_for<bf16, bf16, 1>(p, stream);
  } else if (cache_dtype == DType::kF16) {
    wide ? launch_for<__half, __half, 2>(p, stream) : launch_for<__half, __half, 1>(p, stream);
  } else {
    FF_CHECK(cache_dtype == DType::kFp8E4M3, ErrorCode::kUnsupported,
             "the MLA decode kernel reads bf16, f16 or fp8_e4m3 caches, not ",
             name_of(cache_dtype));
    wide ? launch_for<bf16, __nv_fp8_e4m3, 2>(p, stream)
         : launch_for<bf16, __nv_fp8_e4m3, 1>(p, stream);
  }
  if (p.num_splits > 1) {
    mla_combine_kernel<<<dim3(p.num_rows, p.num_heads), 128, 0, stream>>>(p);
    FF_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace freezeframe::mla_decode
