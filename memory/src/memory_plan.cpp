#include "freezeframe/memory/memory_plan.h"

#include <cstdio>

#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/memory/lifetime_packer.h"

namespace freezeframe {

std::string_view to_string(RegionKind kind) {
  switch (kind) {
    case RegionKind::kWeights: return "weights";
    case RegionKind::kActivations: return "activations";
    case RegionKind::kStaging: return "staging";
    case RegionKind::kOutputs: return "outputs";
    case RegionKind::kWorkspace: return "workspace";
    case RegionKind::kKvCache: return "kv_cache";
  }
  return "unknown";
}

MemoryPlan::MemoryPlan(std::int64_t capacity_bytes) : capacity_(capacity_bytes) {
  FF_CHECK(capacity_bytes >= 0, ErrorCode::kInvalidArgument,
           "a memory plan needs a non-negative capacity, got ", capacity_bytes);
}

MemoryRegion& MemoryPlan::add_region(std::string name, RegionKind kind, std::int64_t bytes) {
  FF_CHECK(bytes >= 0, ErrorCode::kInvalidArgument, "region '", name, "' has negative size ",
           bytes);
  FF_CHECK(find(name) == nullptr, ErrorCode::kInvalidArgument, "region '", name,
           "' is planned twice");
  MemoryRegion region;
  region.name = std::move(name);
  region.kind = kind;
  region.offset = align_up(used_bytes(), kAlignment);
  region.bytes = bytes;
  regions_.push_back(std::move(region));
  return regions_.back();
}

void MemoryPlan::add_placement(std::string_view region_name, Placement placement) {
  MemoryRegion* region = find_mutable(region_name);
  FF_CHECK(region != nullptr, ErrorCode::kNotFound, "no region '", region_name, "' to place '",
           placement.name, "' in");
  FF_CHECK(placement.offset >= 0 && placement.bytes >= 0 &&
               placement.offset + placement.bytes <= region->bytes,
           ErrorCode::kInvalidArgument, "'", placement.name, "' (", placement.bytes,
           " bytes at offset ", placement.offset, ") does not lie inside region '", region->name,
           "' of ", region->bytes, " bytes");
  placement.offset += region->offset;
  region->placements.push_back(std::move(placement));
}

const MemoryRegion* MemoryPlan::find(std::string_view name) const {
  for (const MemoryRegion& r : regions_) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

MemoryRegion* MemoryPlan::find_mutable(std::string_view name) {
  for (MemoryRegion& r : regions_) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

const MemoryRegion& MemoryPlan::region(std::string_view name) const {
  if (const MemoryRegion* r = find(name)) return *r;
  std::string known;
  for (const MemoryRegion& r : regions_) (known += known.empty() ? "" : ", ") += r.name;
  FF_THROW(ErrorCode::kNotFound, "the plan has no region '", name, "' (regions: ", known, ")");
}

std::int64_t MemoryPlan::used_bytes() const { return regions_.empty() ? 0 : regions_.back().end(); }

void MemoryPlan::check_fits() const {
  for (const MemoryRegion& r : regions_) {
    FF_CHECK(r.end() <= capacity_, ErrorCode::kOutOfMemory, "region '", r.name, "' (",
             format_bytes(r.bytes), ") ends at byte ", r.end(), ", past the budget of ", capacity_,
             " bytes (", format_bytes(capacity_), ") by ", r.end() - capacity_, " bytes");
  }
}

}  // namespace freezeframe
