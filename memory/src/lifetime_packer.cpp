#include "freezeframe/memory/lifetime_packer.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "freezeframe/core/error.h"

namespace freezeframe {
namespace {

void check_inputs(std::span<const TensorLifetime> tensors, std::int64_t alignment) {
  FF_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, ErrorCode::kInvalidArgument,
           "alignment must be a positive power of two, got ", alignment);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorLifetime& t = tensors[i];
    FF_CHECK(t.bytes >= 0, ErrorCode::kInvalidArgument, "tensor ", i, " has negative size ",
             t.bytes);
    FF_CHECK(t.first_step <= t.last_step, ErrorCode::kInvalidArgument, "tensor ", i,
             " ends (step ", t.last_step, ") before it starts (step ", t.first_step, ")");
  }
}

}  // namespace

std::int64_t live_bytes_lower_bound(std::span<const TensorLifetime> tensors,
                                    std::int64_t alignment) {
  check_inputs(tensors, alignment);
  // Sweep over step boundaries: +size where a tensor starts, −size one step after it ends.
  std::vector<std::pair<int, std::int64_t>> events;
  events.reserve(2 * tensors.size());
  for (const TensorLifetime& t : tensors) {
    const std::int64_t size = align_up(t.bytes, alignment);
    if (size == 0) continue;
    events.emplace_back(t.first_step, size);
    events.emplace_back(t.last_step + 1, -size);
  }
  // At equal steps the frees (negative) come first: a tensor ending at s−1 and one starting
  // at s are never live together.
  std::sort(events.begin(), events.end());
  std::int64_t live = 0, peak = 0;
  for (const auto& [step, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return peak;
}

PackedLayout pack_lifetimes(std::span<const TensorLifetime> tensors, std::int64_t alignment) {
  check_inputs(tensors, alignment);
  const std::size_t n = tensors.size();
  PackedLayout layout;
  layout.offsets.assign(n, 0);
  layout.lower_bound_bytes = live_bytes_lower_bound(tensors, alignment);

  // Largest first; ties by earlier start, then index, so the result is deterministic.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (tensors[a].bytes != tensors[b].bytes) return tensors[a].bytes > tensors[b].bytes;
    if (tensors[a].first_step != tensors[b].first_step) {
      return tensors[a].first_step < tensors[b].first_step;
    }
    return a < b;
  });

  // Placed tensors kept sorted by offset, as parallel arrays: the inner loop below touches
  // only these four numbers per placed tensor, which keeps 10,000 tensors fast.
  std::vector<std::int64_t> placed_begin, placed_end;
  std::vector<int> placed_first, placed_last;
  placed_begin.reserve(n);
  placed_end.reserve(n);
  placed_first.reserve(n);
  placed_last.reserve(n);

  for (const std::size_t index : order) {
    const TensorLifetime& t = tensors[index];
    const std::int64_t size = align_up(t.bytes, alignment);
    if (size == 0) continue;  // offset 0, occupies nothing
    // Walk the placed tensors that overlap in time, in offset order, tracking the highest end
    // seen so far; every gap between that end and the next overlapping tensor is a candidate.
    std::int64_t best_offset = -1;
    std::int64_t best_gap = std::numeric_limits<std::int64_t>::max();
    std::int64_t prev_end = 0;
    const std::size_t count = placed_begin.size();
    for (std::size_t j = 0; j < count; ++j) {
      if (placed_first[j] > t.last_step || placed_last[j] < t.first_step) continue;
      const std::int64_t gap = placed_begin[j] - prev_end;
      if (gap >= size && gap < best_gap) {
        best_gap = gap;
        best_offset = prev_end;
      }
      prev_end = std::max(prev_end, placed_end[j]);
    }
    const std::int64_t offset = best_offset >= 0 ? best_offset : prev_end;
    layout.offsets[index] = offset;
    layout.peak_bytes = std::max(layout.peak_bytes, offset + size);

    const auto at = static_cast<std::ptrdiff_t>(
        std::upper_bound(placed_begin.begin(), placed_begin.end(), offset) - placed_begin.begin());
    placed_begin.insert(placed_begin.begin() + at, offset);
    placed_end.insert(placed_end.begin() + at, offset + size);
    placed_first.insert(placed_first.begin() + at, t.first_step);
    placed_last.insert(placed_last.begin() + at, t.last_step);
  }
  return layout;
}

}  // namespace freezeframe
