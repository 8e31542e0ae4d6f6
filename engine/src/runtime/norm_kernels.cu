// RMS norm kernels of the built-in model: every row of a step, or chosen rows (the last token
// of each request, before the LM head), optionally quantised per row for an fp8 projection.
// One CTA per row; f32 sums and maxima reduced with CUB.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include "freezeframe/core/cuda_check.h"
#include "runtime/fp8_row_quant.cuh"
#include "runtime/kernel_support.cuh"
#include "runtime/model_kernels.h"

namespace freezeframe::model_kernels {
namespace {

using namespace detail;

// ---------------------------------------------------------------------------------------------
// rms_norm and rms_norm_rows

struct RmsNormParams {
  const void* in;
  std::int64_t in_stride;
  std::int64_t in_rows;           // rows of `in`, for the gather's bounds
  const std::int32_t* row_index;  // null: output row r reads input row r
  const void* weight;
  void* out;  // null: only the fp8 rows are written
  std::int64_t out_stride;
  Fp8RowsParams fp8;  // rows null: none
  int width;
  float eps;
};

// One CTA per output row. Pass 1 sums squares (f32) and reduces them through CUB; pass 2
// re-reads the row (now in L1/L2), scales and writes it. In place (in == out) is safe: every
// element is read by the thread that writes it, after the reduction. The input is of the
// output's dtype T or, for an f32 residual stream, f32. With kFp8, pass 2 also reduces the
// largest magnitude of the rounded results and pass 3 computes them again to write them
// quantised (in place is then not allowed: pass 3 reads `in` after pass 2 wrote `out`).
template <typename TIn, typename T, int kVec, int kThreads, bool kFp8>
__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const __grid_constant__ RmsNormParams p) {
  using BlockReduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename BlockReduce::TempStorage reduce_storage;
  __shared__ float s_inv_rms;

  const int row = blockIdx.x;
  const int units = p.width / kVec;
  T* out = p.out == nullptr ? nullptr : static_cast<T*>(p.out) + row * p.out_stride;
  std::int64_t src_row = row;
  if (p.row_index != nullptr) {
    src_row = p.row_index[row];
    // No row (−1: a padded request) gives a zero row. The bounds test also keeps a malformed
    // index from reading outside `in`. The branch is uniform across the CTA, so returning
    // before the reduction's barriers is safe. (rms_norm_rows has no fp8 form.)
    if (src_row < 0 || src_row >= p.in_rows) {
      Pack<T, kVec> zero;
#pragma unroll
      for (int j = 0; j < kVec; ++j) zero.v[j] = from_float<T>(0.0f);
      for (int u = threadIdx.x; u < units; u += kThreads) store<T, kVec>(out + u * kVec, zero);
      return;
    }
  }
  const TIn* in = static_cast<const TIn*>(p.in) + src_row * p.in_stride;
  const T* weight = static_cast<const T*>(p.weight);

  float sum_sq = 0.0f;
  for (int u = threadIdx.x; u < units; u += kThreads) {
    float x[kVec];
    load_floats<TIn, kVec>(in + u * kVec, x);
#pragma unroll
    for (int j = 0; j < kVec; ++j) sum_sq += x[j] * x[j];
  }
  const float total = BlockReduce(reduce_storage).Sum(sum_sq);
  if (threadIdx.x == 0) s_inv_rms = rsqrtf(total / static_cast<float>(p.width) + p.eps);
  __syncthreads();
  const float inv_rms = s_inv_rms;

  // The row's values rounded to T, as a 16-bit output holds them (and the fp8 rows quantise).
  auto normed = [&](int u, float(&y)[kVec]) {
    float x[kVec];
    load_floats<TIn, kVec>(in + u * kVec, x);
    const Pack<T, kVec> w = load<T, kVec>(weight + u * kVec);
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      y[j] = to_float(from_float<T>(x[j] * inv_rms * to_float(w.v[j])));
  };
  float amax = 0.0f;
  for (int u = threadIdx.x; u < units; u += kThreads) {
    float y[kVec];
    normed(u, y);
    if (out != nullptr) store_floats<T, kVec>(out + u * kVec, y);
    if constexpr (kFp8) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) amax = fmaxf(amax, fabsf(y[j]));
    }
  }
  if constexpr (kFp8) {
    __shared__ float s_amax;
    __syncthreads();  // reduce_storage is reused
    amax = BlockReduce(reduce_storage).Reduce(amax, ::cuda::maximum<>{});
    if (threadIdx.x == 0) {
      s_amax = amax;
      p.fp8.scale[row] = fp8_row_scale(amax);
    }
    __syncthreads();
    const float multiplier = fp8_row_multiplier(s_amax);
    __nv_fp8_e4m3* q = p.fp8.rows + row * p.fp8.stride;
    for (int u = threadIdx.x; u < units; u += kThreads) {
      float y[kVec];
      normed(u, y);
      store_fp8<kVec>(q + u * kVec, y, multiplier);
    }
  }
}

template <typename TIn, typename T, int kVec, int kThreads>
void launch_rms_norm(const RmsNormParams& p, int rows, cudaStream_t stream) {
  if (p.fp8.rows != nullptr) {
    rms_norm_kernel<TIn, T, kVec, kThreads, true><<<rows, kThreads, 0, stream>>>(p);
  } else {
    rms_norm_kernel<TIn, T, kVec, kThreads, false><<<rows, kThreads, 0, stream>>>(p);
  }
  FF_CHECK_LAUNCH();
}

// CTA size: few rows get big CTAs (each row is a CTA, so with few rows the per-row latency is
// the step's latency); many rows get 256 threads, so several CTAs share an SM. Never more
// threads than packs, down to 128.
template <typename TIn, typename T, int kVec>
void dispatch_rms_norm(const RmsNormParams& p, int rows, cudaStream_t stream) {
  const int units = p.width / kVec;
  int threads = rows < 256 ? 1024 : 256;
  while (threads > 128 && threads / 2 >= units) threads /= 2;
  switch (threads) {
    case 1024: return launch_rms_norm<TIn, T, kVec, 1024>(p, rows, stream);
    case 512: return launch_rms_norm<TIn, T, kVec, 512>(p, rows, stream);
    case 256: return launch_rms_norm<TIn, T, kVec, 256>(p, rows, stream);
    default: return launch_rms_norm<TIn, T, kVec, 128>(p, rows, stream);
  }
}

void run_rms_norm(const char* fn, const TensorView& in, const TensorView& weight, float eps,
                  const TensorView& out, const Fp8RowsOut* fp8, int rows,
                  std::int64_t in_rows_needed, const std::int32_t* row_index, cudaStream_t stream) {
  using E = ErrorCode;
  const std::int64_t width = check_matrix(fn, "in", in, in_rows_needed, false, true);
  // The 16-bit output is optional only beside fp8 rows; its dtype is the weight's.
  if (fp8 == nullptr || out.defined()) {
    check_matrix(fn, "out", out, rows, true);
    FF_CHECK(out.size(1) == width, E::kInvalidArgument, fn, ": out ", out.describe(), " and in ",
             in.describe(), " differ in width");
    check_same(fn, out, "out", weight, "weight");
    FF_CHECK(in.device() == out.device(), E::kInvalidArgument, fn,
             ": in and out are on different devices");
  }
  FF_CHECK(weight.defined() && weight.is_cuda() && weight.dim() == 1 && weight.size(0) == width &&
               weight.stride(0) == 1 && is_model_dtype(weight.dtype()),
           E::kInvalidArgument, fn, ": weight must be a contiguous bf16 or f16 device tensor [",
           width, "], got ", describe(weight));
  if (in.dtype() != DType::kF32) check_same(fn, in, "in", weight, "weight");
  FF_CHECK(std::isfinite(eps) && eps >= 0.0f, E::kInvalidArgument, fn,
           ": eps must be finite and ≥ 0, got ", eps);
  RmsNormParams p{};
  if (fp8 != nullptr) {
    p.fp8 = check_fp8_rows(fn, *fp8, rows, width);
    FF_CHECK(!out.defined() || out.data() != in.data(), E::kInvalidArgument, fn,
             ": with fp8 rows, out must not be in (the fp8 pass reads in again)");
  }
  if (rows == 0) return;

  p.in = in.data();
  p.in_stride = in.stride(0);
  p.in_rows = in.size(0);
  p.row_index = row_index;
  p.weight = weight.data();
  p.out = out.defined() ? out.data() : nullptr;
  p.out_stride = out.defined() ? out.stride(0) : 0;
  p.width = static_cast<int>(width);
  p.eps = eps;
  dispatch_model_dtype(weight.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = kVec16<T>;
    const bool vector = rows_vectorizable(in, width, kVec) &&
                        (!out.defined() || rows_vectorizable(out, width, kVec)) &&
                        aligned16(weight.data()) &&
                        (fp8 == nullptr || fp8_rows_vectorizable(p.fp8, kVec));
    dispatch_f32_or(in.dtype(), tag, [&](auto in_tag) {
      using TIn = typename decltype(in_tag)::type;
      if (vector) {
        dispatch_rms_norm<TIn, T, kVec>(p, rows, stream);
      } else {
        dispatch_rms_norm<TIn, T, 1>(p, rows, stream);
      }
    });
  });
}

}  // namespace

void rms_norm(const TensorView& in, const TensorView& weight, float eps, const TensorView& out,
              int rows, cudaStream_t stream) {
  check_rows_arg("rms_norm", "rows", rows);
  run_rms_norm("rms_norm", in, weight, eps, out, nullptr, rows, rows, nullptr, stream);
}

void rms_norm_fp8(const TensorView& in, const TensorView& weight, float eps, const TensorView& out,
                  const Fp8RowsOut& fp8, int rows, cudaStream_t stream) {
  check_rows_arg("rms_norm_fp8", "rows", rows);
  run_rms_norm("rms_norm_fp8", in, weight, eps, out, &fp8, rows, rows, nullptr, stream);
}

void rms_norm_rows(const TensorView& in, const std::int32_t* row_index, int rows,
                   const TensorView& weight, float eps, const TensorView& out,
                   cudaStream_t stream) {
  constexpr const char* fn = "rms_norm_rows";
  check_rows_arg(fn, "rows", rows);
  FF_CHECK(rows == 0 || row_index != nullptr, ErrorCode::kInvalidArgument, fn,
           ": row_index is null");
  run_rms_norm(fn, in, weight, eps, out, nullptr, rows, 0, row_index, stream);
}

}  // namespace freezeframe::model_kernels
