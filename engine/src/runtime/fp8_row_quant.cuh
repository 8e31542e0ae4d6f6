#pragma once
// The per-row fp8 quantisation a W8A8 projection's input gets, shared by the kernel that does
// only that (quantize_rows_fp8) and the ones that fuse it after their own arithmetic (rms_norm,
// silu_and_mul), so all three write the same bytes and scales: scale = max|row| / 448 (1 for a
// row of zeros), each value times 448 / max|row| rounded to e4m3 (nearest even, saturating).
// Private to runtime/.

#include <cuda_fp8.h>

#include <cstdint>

#include "freezeframe/base/error.h"
#include "runtime/kernel_support.cuh"
#include "runtime/model_kernels.h"

namespace freezeframe::model_kernels::detail {

constexpr float kE4m3Max = 448.0f;

/// What multiplies a row whose largest magnitude is `amax`.
__device__ __forceinline__ float fp8_row_multiplier(float amax) {
  return amax > 0.0f ? kE4m3Max / amax : 1.0f;
}
/// The row's scale, as the GEMM reads it.
__device__ __forceinline__ float fp8_row_scale(float amax) {
  return amax > 0.0f ? amax / kE4m3Max : 1.0f;
}

/// kN values times `multiplier`, rounded to e4m3, stored as one access of kN bytes.
template <int kN>
__device__ __forceinline__ void store_fp8(__nv_fp8_e4m3* p, const float (&x)[kN],
                                          float multiplier) {
  Pack<__nv_fp8_e4m3, kN> q;
#pragma unroll
  for (int j = 0; j < kN; ++j) q.v[j] = __nv_fp8_e4m3(x[j] * multiplier);
  *reinterpret_cast<Pack<__nv_fp8_e4m3, kN>*>(p) = q;
}

/// The device pointers of an Fp8RowsOut.
struct Fp8RowsParams {
  __nv_fp8_e4m3* rows = nullptr;
  std::int64_t stride = 0;
  float* scale = nullptr;
};

/// Checks `fp8` as the quantised copy of `rows` rows `width` wide and returns its pointers.
inline Fp8RowsParams check_fp8_rows(const char* fn, const Fp8RowsOut& fp8, int rows,
                                    std::int64_t width) {
  const TensorView& q = fp8.rows;
  FF_CHECK(q.defined() && q.is_cuda() && q.dim() == 2 && q.dtype() == DType::kFp8E4M3 &&
               q.size(1) == width && q.size(0) >= rows && q.stride(1) == 1 && q.stride(0) >= width,
           ErrorCode::kInvalidArgument, fn, ": the fp8 rows must be a device fp8_e4m3 matrix [≥ ",
           rows, ", ", width, "] with unit column stride, got ", describe(q));
  FF_CHECK(fp8.scale != nullptr || rows == 0, ErrorCode::kInvalidArgument, fn,
           ": the fp8 rows need a scale per row");
  return {static_cast<__nv_fp8_e4m3*>(q.data()), q.stride(0), fp8.scale};
}

/// Whether packs of `vec` fp8 values can be stored in rows of `q`.
inline bool fp8_rows_vectorizable(const Fp8RowsParams& q, int vec) {
  return reinterpret_cast<std::uintptr_t>(q.rows) % vec == 0 && q.stride % vec == 0;
}

}  // namespace freezeframe::model_kernels::detail
