#include "freezeframe/memory/arena.h"

#include <cstdint>
#include <utility>

#include "freezeframe/base/printable.h"
#include "freezeframe/core/cuda_check.h"

namespace freezeframe {

Arena Arena::allocate(const MemoryPlan& plan) {
  plan.check_fits();  // before cudaMalloc: a bad plan allocates nothing
  int device = 0;
  FF_CUDA_CHECK(cudaGetDevice(&device));
  DeviceBuffer buffer(static_cast<std::size_t>(plan.used_bytes()));
  auto* base = static_cast<std::byte*>(buffer.data());
  return Arena(plan, base, plan.used_bytes(), Device::cuda(device), std::move(buffer));
}

Arena Arena::borrow(const MemoryPlan& plan, void* base, std::int64_t bytes, Device device) {
  return Arena(plan, static_cast<std::byte*>(base), bytes, device, DeviceBuffer());
}

Arena::Arena(const MemoryPlan& plan, std::byte* base, std::int64_t bytes, Device device,
             DeviceBuffer owned)
    : plan_(plan), base_(base), bytes_(bytes), device_(device), owned_(std::move(owned)) {
  FF_CHECK(bytes >= 0, ErrorCode::kInvalidArgument, "arena size must be non-negative, got ", bytes);
  FF_CHECK(base != nullptr || plan.used_bytes() == 0, ErrorCode::kInvalidArgument,
           "arena memory is null but the plan needs ", plan.used_bytes(), " bytes");
  FF_CHECK(reinterpret_cast<std::uintptr_t>(base) % MemoryPlan::kAlignment == 0,
           ErrorCode::kInvalidArgument, "arena memory must be aligned to ", MemoryPlan::kAlignment,
           " bytes");
  for (const MemoryRegion& r : plan.regions()) {
    FF_CHECK(r.offset % MemoryPlan::kAlignment == 0, ErrorCode::kInternal, "region '", r.name,
             "' starts at ", r.offset, ", not a multiple of ", MemoryPlan::kAlignment);
    FF_CHECK(r.end() <= bytes, ErrorCode::kOutOfMemory, "region '", r.name, "' (",
             format_bytes(r.bytes), " at offset ", r.offset, ") does not fit an arena of ", bytes,
             " bytes (", format_bytes(bytes), "): ", r.end() - bytes, " bytes short");
  }
}

std::byte* Arena::data(std::string_view region) const {
  return base_ + plan_.region(region).offset;
}

TensorView Arena::checked(const MemoryRegion& region, const TensorView& view, std::int64_t offset,
                          std::int64_t limit) const {
  const std::int64_t span = view.span_bytes();
  FF_CHECK(offset + span <= limit, ErrorCode::kOutOfMemory, "a view ", view.describe(), " of ",
           span, " bytes at offset ", offset, " reaches past the end of region '", region.name,
           "' (", limit, " bytes) by ", offset + span - limit, " bytes");
  return view;
}

TensorView Arena::view(std::string_view region_name, DType dtype,
                       std::span<const std::int64_t> shape, std::int64_t offset) const {
  const MemoryRegion& region = plan_.region(region_name);
  FF_CHECK(offset >= 0 && offset % static_cast<std::int64_t>(size_of(dtype)) == 0,
           ErrorCode::kInvalidArgument, "offset ", offset, " into region '", region.name,
           "' must be non-negative and a multiple of the ", name_of(dtype), " element size");
  const TensorView v(base_ + region.offset + offset, dtype, shape, device_);
  return checked(region, v, offset, region.bytes);
}

TensorView Arena::strided_view(std::string_view region_name, DType dtype,
                               std::span<const std::int64_t> shape,
                               std::span<const std::int64_t> strides, std::int64_t offset) const {
  const MemoryRegion& region = plan_.region(region_name);
  FF_CHECK(offset >= 0 && offset % static_cast<std::int64_t>(size_of(dtype)) == 0,
           ErrorCode::kInvalidArgument, "offset ", offset, " into region '", region.name,
           "' must be non-negative and a multiple of the ", name_of(dtype), " element size");
  for (const std::int64_t s : strides) {
    FF_CHECK(s >= 0, ErrorCode::kInvalidArgument, "arena views take non-negative strides");
  }
  const TensorView v =
      TensorView::strided(base_ + region.offset + offset, dtype, shape, strides, device_);
  return checked(region, v, offset, region.bytes);
}

const Placement& Arena::placement(std::string_view region_name, std::string_view name) const {
  const MemoryRegion& region = plan_.region(region_name);
  for (const Placement& p : region.placements) {
    if (p.name == name) return p;
  }
  FF_THROW(ErrorCode::kNotFound, "region '", region.name, "' has no placement '", name, "'");
}

std::byte* Arena::placement_data(std::string_view region, std::string_view name,
                                 std::int64_t bytes) const {
  const Placement& p = placement(region, name);
  FF_CHECK(bytes >= 0 && bytes <= p.bytes, ErrorCode::kOutOfMemory, bytes, " bytes do not fit '",
           name, "' in region '", region, "' (", p.bytes, " bytes)");
  return base_ + p.offset;
}

TensorView Arena::placement_view(std::string_view region, std::string_view name, DType dtype,
                                 std::span<const std::int64_t> shape) const {
  const Placement& p = placement(region, name);
  const TensorView v(base_ + p.offset, dtype, shape, device_);
  const std::int64_t span = v.span_bytes();
  FF_CHECK(span <= p.bytes, ErrorCode::kOutOfMemory, "a view ", v.describe(), " of ", span,
           " bytes does not fit '", name, "' in region '", region, "' (", p.bytes, " bytes)");
  return v;
}

}  // namespace freezeframe
