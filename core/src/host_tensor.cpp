#include "freezeframe/core/host_tensor.h"
#include "freezeframe/core/element_value.h"

#include <algorithm>

#include "freezeframe/base/error.h"

namespace freezeframe {

HostTensor::HostTensor(DType dtype, std::span<const std::int64_t> shape)
    : dtype_(dtype), shape_(shape.begin(), shape.end()) {
  bytes_.resize(static_cast<std::size_t>(numel()) * size_of(dtype));
}

std::int64_t HostTensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t s : shape_) n *= s;
  return n;
}

float HostTensor::get(std::int64_t i) const {
  FF_CHECK(i >= 0 && i < numel(), ErrorCode::kInvalidArgument, "element ", i, " out of range for ",
           numel(), " elements");
  return load_as_float(bytes_.data() + i * size_of(dtype_), dtype_);
}

void HostTensor::set(std::int64_t i, float value) {
  FF_CHECK(i >= 0 && i < numel(), ErrorCode::kInvalidArgument, "element ", i, " out of range for ",
           numel(), " elements");
  store_from_float(bytes_.data() + i * size_of(dtype_), dtype_, value);
}

void HostTensor::fill_bytes(std::uint8_t byte) { std::fill(bytes_.begin(), bytes_.end(), byte); }

TensorView HostTensor::view_with_data(std::uint8_t* data) const {
  return TensorView(data, dtype_, std::span<const std::int64_t>(shape_), Device::cpu());
}

}  // namespace freezeframe
