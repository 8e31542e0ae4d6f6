#pragma once
// HostTensor: a contiguous tensor in ordinary host memory that owns its bytes. Used by the
// host reference, tests, tools and examples to build inputs and read results back.

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "freezeframe/core/tensor.h"

namespace freezeframe {

class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::span<const std::int64_t> shape);
  HostTensor(DType dtype, std::initializer_list<std::int64_t> shape)
      : HostTensor(dtype, std::span<const std::int64_t>(shape.begin(), shape.size())) {}

  /// A view of these bytes (valid while this object lives and is not resized).
  [[nodiscard]] TensorView view() { return view_with_data(bytes_.data()); }
  [[nodiscard]] TensorView view() const {
    return view_with_data(const_cast<std::uint8_t*>(bytes_.data()));
  }
  [[nodiscard]] DType dtype() const { return dtype_; }
  [[nodiscard]] std::span<const std::int64_t> shape() const { return shape_; }
  [[nodiscard]] std::int64_t numel() const;
  [[nodiscard]] std::size_t bytes() const { return bytes_.size(); }
  [[nodiscard]] std::uint8_t* data() { return bytes_.data(); }
  [[nodiscard]] const std::uint8_t* data() const { return bytes_.data(); }

  /// Element i (flat, row-major) converted to float / written from float (rounded).
  [[nodiscard]] float get(std::int64_t i) const;
  void set(std::int64_t i, float value);
  /// Every byte set to `byte`: used to poison outputs so unwritten elements show.
  void fill_bytes(std::uint8_t byte);

 private:
  TensorView view_with_data(std::uint8_t* data) const;

  DType dtype_ = DType::kU8;
  std::vector<std::int64_t> shape_;
  std::vector<std::uint8_t> bytes_;
};

}  // namespace freezeframe
