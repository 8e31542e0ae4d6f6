// memory/: the lifetime packer — exact cases, and properties on random interval sets: no two
// tensors live at the same step overlap in memory, offsets are aligned, and the peak is never
// below the lower bound.

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/memory/lifetime_packer.h"

namespace freezeframe {
namespace {

std::vector<TensorLifetime> random_lifetimes(int n, int steps, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> start(0, steps - 1);
  std::geometric_distribution<int> length(0.1);
  std::uniform_real_distribution<double> log_size(0.0, 20.0);  // 1 B .. 1 MiB, log-uniform
  std::vector<TensorLifetime> tensors(n);
  for (TensorLifetime& t : tensors) {
    t.first_step = start(rng);
    t.last_step = std::min(steps - 1, t.first_step + length(rng));
    t.bytes = static_cast<std::int64_t>(std::exp2(log_size(rng)));
  }
  return tensors;
}

/// Checks the packing's invariants and returns a description of the first violation.
std::string violations(const std::vector<TensorLifetime>& tensors, const PackedLayout& layout,
                       std::int64_t alignment) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::int64_t oi = layout.offsets[i], ei = oi + align_up(tensors[i].bytes, alignment);
    if (oi % alignment != 0) return "tensor " + std::to_string(i) + " misaligned";
    if (ei > layout.peak_bytes) return "tensor " + std::to_string(i) + " beyond the peak";
    for (std::size_t j = i + 1; j < tensors.size(); ++j) {
      const bool live_together = tensors[i].first_step <= tensors[j].last_step &&
                                 tensors[j].first_step <= tensors[i].last_step;
      const std::int64_t oj = layout.offsets[j], ej = oj + align_up(tensors[j].bytes, alignment);
      const bool disjoint = ei <= oj || ej <= oi || tensors[i].bytes == 0 || tensors[j].bytes == 0;
      if (live_together && !disjoint) {
        return "tensors " + std::to_string(i) + " and " + std::to_string(j) + " overlap";
      }
    }
  }
  return {};
}

TEST(LifetimePacker, DisjointLifetimesShareMemory) {
  const std::vector<TensorLifetime> t = {{1000, 0, 1}, {1000, 2, 3}, {1000, 4, 5}};
  const PackedLayout layout = pack_lifetimes(t);
  EXPECT_EQ(layout.peak_bytes, 1024) << "one aligned slot serves all three";
  EXPECT_EQ(layout.lower_bound_bytes, 1024);
  EXPECT_EQ(layout.offsets, (std::vector<std::int64_t>{0, 0, 0}));
}

TEST(LifetimePacker, OverlappingLifetimesStack) {
  const std::vector<TensorLifetime> t = {{256, 0, 2}, {512, 1, 3}, {256, 2, 2}};
  const PackedLayout layout = pack_lifetimes(t);
  EXPECT_EQ(layout.lower_bound_bytes, 1024) << "all three live at step 2";
  EXPECT_EQ(layout.peak_bytes, 1024);
  EXPECT_EQ(violations(t, layout, 256), "");
}

TEST(LifetimePacker, BestFitTakesTheTightestGap) {
  // Largest first: A [0, 4096) live 0..9; B [4096, 5120) live 0..1; C [5120, 9216) live 0..9.
  // Then D (1000 B, live 2..3) fits where B was, instead of growing the region.
  const std::vector<TensorLifetime> t = {{4096, 0, 9}, {1024, 0, 1}, {4096, 0, 9}, {1000, 2, 3}};
  const PackedLayout layout = pack_lifetimes(t);
  EXPECT_EQ(layout.offsets[3], layout.offsets[1]);
  EXPECT_EQ(layout.peak_bytes, 9216);
  EXPECT_EQ(violations(t, layout, 256), "");
}

TEST(LifetimePacker, AlignmentIsRespected) {
  const std::vector<TensorLifetime> t = {{1, 0, 5}, {3, 0, 5}, {1000, 1, 2}};
  const PackedLayout layout = pack_lifetimes(t, 4096);
  for (const std::int64_t o : layout.offsets) EXPECT_EQ(o % 4096, 0);
  EXPECT_EQ(layout.lower_bound_bytes, 3 * 4096);
  EXPECT_EQ(violations(t, layout, 4096), "");
}

TEST(LifetimePacker, BadInputsThrow) {
  const std::vector<TensorLifetime> backwards = {{10, 5, 4}};
  EXPECT_THROW((void)pack_lifetimes(backwards), Error);
  const std::vector<TensorLifetime> negative = {{-1, 0, 0}};
  EXPECT_THROW((void)pack_lifetimes(negative), Error);
  EXPECT_THROW((void)pack_lifetimes({}, 100), Error) << "alignment must be a power of two";
  EXPECT_EQ(pack_lifetimes({}).peak_bytes, 0);
}

TEST(LifetimePacker, RandomSetsKeepTheInvariants) {
  for (const int n : {10, 100, 1000}) {
    for (std::uint32_t seed = 1; seed <= 5; ++seed) {
      const auto tensors = random_lifetimes(n, std::max(4, n / 2), seed);
      for (const std::int64_t alignment : {1, 256}) {
        const PackedLayout layout = pack_lifetimes(tensors, alignment);
        SCOPED_TRACE("n=" + std::to_string(n) + " seed=" + std::to_string(seed) +
                     " alignment=" + std::to_string(alignment));
        EXPECT_EQ(violations(tensors, layout, alignment), "");
        EXPECT_GE(layout.peak_bytes, layout.lower_bound_bytes);
        EXPECT_EQ(layout.lower_bound_bytes, live_bytes_lower_bound(tensors, alignment));
        // Greedy by size is near the bound on such sets; a broken packer is far from it.
        EXPECT_LE(double(layout.peak_bytes), 1.5 * double(layout.lower_bound_bytes));
      }
    }
  }
}

TEST(LifetimePacker, LowerBoundIsTheLiveMaximum) {
  // Live bytes per step: 0:100→256, 1:256+512, 2:512+256+768 (aligned), 3:768.
  const std::vector<TensorLifetime> t = {{100, 0, 1}, {512, 1, 2}, {256, 2, 2}, {700, 2, 3}};
  EXPECT_EQ(live_bytes_lower_bound(t, 256), 512 + 256 + 768);
  EXPECT_EQ(live_bytes_lower_bound(t, 1), 512 + 256 + 700);
}

}  // namespace
}  // namespace freezeframe
