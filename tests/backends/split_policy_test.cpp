// The paged decode split count: a wave model of the launch, checked on hand-worked cases.

#include <gtest/gtest.h>

#include "mla_decode/mla_decode.h"
#include "paged_decode/split_policy.h"

namespace freezeframe {
namespace {

DecodeSplitPolicy h200() {
  DecodeSplitPolicy p;
  p.sm_count = 132;
  p.resident_ctas_per_sm = 3;  // 396 CTAs at once
  return p;
}

// 64 rows × 8 CTAs = 512 CTAs a split; 4096 tokens = 256 tiles. Cost = waves × (tiles a CTA
// reads + 4): 1 split 2 × 260 = 520; 2: 3 × 132 = 396; 3: 4 × 90 = 360; 4: 6 × 68 = 408;
// 5: 7 × 56 = 392, and no more than 5 (16 CTAs per SM: ⌈2112 / 512⌉). Three splits: four
// full waves.
TEST(DecodeSplitPolicy, FillsWholeWaves) { EXPECT_EQ(h200().splits(64, 8, 4096), 3); }

// One row of 8 CTAs over 32,768 tokens (2,048 tiles), up to 128 splits: 49 splits are 392
// CTAs, one wave (cost 42 + 4 = 46); 50 would spill into a second wave (2 × 45 = 90).
TEST(DecodeSplitPolicy, SmallBatchesSpreadOverOneWave) {
  EXPECT_EQ(h200().splits(1, 8, 32768), 49);
}

TEST(DecodeSplitPolicy, StaysWithinTheLimits) {
  const DecodeSplitPolicy p = h200();
  EXPECT_EQ(p.splits(1, 8, 256), 1) << "one split's worth of tokens";
  EXPECT_EQ(p.splits(1, 1, 16), 1);
  EXPECT_LE(p.splits(1, 1, 1 << 20), p.max_splits);
  EXPECT_LE(p.splits(2, 4, 1024), 1024 / p.min_tokens_per_split);
  for (int rows : {1, 3, 64, 256, 8192}) {
    const int s = p.splits(rows, 8, 131072);
    EXPECT_GE(s, 1);
    EXPECT_LE(s, p.max_splits);
  }
  // A bigger batch never gets more splits per row than a smaller one needs to fill the GPU.
  EXPECT_GE(p.splits(1, 8, 131072), p.splits(256, 8, 131072));
  // Never more than 16 CTAs per SM in total: 256 rows × 8 CTAs take at most 2 splits.
  EXPECT_LE(p.splits(256, 8, 131072), 2);
}

// The MLA decode kernel (one CTA an SM, up to 64 splits): its scratch holds every split count
// it takes, one long row spreads over one wave, and DeepSeek-V2's 128 heads take four CTAs a
// row, so fewer splits.
TEST(MlaDecodeSplits, ScratchHoldsEverySplitCountTheKernelTakes) {
  const DeviceProperties device = DeviceProperties::h200();
  const DecodeSplitPolicy p = mla_decode::split_policy(&device);
  EXPECT_EQ(p.resident_ctas_per_sm, 1);
  EXPECT_EQ(mla_decode::split_count(p, 16, 1, 32768), 64);
  EXPECT_EQ(mla_decode::split_count(p, 128, 1, 32768), 33) << "4 × 33 = 132 CTAs: one wave";
  for (const int heads : {16, 128}) {
    const std::size_t scratch = mla_decode::workspace_bytes(p, heads, 300, 163840);
    for (int rows = 1; rows <= 300; ++rows) {
      const int splits = mla_decode::split_count(p, heads, rows, 163840);
      ASSERT_GE(splits, 1);
      ASSERT_LE(splits, mla_decode::kMaxSplits);
      ASSERT_GE(scratch, mla_decode::MlaDecodeWorkspace(heads, splits, rows).total)
          << heads << " heads, " << rows << " rows";
    }
  }
  EXPECT_EQ(mla_decode::MlaDecodeWorkspace(16, 1, 64).total, 0u) << "one split: no scratch";
}

}  // namespace
}  // namespace freezeframe
