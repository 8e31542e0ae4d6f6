#pragma once
// The prefill kernel's host-side tile schedule, written by the backend's plan hook into the
// step's staged image: every request with more than one new token cut into planned tiles of
// kPlanTileTokens tokens, longest work first, then the single-token requests (attended here only
// where no decode kernel runs: encoder self-attention). Its size depends on the limits only, and
// the kernel's launch shape on the padded step size only, so a captured graph replays any step of
// its size with the schedule of the step at hand.

#include <cstddef>
#include <span>

#include "freezeframe/backends/attention_metadata.h"

namespace freezeframe::prefill {

/// Planned tiles a step of `num_tokens` rows and at most `num_reqs` requests can have: ⌈q / 128⌉
/// ≤ q / 128 + 1 per request.
[[nodiscard]] int max_plan_tiles(int num_tokens, int num_reqs);

/// Bytes of a plan for any step within `limits`.
[[nodiscard]] std::size_t plan_bytes(const BatchLimits& limits);

/// Writes the plan of the validated step `common` into `slice` (plan_bytes long).
void write_plan(const CommonAttentionMetadata& common, std::span<std::byte> slice);

}  // namespace freezeframe::prefill
