#pragma once
// Batch sizes (padded token counts) graphs are captured for.

#include <span>
#include <vector>

namespace freezeframe {

/// vLLM's default ladder: 1, 2, 4, then steps of 8 to 248, then steps of 16, up to `max_size`.
[[nodiscard]] std::vector<int> default_capture_sizes(int max_size);

/// The smallest size in `sizes` (ascending) holding `num_tokens`, or 0 when none does.
[[nodiscard]] int padded_size(std::span<const int> sizes, int num_tokens);

}  // namespace freezeframe
