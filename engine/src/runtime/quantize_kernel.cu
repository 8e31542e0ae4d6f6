// quantize_rows_fp8: the per-token fp8 quantisation of a W8A8 projection's input. One CTA per
// row: the row's largest magnitude (reduced through CUB), then the row times 448 / that,
// rounded to e4m3.

#include <cuda_fp8.h>

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>
#include <type_traits>

#include "freezeframe/core/cuda_check.h"
#include "runtime/kernel_support.cuh"
#include "runtime/model_kernels.h"

namespace freezeframe::model_kernels {
namespace {

using namespace detail;

constexpr float kE4m3Max = 448.0f;
constexpr int kThreads = 256;

struct QuantizeParams {
  const void* in;
  std::int64_t in_stride;
  __nv_fp8_e4m3* out;
  std::int64_t out_stride;
  float* scale;
  int width;
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const __grid_constant__ QuantizeParams p) {
  using BlockReduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename BlockReduce::TempStorage reduce_storage;
  __shared__ float s_amax;
  const T* in = static_cast<const T*>(p.in) + blockIdx.x * p.in_stride;
  float amax = 0.0f;
  for (int c = threadIdx.x; c < p.width; c += kThreads) amax = fmaxf(amax, fabsf(to_float(in[c])));
  amax = BlockReduce(reduce_storage).Reduce(amax, ::cuda::maximum<>{});
  if (threadIdx.x == 0) s_amax = amax;
  __syncthreads();
  amax = s_amax;
  // A row of zeros keeps a scale of 1 (its values are 0 whatever the scale).
  const float inv = amax > 0.0f ? kE4m3Max / amax : 1.0f;
  if (threadIdx.x == 0) p.scale[blockIdx.x] = amax > 0.0f ? amax / kE4m3Max : 1.0f;
  __nv_fp8_e4m3* out = p.out + blockIdx.x * p.out_stride;
  for (int c = threadIdx.x; c < p.width; c += kThreads) {
    out[c] = __nv_fp8_e4m3(to_float(in[c]) * inv);  // nearest even, saturating to ±448
  }
}

}  // namespace

void quantize_rows_fp8(const TensorView& in, const TensorView& out, float* scale, int rows,
                       cudaStream_t stream) {
  using E = ErrorCode;
  constexpr const char* fn = "quantize_rows_fp8";
  check_rows_arg(fn, "rows", rows);
  const std::int64_t width = check_matrix(fn, "in", in, rows, false, true);
  FF_CHECK(out.defined() && out.is_cuda() && out.dim() == 2 && out.dtype() == DType::kFp8E4M3 &&
               out.size(1) == width && out.size(0) >= rows && out.stride(1) == 1 &&
               out.stride(0) >= width,
           E::kInvalidArgument, fn, ": out must be a device fp8_e4m3 matrix [≥ ", rows, ", ", width,
           "] with unit column stride, got ", describe(out));
  FF_CHECK(scale != nullptr || rows == 0, E::kInvalidArgument, fn, ": needs a scale per row");
  if (rows == 0) return;
  QuantizeParams p{};
  p.in = in.data();
  p.in_stride = in.stride(0);
  p.out = static_cast<__nv_fp8_e4m3*>(out.data());
  p.out_stride = out.stride(0);
  p.scale = scale;
  p.width = static_cast<int>(width);
  dispatch_f32_or(in.dtype(), TypeTag<__nv_bfloat16>{}, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float>) {
      quantize_rows_kernel<float><<<rows, kThreads, 0, stream>>>(p);
    } else if (in.dtype() == DType::kF16) {
      quantize_rows_kernel<__half><<<rows, kThreads, 0, stream>>>(p);
    } else {
      quantize_rows_kernel<__nv_bfloat16><<<rows, kThreads, 0, stream>>>(p);
    }
    FF_CHECK_LAUNCH();
  });
}

}  // namespace freezeframe::model_kernels
