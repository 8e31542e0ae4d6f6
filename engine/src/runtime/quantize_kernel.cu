// The per-row fp8 quantisation of a W8A8 projection's input, alone (quantize_rows_fp8: the
// attention output before o_proj) or after SiLU·mul (silu_and_mul_fp8: the MLP's activation
// before down_proj). One CTA per row: the row's values and their largest magnitude (reduced
// through CUB), then the values again, times 448 / that, rounded to e4m3 (fp8_row_quant.cuh).
// The values are computed twice rather than held: a row is up to 28k values, and the second
// pass reads it from L1/L2.

#include <cuda_fp8.h>

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include "freezeframe/core/cuda_check.h"
#include "runtime/fp8_row_quant.cuh"
#include "runtime/kernel_support.cuh"
#include "runtime/model_kernels.h"

namespace freezeframe::model_kernels {
namespace {

using namespace detail;

/// A row's values as they are: bf16, f16 or f32.
struct PlainRows {
  const void* in;
  std::int64_t stride;
  template <typename T, int kVec>
  __device__ __forceinline__ void values(int row, int unit, float (&y)[kVec]) const {
    load_floats<T, kVec>(static_cast<const T*>(in) + row * stride + unit * kVec, y);
  }
  template <typename T, int kVec>
  __device__ __forceinline__ void store(int, int, const float (&)[kVec]) const {}
};

/// silu(gate) · up, rounded to the model's dtype as silu_and_mul writes it, and written so
/// when `out` is not null.
struct SiluRows {
  const void* gate_up;
  std::int64_t stride;
  int inter;
  void* out;
  std::int64_t out_stride;
  template <typename T, int kVec>
  __device__ __forceinline__ void values(int row, int unit, float (&y)[kVec]) const {
    const T* gate = static_cast<const T*>(gate_up) + row * stride + unit * kVec;
    const Pack<T, kVec> g = load<T, kVec>(gate);
    const Pack<T, kVec> u = load<T, kVec>(gate + inter);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      y[j] = to_float(from_float<T>(silu_times(to_float(g.v[j]), to_float(u.v[j]))));
    }
  }
  template <typename T, int kVec>
  __device__ __forceinline__ void store(int row, int unit, const float (&y)[kVec]) const {
    if (out != nullptr) {
      store_floats<T, kVec>(static_cast<T*>(out) + row * out_stride + unit * kVec, y);
    }
  }
};

template <typename T, int kVec, int kThreads, class Rows>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const __grid_constant__ Rows rows, const __grid_constant__ Fp8RowsParams q,
                         int width) {
  using BlockReduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename BlockReduce::TempStorage reduce_storage;
  __shared__ float s_amax;
  const int row = blockIdx.x;
  const int units = width / kVec;
  float amax = 0.0f;
  for (int u = threadIdx.x; u < units; u += kThreads) {
    float y[kVec];
    rows.template values<T, kVec>(row, u, y);
    rows.template store<T, kVec>(row, u, y);
#pragma unroll
    for (int j = 0; j < kVec; ++j) amax = fmaxf(amax, fabsf(y[j]));
  }
  amax = BlockReduce(reduce_storage).Reduce(amax, ::cuda::maximum<>{});
  if (threadIdx.x == 0) {
    s_amax = amax;
    q.scale[row] = fp8_row_scale(amax);
  }
  __syncthreads();
  const float multiplier = fp8_row_multiplier(s_amax);
  __nv_fp8_e4m3* out = q.rows + row * q.stride;
  for (int u = threadIdx.x; u < units; u += kThreads) {
    float y[kVec];
    rows.template values<T, kVec>(row, u, y);
    store_fp8<kVec>(out + u * kVec, y, multiplier);
  }
}

// CTA size as the norm's: few rows get big CTAs (a row's latency is then the step's), many get
// 256 threads; never more threads than packs, down to 128.
template <typename T, int kVec, class Rows>
void launch_quantize_rows(const Rows& r, const Fp8RowsParams& q, int width, int rows,
                          cudaStream_t stream) {
  const int units = width / kVec;
  int threads = rows < 256 ? 1024 : 256;
  while (threads > 128 && threads / 2 >= units) threads /= 2;
  switch (threads) {
    case 1024: quantize_rows_kernel<T, kVec, 1024><<<rows, 1024, 0, stream>>>(r, q, width); break;
    case 512: quantize_rows_kernel<T, kVec, 512><<<rows, 512, 0, stream>>>(r, q, width); break;
    case 256: quantize_rows_kernel<T, kVec, 256><<<rows, 256, 0, stream>>>(r, q, width); break;
    default: quantize_rows_kernel<T, kVec, 128><<<rows, 128, 0, stream>>>(r, q, width); break;
  }
  FF_CHECK_LAUNCH();
}

}  // namespace

void quantize_rows_fp8(const TensorView& in, const TensorView& out, float* scale, int rows,
                       cudaStream_t stream) {
  constexpr const char* fn = "quantize_rows_fp8";
  check_rows_arg(fn, "rows", rows);
  const std::int64_t width = check_matrix(fn, "in", in, rows, false, true);
  const Fp8RowsParams q = check_fp8_rows(fn, {out, scale}, rows, width);
  if (rows == 0) return;
  const PlainRows r{in.data(), in.stride(0)};
  auto launch = [&]<typename T>(TypeTag<T>) {
    constexpr int kVec = kVec16<T>;
    if (rows_vectorizable(in, width, kVec) && fp8_rows_vectorizable(q, kVec)) {
      launch_quantize_rows<T, kVec>(r, q, static_cast<int>(width), rows, stream);
    } else {
      launch_quantize_rows<T, 1>(r, q, static_cast<int>(width), rows, stream);
    }
  };
  if (in.dtype() == DType::kF32) return launch(TypeTag<float>{});
  dispatch_model_dtype(in.dtype(), launch);
}

void silu_and_mul_fp8(const TensorView& gate_up, const TensorView& out, const Fp8RowsOut& fp8,
                      int rows, cudaStream_t stream) {
  using E = ErrorCode;
  constexpr const char* fn = "silu_and_mul_fp8";
  check_rows_arg(fn, "rows", rows);
  const std::int64_t width = check_matrix(fn, "gate_up", gate_up, rows, false);
  FF_CHECK(width % 2 == 0, E::kInvalidArgument, fn, ": gate_up ", gate_up.describe(),
           " must hold gate and up side by side (an even width)");
  const std::int64_t inter = width / 2;
  if (out.defined()) {
    FF_CHECK(check_matrix(fn, "out", out, rows, true) == inter, E::kInvalidArgument, fn,
             ": gate_up ", gate_up.describe(), " must be twice as wide as out ", out.describe());
    check_same(fn, gate_up, "gate_up", out, "out");
  }
  const Fp8RowsParams q = check_fp8_rows(fn, fp8, rows, inter);
  if (rows == 0) return;
  const SiluRows r{gate_up.data(), gate_up.stride(0), static_cast<int>(inter),
                   out.defined() ? out.data() : nullptr, out.defined() ? out.stride(0) : 0};
  dispatch_model_dtype(gate_up.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = kVec16<T>;
    // inter % kVec keeps the up half's packs aligned as well.
    const bool vector = rows_vectorizable(gate_up, width, kVec) && inter % kVec == 0 &&
                        (!out.defined() || rows_vectorizable(out, inter, kVec)) &&
                        fp8_rows_vectorizable(q, kVec);
    if (vector) {
      launch_quantize_rows<T, kVec>(r, q, static_cast<int>(inter), rows, stream);
    } else {
      launch_quantize_rows<T, 1>(r, q, static_cast<int>(inter), rows, stream);
    }
  });
}

}  // namespace freezeframe::model_kernels
