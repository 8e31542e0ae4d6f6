// The MLA projections on tensor cores (tensor_core_projection.h).
//
// A CTA computes a 64 × 64 tile of one batch entry's output over k in steps of 32: both tiles
// are loaded into shared memory in the weight's 16-bit type (x converted as it is read, zeros
// past the edges), then each of 4 warps multiplies its 32 × 32 quarter with m16n8k16 mma.sync.
// Rows are padded to 40 elements (80 bytes), so an ldmatrix's eight rows fall in distinct
// bank groups. Any shape and strides: the loads are guarded, in 16-byte pieces where k, the
// strides and the pointer allow (the next tile's then held in registers while the current one
// is multiplied), else element by element.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "freezeframe/base/error.h"
#include "freezeframe/core/convert.cuh"
#include "freezeframe/core/cuda_check.h"
#include "kernels/mma.cuh"
#include "mla_decode/tensor_core_projection.h"

namespace freezeframe::mla_decode {
namespace {

using kernels::from_float;
using kernels::ldmatrix_x4;
using kernels::shared_address;
using kernels::to_float;

constexpr int kTileM = 64, kTileN = 64, kTileK = 32;
constexpr int kLd = kTileK + 8;
constexpr int kThreads = 128;

/// One thread's share of a [64, 32] tile in 16-byte pieces, held in registers between its
/// load (`fetch`) and its store into shared memory (`stash`), so the next tile's loads fly
/// while the current one is multiplied. A piece is in or out of the matrix as a whole: k, the
/// strides and the pointer are in whole pieces.
template <typename E>
struct Pieces {
  using Piece = std::conditional_t<std::is_same_v<E, float>, float4, uint4>;
  static constexpr int kWidth = 16 / sizeof(E);  // elements a piece
  static constexpr int kPerRow = kTileK / kWidth;
  static constexpr int kCount = kTileM * kPerRow / kThreads;
  static_assert(kTileM == kTileN && kCount * kThreads == kTileM * kPerRow);
  Piece v[kCount];

  /// Rows [first, first + 64) of a matrix with `rows` rows and `k` columns, columns from k0.
  __device__ __forceinline__ void fetch(const E* m, std::int64_t stride, int first, int rows, int k,
                                        int k0, int tid) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int e = tid + i * kThreads, r = e / kPerRow, c = (e % kPerRow) * kWidth;
      v[i] = Piece{};
      if (first + r < rows && k0 + c < k) {
        v[i] = *reinterpret_cast<const Piece*>(m + (first + r) * stride + k0 + c);
      }
    }
  }

  /// Into s [64][kLd] in T (f32 rounded to it).
  template <typename T>
  __device__ __forceinline__ void stash(T* s, int tid) const {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int e = tid + i * kThreads, r = e / kPerRow, c = (e % kPerRow) * kWidth;
      if constexpr (std::is_same_v<E, float>) {
        uint2 packed;
        packed.x = kernels::pack2<T>(v[i].x, v[i].y);
        packed.y = kernels::pack2<T>(v[i].z, v[i].w);
        *reinterpret_cast<uint2*>(s + r * kLd + c) = packed;
      } else {
        static_assert(std::is_same_v<E, T>, "16-bit pieces are stored as they are");
        *reinterpret_cast<uint4*>(s + r * kLd + c) = v[i];
      }
    }
  }
};

/// x's [64, 32] tile at (row0, k0) into s_x in T, element by element.
template <typename XT, typename T>
__device__ __forceinline__ void load_x_elements(T* s_x, const XT* x, const reference::Projection& p,
                                                int row0, int k0, int tid) {
  for (int e = tid; e < kTileM * kTileK; e += kThreads) {
    const int r = e / kTileK, c = e % kTileK;
    const int row = row0 + r, k = k0 + c;
    const float v = row < p.rows && k < p.k ? to_float(x[row * p.x_stride_row + k]) : 0.0f;
    s_x[r * kLd + c] = from_float<T>(v);
  }
}

/// w's [64, 32] tile at (n0, k0) into s_w [n][k], element by element (any k stride).
template <typename T>
__device__ __forceinline__ void load_w_elements(T* s_w, const T* w, const reference::Projection& p,
                                                std::int64_t w_stride_k, int n0, int k0, int tid) {
  for (int e = tid; e < kTileN * kTileK; e += kThreads) {
    // Consecutive threads along whichever of w's dims is contiguous.
    const int n = w_stride_k == 1 ? e / kTileK : e % kTileN;
    const int c = w_stride_k == 1 ? e % kTileK : e / kTileN;
    const int col = n0 + n, k = k0 + c;
    s_w[n * kLd + c] =
        col < p.n_out && k < p.k ? w[col * p.w_stride_n + k * w_stride_k] : from_float<T>(0.0f);
  }
}

template <typename XT, typename T, typename OT, bool kVecX, bool kVecW>
__global__ void __launch_bounds__(kThreads)
    projection_kernel(const __grid_constant__ reference::Projection p, std::int64_t w_stride_k) {
  __shared__ __align__(16) T s_x[kTileM * kLd];
  __shared__ __align__(16) T s_w[kTileN * kLd];
  const int n0 = static_cast<int>(blockIdx.x) * kTileN;
  const int row0 = static_cast<int>(blockIdx.y) * kTileM;
  const int b = static_cast<int>(blockIdx.z);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_m = (warp / 2) * 32, warp_n = (warp % 2) * 32;
  const XT* x = static_cast<const XT*>(p.x) + b * p.x_stride_batch;
  const T* w = static_cast<const T*>(p.w) + b * p.w_stride_batch;

  float acc[2][4][4] = {};
  // The tile in shared memory times the accumulators.
  auto multiply = [&] {
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      std::uint32_t a[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        ldmatrix_x4(a[mi], shared_address(s_x + (warp_m + mi * 16 + lane % 16) * kLd + kk +
                                          (lane / 16) * 8));
      }
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        // Matrices: columns +0..7 at k +0 / +8, then columns +8..15 at k +0 / +8.
        std::uint32_t bq[4];
        ldmatrix_x4(bq, shared_address(s_w + (warp_n + np * 16 + lane % 8 + (lane / 16) * 8) * kLd +
                                       kk + ((lane / 8) % 2) * 8));
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          kernels::mma_16816<T>(acc[mi][2 * np], a[mi][0], a[mi][1], a[mi][2], a[mi][3], bq[0],
                                bq[1]);
          kernels::mma_16816<T>(acc[mi][2 * np + 1], a[mi][0], a[mi][1], a[mi][2], a[mi][3], bq[2],
                                bq[3]);
        }
      }
    }
  };

  // Pieces of the next tile are loaded into registers while this one is multiplied.
  Pieces<XT> x_next;
  Pieces<T> w_next;
  if constexpr (kVecX) x_next.fetch(x, p.x_stride_row, row0, p.rows, p.k, 0, tid);
  if constexpr (kVecW) w_next.fetch(w, p.w_stride_n, n0, p.n_out, p.k, 0, tid);
  for (int k0 = 0; k0 < p.k; k0 += kTileK) {
    if constexpr (kVecX) {
      x_next.template stash<T>(s_x, tid);
    } else {
      load_x_elements(s_x, x, p, row0, k0, tid);
    }
    if constexpr (kVecW) {
      w_next.template stash<T>(s_w, tid);
    } else {
      load_w_elements(s_w, w, p, w_stride_k, n0, k0, tid);
    }
    __syncthreads();
    if (k0 + kTileK < p.k) {
      if constexpr (kVecX) x_next.fetch(x, p.x_stride_row, row0, p.rows, p.k, k0 + kTileK, tid);
      if constexpr (kVecW) w_next.fetch(w, p.w_stride_n, n0, p.n_out, p.k, k0 + kTileK, tid);
    }
    multiply();
    __syncthreads();
  }

  OT* out = static_cast<OT*>(p.out) + b * p.out_stride_batch;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = row0 + warp_m + mi * 16 + g + (i / 2) * 8;
        const int col = n0 + warp_n + j * 8 + 2 * t + i % 2;
        if (row < p.rows && col < p.n_out) {
          out[row * p.out_stride_row + col] = from_float<OT>(acc[mi][j][i]);
        }
      }
    }
  }
}

/// Whether a matrix of `T` at `data` with these strides (elements) and k reads in 16-byte
/// pieces.
template <typename T>
bool whole_pieces(const void* data, std::int64_t stride_a, std::int64_t stride_b, int k) {
  constexpr int kPiece = 16 / sizeof(T);
  return reinterpret_cast<std::uintptr_t>(data) % 16 == 0 && stride_a % kPiece == 0 &&
         stride_b % kPiece == 0 && k % kPiece == 0;
}

template <typename XT, typename T, typename OT>
void run(const reference::Projection& p, std::int64_t w_stride_k, cudaStream_t stream) {
  const dim3 grid((p.n_out + kTileN - 1) / kTileN, (p.rows + kTileM - 1) / kTileM, p.batch);
  const bool vec_x = whole_pieces<XT>(p.x, p.x_stride_row, p.x_stride_batch, p.k);
  const bool vec_w = w_stride_k == 1 && whole_pieces<T>(p.w, p.w_stride_n, p.w_stride_batch, p.k);
  auto launch = [&](auto kernel) {
    kernel<<<grid, kThreads, 0, stream>>>(p, w_stride_k);
    FF_CUDA_CHECK(cudaGetLastError());
  };
  if (vec_x && vec_w) return launch(projection_kernel<XT, T, OT, true, true>);
  if (vec_x) return launch(projection_kernel<XT, T, OT, true, false>);
  if (vec_w) return launch(projection_kernel<XT, T, OT, false, true>);
  launch(projection_kernel<XT, T, OT, false, false>);
}

/// q_abs[t, h, rank + i] = q[t, h, nope + i]: the rotary part, carried over.
__global__ void copy_rope_kernel(const float* q, std::int64_t q_stride_token,
                                 std::int64_t q_stride_head, float* q_abs,
                                 std::int64_t q_abs_stride_token, std::int64_t q_abs_stride_head,
                                 int nope, int rope, int rank) {
  const int row = static_cast<int>(blockIdx.x), head = static_cast<int>(blockIdx.y);
  for (int i = static_cast<int>(threadIdx.x); i < rope; i += blockDim.x) {
    q_abs[row * q_abs_stride_token + head * q_abs_stride_head + rank + i] =
        q[row * q_stride_token + head * q_stride_head + nope + i];
  }
}

}  // namespace

void launch_tensor_core_projection(const reference::Projection& p, cudaStream_t stream,
                                   std::int64_t w_stride_k) {
  if (p.rows == 0 || p.n_out == 0 || p.batch == 0) return;
  FF_CHECK(p.batch <= 65535 && (p.rows + kTileM - 1) / kTileM <= 65535 && w_stride_k >= 1,
           ErrorCode::kInvalidArgument, "MLA projection: batch ", p.batch, ", ", p.rows,
           " rows, w's k stride ", w_stride_k);
  using bf16 = __nv_bfloat16;
  const DType x = p.x_dtype, w = p.w_dtype, o = p.out_dtype;
  if (x == DType::kBF16 && w == DType::kBF16 && o == DType::kF32)
    return run<bf16, bf16, float>(p, w_stride_k, stream);
  if (x == DType::kF16 && w == DType::kF16 && o == DType::kF32)
    return run<__half, __half, float>(p, w_stride_k, stream);
  if (x == DType::kF32 && w == DType::kBF16 && o == DType::kBF16)
    return run<float, bf16, bf16>(p, w_stride_k, stream);
  if (x == DType::kF32 && w == DType::kF16 && o == DType::kF16)
    return run<float, __half, __half>(p, w_stride_k, stream);
  if (x == DType::kF32 && w == DType::kBF16 && o == DType::kF32)
    return run<float, bf16, float>(p, w_stride_k, stream);
  if (x == DType::kF32 && w == DType::kF16 && o == DType::kF32)
    return run<float, __half, float>(p, w_stride_k, stream);
  FF_THROW(ErrorCode::kUnsupported, "MLA: no tensor-core projection for ", name_of(x), " × ",
           name_of(w), " → ", name_of(o));
}

void launch_tensor_core_absorb_query(const MlaParams& params, const TensorView& q,
                                     const TensorView& kv_b_proj, const TensorView& q_abs, int rows,
                                     cudaStream_t stream) {
  if (rows == 0) return;
  const int nope = params.qk_nope_head_dim, rope = params.qk_rope_head_dim;
  const int rank = params.kv_lora_rank, v = params.v_head_dim;
  // W_UK[h] is rows [h·(nope + v), h·(nope + v) + nope) of kv_b_proj [·, rank]: element
  // (n = latent dim, k = nope dim) at k · rank + n.
  reference::Projection p;
  p.x = q.data();
  p.x_dtype = DType::kF32;
  p.x_stride_batch = q.stride(1);
  p.x_stride_row = q.stride(0);
  p.w = kv_b_proj.data();
  p.w_dtype = kv_b_proj.dtype();
  p.w_stride_batch = std::int64_t(nope + v) * rank;
  p.w_stride_n = 1;
  p.out = q_abs.data();
  p.out_dtype = DType::kF32;
  p.out_stride_batch = q_abs.stride(1);
  p.out_stride_row = q_abs.stride(0);
  p.batch = params.num_heads;
  p.rows = rows;
  p.n_out = rank;
  p.k = nope;
  launch_tensor_core_projection(p, stream, /*w_stride_k=*/rank);
  copy_rope_kernel<<<dim3(rows, params.num_heads), 64, 0, stream>>>(
      q.data_as<const float>(), q.stride(0), q.stride(1), q_abs.data_as<float>(), q_abs.stride(0),
      q_abs.stride(1), nope, rope, rank);
  FF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace freezeframe::mla_decode
