#pragma once
// The reference backends' plan: each request's first new token's position in its whole
// sequence, int32 a request. Without decode context parallelism it is seq_len − new tokens,
// which the kernels derive themselves; under DCP seq_lens count the rank's shard only, so the
// position comes from CommonAttentionMetadata::dcp_context_lens, and a row at position p sees
// its shard's first dcp_shard_tokens(p + 1, ...) keys (dcp_shard.h).

#include <cstddef>
#include <cstdint>
#include <span>

#include "freezeframe/backends/attention_metadata.h"

namespace freezeframe::reference {

/// Bytes of the plan for any step within `limits`.
[[nodiscard]] std::size_t positions_plan_bytes(const BatchLimits& limits);

/// Writes each request's first new position of the validated step `common` into `slice`.
void write_positions_plan(const CommonAttentionMetadata& common, std::span<std::byte> slice);

}  // namespace freezeframe::reference
