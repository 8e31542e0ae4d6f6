#pragma once
// The model FLOPs of a prefill step of the built-in model, for the TFLOP/s `freezeframe bench`
// reports: 2 per parameter per token for the layers' dense weights (the LM head on one token
// per request), and 2·(qk + v head width) per head per query-key pair of causal attention
// (4·H·D per pair when both widths are D), each layer's sliding window applied.

#include <cstdint>

#include "freezeframe/engine/spec/spec.h"

namespace freezeframe::tools {

struct StepFlops {
  double dense = 0.0;
  double attention = 0.0;
  [[nodiscard]] double total() const { return dense + attention; }
};

/// FLOPs of `b` requests of `n` new tokens after `context` cached tokens each.
[[nodiscard]] StepFlops prefill_flops(const EngineSpec& spec, std::int64_t b, std::int64_t n,
                                      std::int64_t context);

}  // namespace freezeframe::tools
