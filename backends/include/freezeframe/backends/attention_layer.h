#pragma once
// The per-layer state an attention forward runs with: the layer's name, its quantisation
// scales and the workspace the planner gave it.

#include <string>

#include "freezeframe/core/tensor.h"

namespace freezeframe {

struct AttentionLayer {
  std::string name;
  /// Dequantisation scales (value = stored × scale) used for fp8 caches and inputs.
  float q_scale = 1.0f;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  float prob_scale = 1.0f;
  /// Scratch for the impl, at least impl.workspace_bytes(limits) bytes; device memory.
  TensorView workspace;
};

}  // namespace freezeframe
