#pragma once
// DeviceProperties: what planning may know about the GPU a deployment runs on. Backends size
// their launches and workspaces from these values, handed in rather than queried, so a dry run
// on a machine without a GPU, given the target's properties, plans exactly what the engine
// plans on that GPU.

#include <cstdint>
#include <string>

namespace freezeframe {

struct DeviceProperties {
  std::string name = "NVIDIA H200";
  int sm_count = 132;
  int compute_capability = 90;  ///< major · 10 + minor
  std::int64_t total_memory = std::int64_t(141) << 30;

  /// The target a plan assumes when no GPU is asked: an H200 (sm_90, 132 SMs, 141 GiB).
  [[nodiscard]] static DeviceProperties h200() { return {}; }

  bool operator==(const DeviceProperties&) const = default;
};

/// The properties of the current CUDA device; throws kUnsupported when there is none.
[[nodiscard]] DeviceProperties current_device_properties();

}  // namespace freezeframe
