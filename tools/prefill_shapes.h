#pragma once
// The prefill steps `freezeframe bench --prefill` times: B requests of N new tokens each after
// C cached tokens, read from "BxN,BxN,..." and checked against the deployment's limits.

#include <cstdint>
#include <string_view>
#include <vector>

#include "freezeframe/engine/spec/deployment.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe::tools {

struct PrefillShape {
  int b = 0;  ///< requests
  int n = 0;  ///< new tokens of each
};

/// "1x8192,4x2048": throws UsageError naming `flag` and the item for an empty item, an item
/// that is not two whole numbers from 1 to 2^31 − 1 around an 'x', or an empty list.
[[nodiscard]] std::vector<PrefillShape> parse_prefill_shapes(std::string_view flag,
                                                             std::string_view text);

/// Throws kInvalidArgument naming the field of `spec` (file:line:column) that a step of
/// `shape` after `context` cached tokens per request breaks: scheduler.max_num_seqs,
/// max_num_batched_tokens, max_model_len or max_prefill_context_tokens; and, once the KV cache
/// is planned (limits.num_blocks > 0), cache.memory_budget when its blocks are too few.
/// `limits` are the spec's (DeploymentGeometry::of, or the engine's with the plan's blocks).
void check_prefill_shape(const PrefillShape& shape, std::int64_t context,
                         const DeploymentLimits& limits, const EngineSpec& spec);

}  // namespace freezeframe::tools
