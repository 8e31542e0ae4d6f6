#pragma once
// What the model kernels' GPU tests share: tolerances in units of the output dtype's roundoff,
// NaN-poisoned host tensors, column views and uploads.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/host_tensor.h"
#include "freezeframe/core/tensor.h"

namespace freezeframe::testing {

inline constexpr std::uint8_t kPoison = 0xFF;  // a NaN in bf16, f16 and f32

// Half an ulp of 1: bf16 keeps 8 significant bits, f16 11, f32 24.
inline double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return std::ldexp(1.0, -8);
    case DType::kF16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

// One rounding into `dtype` after f32 arithmetic: 2u·|scale| + floor, where `scale` is the
// magnitude the error is relative to (the result, or the operands where they can cancel).
inline ::testing::AssertionResult close(double got, double want, DType dtype, double scale,
                                        double floor = 1e-6) {
  const double bound = 2.0 * unit_roundoff(dtype) * std::abs(scale) + floor;
  if (std::isfinite(got) && std::abs(got - want) <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << got << ", want " << want << " (bound " << bound << ")";
}

inline bool poisoned(const HostTensor& t, std::int64_t i) {
  const std::size_t bytes = size_of(t.dtype());
  const std::uint8_t* p = t.data() + i * bytes;
  return std::all_of(p, p + bytes, [](std::uint8_t b) { return b == kPoison; });
}

inline HostTensor poisoned_tensor(DType dtype, std::initializer_list<std::int64_t> shape) {
  HostTensor t(dtype, shape);
  t.fill_bytes(kPoison);
  return t;
}

// The first `cols` columns of a 2-d device view, keeping its row stride.
inline TensorView first_columns(const TensorView& full, std::int64_t cols) {
  const std::int64_t shape[] = {full.size(0), cols};
  const std::int64_t strides[] = {full.stride(0), 1};
  return TensorView::strided(full.data(), full.dtype(), shape, strides, full.device());
}

template <typename T>
DeviceBuffer upload_vector(const std::vector<T>& values) {
  DeviceBuffer buffer(values.size() * sizeof(T));
  FF_CUDA_CHECK(cudaMemcpy(buffer.data(), values.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

}  // namespace freezeframe::testing
