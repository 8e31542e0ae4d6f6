#pragma once
// plan_memory: the engine's whole memory as one arena, from the spec, the device memory size
// and the device's properties alone (pure host arithmetic; no GPU needed). Regions, in arena
// order:
//   weights              the model's parameters: random (model.builtin_weights) or read from
//                        model.checkpoint; none when neither
//   activations          the model program's tensors packed by lifetime (greedy by size),
//                        attention outputs and DCP LSE included: a fixed address is all an
//                        output buffer needs, not a buffer per layer
//   staging              a step's staged image (StagingLayout): token ids, positions, the
//                        LM head's rows, the attention metadata, each backend's plan slice
//                        and the block table, at fixed addresses, uploaded by one copy
//   outputs              the logits
//   attention_workspace  the largest workspace a layer's backend states (layers run one at a
//                        time; split-KV decode keeps its partial outputs there)
//   cublas_workspace     for the GEMMs (cuBLAS recommends 32 MiB on Hopper)
//   kv_cache             what is left, in whole blocks; one placement per layer
// A budget that cannot hold everything plus one max-length sequence of KV cache is refused
// with the numbers.

#include <cstdint>

#include "freezeframe/core/device_properties.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/spec/deployment.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/memory/memory_plan.h"

namespace freezeframe {

/// cuBLAS's recommended workspace on Hopper (cuBLAS docs, "cublasSetWorkspace").
inline constexpr std::int64_t kCublasWorkspaceBytes = std::int64_t(32) << 20;

/// The plan for `spec` on a device with `device_bytes` of memory and `device`'s properties
/// (backends size their workspaces from them). Throws kOutOfMemory (naming the spec's
/// memory_budget with file:line:column and how much is missing) when the budget cannot hold
/// the fixed regions plus one max-length sequence of KV cache, and kInvalidArgument when a
/// byte budget exceeds the device. A cache past 2^31 − 1 blocks (block ids are 32-bit) is
/// capped there, with a warning.
[[nodiscard]] MemoryPlan plan_memory(const EngineSpec& spec, std::int64_t device_bytes,
                                     const DeviceProperties& device = DeviceProperties::h200());

/// The largest workspace any layer's backend states for `geometry` on `device`.
[[nodiscard]] std::int64_t attention_workspace_bytes(const EngineSpec& spec,
                                                     const DeploymentGeometry& geometry,
                                                     const DeviceProperties& device);

}  // namespace freezeframe
