#pragma once
// The construction parameters of each layer's attention impl, from the spec: the one place
// the planner (sizing workspaces) and the engine (building impls) take them from.

#include <vector>

#include "freezeframe/backends/attention_params.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe {

/// AttentionParams of `layer` (a non-MLA model) on tensor-parallel rank `tp_rank`: its heads,
/// head size, scale 1/√head_size, the resolved cache dtype, sliding window, soft cap, the
/// ALiBi slopes of its heads, attention type and the layer whose cache it shares
/// ("layers.<i>").
[[nodiscard]] AttentionParams attention_params(const EngineSpec& spec, int layer, int tp_rank = 0);

/// MlaParams of an MLA model; q_lora_rank is the width of the impl's query input (the hidden
/// size when the model does not compress the query).
[[nodiscard]] MlaParams mla_params(const EngineSpec& spec);

/// ALiBi slopes for `num_heads` heads (Press et al.: a geometric sequence from 2^(−8/n) for the
/// nearest power of two n, interleaved with the next power's odd terms for the rest).
[[nodiscard]] std::vector<float> alibi_slopes(int num_heads);

}  // namespace freezeframe
