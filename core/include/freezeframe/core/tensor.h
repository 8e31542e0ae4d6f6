#pragma once
// TensorView: a non-owning view of memory as a strided n-d array (pointer, dtype, shape,
// strides in elements, device). Every buffer the engine hands out is a view into memory it
// owns elsewhere (the arena, a DeviceBuffer, a HostTensor); views never free anything.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "freezeframe/base/dtype.h"

namespace freezeframe {

enum class DeviceKind : std::uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::kCpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceKind::kCuda, index}; }
  friend bool operator==(const Device&, const Device&) = default;
};

class TensorView {
 public:
  static constexpr int kMaxDims = 6;

  /// An undefined view (no data): used for optional tensors.
  TensorView() = default;
  /// A contiguous (row-major) view.
  TensorView(void* data, DType dtype, std::span<const std::int64_t> shape, Device device);
  TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape, Device device)
      : TensorView(data, dtype, std::span<const std::int64_t>(shape.begin(), shape.size()),
                   device) {}
  /// A view with explicit strides (in elements).
  static TensorView strided(void* data, DType dtype, std::span<const std::int64_t> shape,
                            std::span<const std::int64_t> strides, Device device);

  [[nodiscard]] bool defined() const { return data_ != nullptr; }
  [[nodiscard]] void* data() const { return data_; }
  template <typename T>
  [[nodiscard]] T* data_as() const {
    return static_cast<T*>(data_);
  }
  [[nodiscard]] DType dtype() const { return dtype_; }
  [[nodiscard]] Device device() const { return device_; }
  [[nodiscard]] bool is_cuda() const { return device_.kind == DeviceKind::kCuda; }
  [[nodiscard]] int dim() const { return rank_; }
  [[nodiscard]] std::int64_t size(int d) const { return shape_[checked_dim(d)]; }
  [[nodiscard]] std::int64_t stride(int d) const { return strides_[checked_dim(d)]; }
  [[nodiscard]] std::span<const std::int64_t> shape() const {
    return {shape_.data(), size_t(rank_)};
  }
  [[nodiscard]] std::span<const std::int64_t> strides() const {
    return {strides_.data(), size_t(rank_)};
  }
  [[nodiscard]] std::int64_t numel() const;
  [[nodiscard]] bool is_contiguous() const;
  /// Bytes from the first to one past the last addressable element (what the view touches).
  [[nodiscard]] std::int64_t span_bytes() const;
  /// The view with dimension `d` fixed at `index` (one dimension fewer).
  [[nodiscard]] TensorView select(int d, std::int64_t index) const;
  /// The view of elements [start, start + length) along dimension `d`, the strides kept: rows
  /// of a tensor, or columns of each row (a projection's q, k or v inside qkv).
  [[nodiscard]] TensorView narrow(int d, std::int64_t start, std::int64_t length) const;
  /// The view with dimension `d` split in two, [outer, size(d) / outer], the strides kept: a
  /// row's heads ([T, H·D] → [T, H, D]), on any strided view.
  [[nodiscard]] TensorView unflatten(int d, std::int64_t outer) const;
  /// The same memory seen with another shape of the same element count (contiguous only).
  [[nodiscard]] TensorView reshape(std::span<const std::int64_t> shape) const;
  [[nodiscard]] TensorView reshape(std::initializer_list<std::int64_t> shape) const {
    return reshape(std::span<const std::int64_t>(shape.begin(), shape.size()));
  }
  /// "bf16[4, 32, 128]" — for error messages.
  [[nodiscard]] std::string describe() const;

 private:
  int checked_dim(int d) const;

  void* data_ = nullptr;
  DType dtype_ = DType::kU8;
  Device device_{};
  int rank_ = 0;
  std::array<std::int64_t, kMaxDims> shape_{};
  std::array<std::int64_t, kMaxDims> strides_{};
};

}  // namespace freezeframe
