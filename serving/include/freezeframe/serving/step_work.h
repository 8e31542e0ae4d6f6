#pragma once
// The work of one step as the step cost model counts it: the tokens the step runs, the context
// its decodes read, and the query-key pairs of its prefill chunks under causal attention.

#include <cstdint>
#include <span>

#include "freezeframe/engine/runtime/step_batch.h"

namespace freezeframe {

/// Query-key pairs of causal attention for `new_tokens` queries after `context` cached tokens:
/// the query at position p sees p + 1 keys, at most `window` when `window` > 0. Without a
/// window, new·context + new·(new + 1)/2.
[[nodiscard]] std::int64_t causal_pairs(std::int64_t context, std::int64_t new_tokens,
                                        std::int64_t window = 0);

struct StepWork {
  std::int64_t tokens = 0;          ///< new tokens of the step (before any padding)
  std::int64_t decode_context = 0;  ///< Σ seq_len over single-token requests
  std::int64_t prefill_pairs = 0;   ///< Σ causal_pairs over requests of more than one token
};

/// The work of a step's requests. A one-token prefill chunk runs as a decode (the batcher
/// puts it among them), so it counts as one.
[[nodiscard]] StepWork step_work(std::span<const StepRequest> requests);

}  // namespace freezeframe
