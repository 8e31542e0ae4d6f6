#include "freezeframe/engine/plan/staging_layout.h"

#include <set>

#include "freezeframe/backends/registry.h"
#include "freezeframe/base/error.h"

namespace freezeframe {
namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

const StagingSlice* StagingLayout::find(std::string_view name) const {
  for (const StagingSlice& s : slices) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const StagingSlice& StagingLayout::slice(std::string_view name) const {
  const StagingSlice* s = find(name);
  FF_CHECK(s != nullptr, ErrorCode::kNotFound, "the staged image has no slice '", name, "'");
  return *s;
}

StagingLayout staging_layout(const EngineSpec& spec, const ModelProgram& program,
                             const DeploymentGeometry& geometry, const DeviceProperties& device) {
  StagingLayout layout;
  std::size_t at = 0;
  auto add = [&](std::string name, std::size_t bytes) {
    layout.slices.push_back({std::move(name), at, bytes});
    at = align_up(at + bytes);
  };
  const DeploymentLimits& limits = geometry.limits;
  for (const ProgramTensor& t : program.tensors) {
    if (t.home != TensorHome::kInput) continue;
    add(t.name,
        static_cast<std::size_t>(t.bytes(limits.max_num_batched_tokens, limits.max_num_seqs)));
  }
  const BatchLimits batch = geometry.batch_limits();
  layout.metadata = MetadataLayout::of(batch);
  add("metadata", layout.metadata.head_bytes);
  std::set<std::string> backends;
  for (const LayerSpec& layer : spec.model.layers) backends.insert(layer.backend);
  for (const std::string& name : backends) {
    const std::size_t bytes = spec.registry->get(name).plan_bytes(batch, device);
    if (bytes > 0) add("plan." + name, bytes);
  }
  layout.head_bytes = at;
  add("block_table", layout.metadata.table_bytes);
  layout.total_bytes = at;
  return layout;
}

}  // namespace freezeframe
