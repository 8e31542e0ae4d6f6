#pragma once
// Arena: the memory of a MemoryPlan, made once, handed out as views. The engine allocates one
// device buffer at construction and takes every tensor as a view into it; each view is checked
// against its region, so a plan and the code using it cannot silently disagree.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

#include "freezeframe/base/dtype.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/tensor.h"
#include "freezeframe/memory/memory_plan.h"

namespace freezeframe {

class Arena {
 public:
  /// One device allocation of plan.used_bytes() on the current device. Checks the plan fits its
  /// capacity first (kOutOfMemory naming the region), so nothing is allocated for a bad plan.
  [[nodiscard]] static Arena allocate(const MemoryPlan& plan);
  /// Memory the caller owns (an embedder's buffer, or host memory in tests): `bytes` at `base`,
  /// aligned to MemoryPlan::kAlignment. Throws kOutOfMemory when a region does not fit.
  [[nodiscard]] static Arena borrow(const MemoryPlan& plan, void* base, std::int64_t bytes,
                                    Device device);

  Arena(Arena&&) noexcept = default;
  Arena& operator=(Arena&&) noexcept = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  [[nodiscard]] const MemoryPlan& plan() const { return plan_; }
  [[nodiscard]] std::byte* base() const { return base_; }
  [[nodiscard]] std::int64_t bytes() const { return bytes_; }
  [[nodiscard]] Device device() const { return device_; }

  /// First byte of `region`.
  [[nodiscard]] std::byte* data(std::string_view region) const;
  /// A contiguous view of `shape` starting `offset` bytes into `region`. Throws kOutOfMemory
  /// when the view would reach past the region's end, kInvalidArgument for a negative or
  /// misaligned offset.
  [[nodiscard]] TensorView view(std::string_view region, DType dtype,
                                std::span<const std::int64_t> shape, std::int64_t offset = 0) const;
  [[nodiscard]] TensorView view(std::string_view region, DType dtype,
                                std::initializer_list<std::int64_t> shape,
                                std::int64_t offset = 0) const {
    return view(region, dtype, std::span<const std::int64_t>(shape.begin(), shape.size()), offset);
  }
  /// Like view, with explicit strides (in elements): the checked span is what the strides reach.
  [[nodiscard]] TensorView strided_view(std::string_view region, DType dtype,
                                        std::span<const std::int64_t> shape,
                                        std::span<const std::int64_t> strides,
                                        std::int64_t offset = 0) const;
  /// First byte of the placement called `name` inside `region`, after checking that `bytes`
  /// fit it (kOutOfMemory otherwise): for views a backend builds itself (a strided KV cache).
  [[nodiscard]] std::byte* placement_data(std::string_view region, std::string_view name,
                                          std::int64_t bytes) const;
  /// The placement called `name` inside `region`, seen as `shape`, which must fit it.
  [[nodiscard]] TensorView placement_view(std::string_view region, std::string_view name,
                                          DType dtype, std::span<const std::int64_t> shape) const;

 private:
  Arena(const MemoryPlan& plan, std::byte* base, std::int64_t bytes, Device device,
        DeviceBuffer owned);
  const Placement& placement(std::string_view region, std::string_view name) const;
  TensorView checked(const MemoryRegion& region, const TensorView& view, std::int64_t offset,
                     std::int64_t limit) const;

  MemoryPlan plan_;  // a copy: views stay checkable whatever happens to the caller's plan
  std::byte* base_ = nullptr;
  std::int64_t bytes_ = 0;
  Device device_{};
  DeviceBuffer owned_;
};

}  // namespace freezeframe
