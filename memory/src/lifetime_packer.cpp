#include "freezeframe/memory/lifetime_packer.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "freezeframe/base/error.h"

namespace freezeframe {
namespace {

void check_inputs(std::span<const TensorLifetime> tensors, std::int64_t alignment) {
  FF_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, ErrorCode::kInvalidArgument,
           "alignment must be a positive power of two, got ", alignment);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorLifetime& t = tensors[i];
    FF_CHECK(t.bytes >= 0, ErrorCode::kInvalidArgument, "tensor ", i, " has negative size ",
             t.bytes);
    FF_CHECK(t.first_step <= t.last_step, ErrorCode::kInvalidArgument, "tensor ", i, " ends (step ",
             t.last_step, ") before it starts (step ", t.first_step, ")");
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

namespace {

/// Places the tensors one by one in `order`, each in the tightest gap among the placed tensors
/// it overlaps in time (or above them all).
PackedLayout pack_in_order(std::span<const TensorLifetime> tensors, std::int64_t alignment,
                           const std::vector<std::size_t>& order) {
  const std::size_t n = tensors.size();
  PackedLayout layout;
  layout.offsets.assign(n, 0);

  // Which placed tensors overlap a tensor in time? Steps are cut into buckets about one mean
  // lifetime wide; each placed tensor is listed in the buckets it touches, so a query looks at
  // a few buckets instead of every placed tensor (10,000 tensors: milliseconds, not seconds).
  int min_step = 0, max_step = 0;
  std::int64_t total_length = 0;
  for (std::size_t i = 0; i < n; ++i) {
    min_step = i == 0 ? tensors[i].first_step : std::min(min_step, tensors[i].first_step);
    max_step = i == 0 ? tensors[i].last_step : std::max(max_step, tensors[i].last_step);
    total_length += tensors[i].last_step - tensors[i].first_step + 1;
  }
  const std::int64_t span = std::int64_t(max_step) - min_step + 1;
  std::int64_t width = n > 0 ? std::max<std::int64_t>(1, total_length / std::int64_t(n)) : 1;
  width = std::max(width, span / std::int64_t(4 * n + 1) + 1);  // at most ~4n buckets
  auto bucket_of = [&](int step) { return static_cast<std::size_t>((step - min_step) / width); };
  std::vector<std::vector<std::uint32_t>> buckets(n > 0 ? bucket_of(max_step) + 1 : 0);

  struct Placed {
    std::int64_t begin, end;
    int first, last;
  };
  std::vector<Placed> placed;
  placed.reserve(n);
  std::vector<std::uint32_t> seen(n, std::numeric_limits<std::uint32_t>::max());
  std::vector<std::uint32_t> overlapping;

  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t index = order[k];
    const TensorLifetime& t = tensors[index];
    const std::int64_t size = align_up(t.bytes, alignment);
    if (size == 0) continue;  // offset 0, occupies nothing
    overlapping.clear();
    for (std::size_t b = bucket_of(t.first_step); b <= bucket_of(t.last_step); ++b) {
      for (const std::uint32_t slot : buckets[b]) {
        if (seen[slot] == k) continue;
        seen[slot] = static_cast<std::uint32_t>(k);
        const Placed& p = placed[slot];
        if (p.first <= t.last_step && p.last >= t.first_step) overlapping.push_back(slot);
      }
    }
    std::sort(overlapping.begin(), overlapping.end(), [&](std::uint32_t a, std::uint32_t b) {
      return placed[a].begin != placed[b].begin ? placed[a].begin < placed[b].begin : a < b;
    });
    // Walk the overlapping tensors in offset order, tracking the highest end seen so far;
    // every gap between that end and the next tensor is a candidate; take the tightest.
    std::int64_t best_offset = -1;
    std::int64_t best_gap = std::numeric_limits<std::int64_t>::max();
    std::int64_t prev_end = 0;
    for (const std::uint32_t slot : overlapping) {
      const std::int64_t gap = placed[slot].begin - prev_end;
      if (gap >= size && gap < best_gap) {
        best_gap = gap;
        best_offset = prev_end;
      }
      prev_end = std::max(prev_end, placed[slot].end);
    }
    const std::int64_t offset = best_offset >= 0 ? best_offset : prev_end;
    layout.offsets[index] = offset;
    layout.peak_bytes = std::max(layout.peak_bytes, offset + size);

    const auto slot = static_cast<std::uint32_t>(placed.size());
    placed.push_back({offset, offset + size, t.first_step, t.last_step});
    for (std::size_t b = bucket_of(t.first_step); b <= bucket_of(t.last_step); ++b) {
      buckets[b].push_back(slot);
    }
  }
  return layout;
}

}  // namespace

PackedLayout pack_lifetimes(std::span<const TensorLifetime> tensors, std::int64_t alignment) {
  check_inputs(tensors, alignment);
  const std::size_t n = tensors.size();
  // Ties by earlier start, then index, so the result is deterministic.
  auto by = [&](auto key) {
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const auto ka = key(tensors[a]), kb = key(tensors[b]);
      if (ka != kb) return ka > kb;
      if (tensors[a].first_step != tensors[b].first_step) {
        return tensors[a].first_step < tensors[b].first_step;
      }
      return a < b;
    });
    return order;
  };
  // Largest first (greedy by size); then largest area (bytes x steps) first, which places
  // long-lived tensors before short ones of the same size. Keep the lower peak.
  PackedLayout best =
      pack_in_order(tensors, alignment, by([](const TensorLifetime& t) { return t.bytes; }));
  const PackedLayout by_area =
      pack_in_order(tensors, alignment, by([](const TensorLifetime& t) {
                      return static_cast<double>(t.bytes) * double(t.last_step - t.first_step + 1);
                    }));
  if (by_area.peak_bytes < best.peak_bytes) best = by_area;
  best.lower_bound_bytes = live_bytes_lower_bound(tensors, alignment);
  return best;
}

}  // namespace freezeframe
