#pragma once
// What the built-in model's element-wise kernels share: packed 16-byte accesses, the dtype
// dispatch, launch-size helpers and the host-side argument checks. Private to model/.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "freezeframe/base/error.h"
#include "freezeframe/core/convert.cuh"
#include "freezeframe/core/tensor.h"

namespace freezeframe::model_kernels::detail {

// ---------------------------------------------------------------------------------------------
// Device helpers

using kernels::from_float;
using kernels::to_float;

// kN consecutive elements moved as one access: 16 bytes when kN · sizeof(T) == 16.
template <typename T, int kN>
struct alignas(sizeof(T) * kN) Pack {
  T v[kN];
};

template <typename T, int kN>
__device__ __forceinline__ Pack<T, kN> load(const T* p) {
  return *reinterpret_cast<const Pack<T, kN>*>(p);
}
template <typename T, int kN>
__device__ __forceinline__ void store(T* p, const Pack<T, kN>& value) {
  *reinterpret_cast<Pack<T, kN>*>(p) = value;
}

// silu(gate) · up = gate / (1 + e^−gate) · up: for very negative gate the denominator is +inf
// and the result −0, not NaN.
__device__ __forceinline__ float silu_times(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

// Elements per 16-byte access.
template <typename T>
constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// kN consecutive elements as floats, in accesses of at most 16 bytes (an f32 residual row read
// in packs as wide as a 16-bit one's: two accesses each).
template <typename T, int kN>
__device__ __forceinline__ void load_floats(const T* p, float (&f)[kN]) {
  constexpr int kChunk = kN < kVec16<T> ? kN : kVec16<T>;
#pragma unroll
  for (int c = 0; c < kN; c += kChunk) {
    const Pack<T, kChunk> x = load<T, kChunk>(p + c);
#pragma unroll
    for (int j = 0; j < kChunk; ++j) f[c + j] = to_float(x.v[j]);
  }
}
template <typename T, int kN>
__device__ __forceinline__ void store_floats(T* p, const float (&f)[kN]) {
  constexpr int kChunk = kN < kVec16<T> ? kN : kVec16<T>;
#pragma unroll
  for (int c = 0; c < kN; c += kChunk) {
    Pack<T, kChunk> y;
#pragma unroll
    for (int j = 0; j < kChunk; ++j) y.v[j] = from_float<T>(f[c + j]);
    store<T, kChunk>(p + c, y);
  }
}

// ---------------------------------------------------------------------------------------------
// Host helpers

inline constexpr int kWarp = 32;
inline constexpr int kMaxGridY = 65535;

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for the model dtype; callers have validated it.
template <typename F>
inline void dispatch_model_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kBF16: return f(TypeTag<__nv_bfloat16>{});
    case DType::kF16: return f(TypeTag<__half>{});
    default: break;
  }
  FF_THROW(ErrorCode::kInternal, "model kernel dispatched on ", name_of(dtype));
}

// Calls f(TypeTag<float>{}) for f32 (a residual stream kept in f32), else f(model_tag): the
// model dtype a kernel's other tensors have.
template <typename Tag, typename F>
inline void dispatch_f32_or(DType dtype, Tag model_tag, F&& f) {
  if (dtype == DType::kF32) {
    f(TypeTag<float>{});
  } else {
    f(model_tag);
  }
}

inline bool is_model_dtype(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

inline std::string describe(const TensorView& t) { return t.defined() ? t.describe() : "nothing"; }

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Whether rows of `t` (width elements from column 0) can be moved in packs of `vec` elements.
inline bool rows_vectorizable(const TensorView& t, std::int64_t width, int vec) {
  return aligned16(t.data()) && width % vec == 0 && t.stride(0) % vec == 0;
}

inline int threads_for(std::int64_t units, int max_threads) {
  const std::int64_t rounded = (units + kWarp - 1) / kWarp * kWarp;
  return static_cast<int>(std::clamp<std::int64_t>(rounded, kWarp, max_threads));
}

// A device matrix [≥ rows, width] of the model dtype (or, for a residual stream, f32) with unit
// column stride, whose rows do not overlap when it is written. Returns its width.
inline std::int64_t check_matrix(const char* fn, const char* name, const TensorView& t,
                                 std::int64_t rows, bool written, bool residual = false) {
  using E = ErrorCode;
  FF_CHECK(t.defined() && t.is_cuda() && t.dim() == 2, E::kInvalidArgument, fn, ": ", name,
           " must be a 2-d device tensor, got ", describe(t));
  FF_CHECK(is_model_dtype(t.dtype()) || (residual && t.dtype() == DType::kF32), E::kInvalidArgument,
           fn, ": ", name,
           residual ? " must be bf16, f16 or f32, got " : " must be bf16 or f16, got ",
           t.describe());
  const std::int64_t width = t.size(1);
  FF_CHECK(width >= 1 && width <= INT_MAX, E::kInvalidArgument, fn, ": ", name,
           " has an unsupported width: ", t.describe());
  FF_CHECK(t.stride(1) == 1, E::kInvalidArgument, fn, ": ", name,
           " needs unit stride along its rows, got strides [", t.stride(0), ", ", t.stride(1), "]");
  FF_CHECK(t.size(0) >= rows, E::kInvalidArgument, fn, ": ", name, " ", t.describe(),
           " has fewer than ", rows, " rows");
  FF_CHECK(!written || rows <= 1 || t.stride(0) >= width, E::kInvalidArgument, fn, ": ", name,
           " rows overlap (row stride ", t.stride(0), " < width ", width, ")");
  return width;
}

inline void check_rows_arg(const char* fn, const char* what, int rows) {
  FF_CHECK(rows >= 0, ErrorCode::kInvalidArgument, fn, ": ", what, " must be ≥ 0, got ", rows);
}

inline void check_same(const char* fn, const TensorView& a, const char* a_name, const TensorView& b,
                       const char* b_name) {
  FF_CHECK(a.dtype() == b.dtype(), ErrorCode::kInvalidArgument, fn, ": ", a_name, " is ",
           name_of(a.dtype()), " but ", b_name, " is ", name_of(b.dtype()));
  FF_CHECK(a.device() == b.device(), ErrorCode::kInvalidArgument, fn, ": ", a_name, " and ", b_name,
           " are on different devices");
}

}  // namespace freezeframe::model_kernels::detail
