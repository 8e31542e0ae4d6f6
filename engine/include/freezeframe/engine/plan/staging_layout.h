#pragma once
// StagingLayout: the one image a step is staged into, as named slices at the same offsets in
// pinned host memory and in the plan's "staging" region. Its head, copied whole every step by
// one kernel inside the step's graph, holds the program's inputs (token ids, positions, the
// LM head's rows), the common attention metadata (MetadataLayout) and each backend's plan
// slice; the block table follows the head: this step's rows back to back in the image, spread
// to their fixed stride on the device by the same copy.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/backends/metadata_builder.h"
#include "freezeframe/core/device_properties.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/spec/deployment.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe {

struct StagingSlice {
  std::string name;  ///< a program input's name, "metadata", "plan.<backend>" or "block_table"
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

struct StagingLayout {
  std::vector<StagingSlice> slices;  ///< in image order; the block table last
  MetadataLayout metadata;           ///< offsets inside the "metadata" slice
  std::size_t head_bytes = 0;        ///< copied whole every step
  std::size_t total_bytes = 0;       ///< the head and the block table

  /// The slice called `name`; throws kNotFound.
  [[nodiscard]] const StagingSlice& slice(std::string_view name) const;
  /// The slice called `name`, or nullptr.
  [[nodiscard]] const StagingSlice* find(std::string_view name) const;
};

/// The layout for `program` (its TensorHome::kInput tensors), the geometry's limits and the
/// plan slices the layers' backends state for `device`.
[[nodiscard]] StagingLayout staging_layout(const EngineSpec& spec, const ModelProgram& program,
                                           const DeploymentGeometry& geometry,
                                           const DeviceProperties& device);

}  // namespace freezeframe
