// The double-precision host reference on cases small enough to work out by hand, and the LSE
// merge identity that DCP relies on.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "freezeframe/backends/host_reference.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/backends/synthetic_batch.h"
#include "support/random.h"

namespace freezeframe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// One head, head size 2, one request whose keys/values sit in a host paged cache.
struct TinyProblem {
  AttentionParams params;
  SyntheticBatch batch;
  HostTensor query, cache;

  TinyProblem(int seq_len, int query_len, std::vector<std::array<float, 2>> keys,
              std::vector<std::array<float, 2>> values, std::array<float, 2> q)
      : batch(make_synthetic_batch({.prefills = {{seq_len, query_len}}, .block_size = 2})),
        query(DType::kF32, {query_len, 1, 2}),
        cache(DType::kF32, {2, batch.num_blocks, 2, 1, 2}) {
    params.num_heads = params.num_kv_heads = 1;
    params.head_size = 2;
    params.scale = 1.0f;
    params.kv_cache_dtype = DType::kF32;
    cache.fill_bytes(0);
    std::vector<std::int64_t> slots = batch.context_slot_mapping;
    slots.insert(slots.end(), batch.slot_mapping.begin(), batch.slot_mapping.end());
    HostTensor k(DType::kF32, {seq_len, 1, 2}), v(DType::kF32, {seq_len, 1, 2});
    for (int j = 0; j < seq_len; ++j) {
      for (int d = 0; d < 2; ++d) {
        k.set(j * 2 + d, keys[j][d]);
        v.set(j * 2 + d, values[j][d]);
      }
    }
    host_reference::reshape_and_cache(k.view(), v.view(), cache.view(), slots, 1.0f, 1.0f);
    for (int t = 0; t < query_len; ++t) {
      query.set(t * 2, q[0]);
      query.set(t * 2 + 1, q[1]);
    }
  }
  host_reference::AttentionResult run() const {
    return host_reference::attention(params, query.view(), {}, {}, cache.view(), batch.metadata(),
                                     1.0f, 1.0f);
  }
};

TEST(HostReference, SingleKeyReturnsItsValueAndScore) {
  TinyProblem p(1, 1, {{0.5f, 2.0f}}, {{3.0f, -1.0f}}, {1.0f, 1.0f});
  const auto r = p.run();
  EXPECT_DOUBLE_EQ(r.out[0], 3.0);
  EXPECT_DOUBLE_EQ(r.out[1], -1.0);
  EXPECT_DOUBLE_EQ(r.lse_ln[0], 2.5);  // log(exp(q·k))
}

TEST(HostReference, EqualScoresAverageTheValues) {
  TinyProblem p(3, 1, {{1, 0}, {1, 0}, {1, 0}}, {{3, 0}, {0, 3}, {0, 0}}, {1.0f, 0.0f});
  const auto r = p.run();
  EXPECT_NEAR(r.out[0], 1.0, 1e-15);
  EXPECT_NEAR(r.out[1], 1.0, 1e-15);
  EXPECT_NEAR(r.lse_ln[0], 1.0 + std::log(3.0), 1e-15);
}

TEST(HostReference, CausalPrefillRowsSeeOnlyTheirPast) {
  // Three new tokens, no context: row i averages values 0..i (equal scores).
  TinyProblem p(3, 3, {{0, 0}, {0, 0}, {0, 0}}, {{6, 0}, {0, 6}, {3, 3}}, {1.0f, 1.0f});
  const auto r = p.run();
  EXPECT_NEAR(r.out[0], 6.0, 1e-15);  // row 0: value 0
  EXPECT_NEAR(r.out[2], 3.0, 1e-15);  // row 1: mean of 6 and 0
  EXPECT_NEAR(r.out[4], 3.0, 1e-15);  // row 2: mean of 6, 0, 3
  EXPECT_NEAR(r.out[5], 3.0, 1e-15);
}

TEST(HostReference, SlidingWindowOfOneSeesOnlyItself) {
  TinyProblem p(3, 1, {{5, 5}, {5, 5}, {0, 0}}, {{9, 9}, {9, 9}, {1, 2}}, {1.0f, 1.0f});
  p.params.sliding_window = 1;
  const auto r = p.run();
  EXPECT_DOUBLE_EQ(r.out[0], 1.0);
  EXPECT_DOUBLE_EQ(r.out[1], 2.0);
}

TEST(HostReference, AlibiAndSoftCapShapeTheScores) {
  // Two keys with raw scores 4 and 0; the query is at position 1.
  TinyProblem p(2, 1, {{4, 0}, {0, 0}}, {{1, 0}, {0, 1}}, {1.0f, 0.0f});
  p.params.alibi_slopes = {0.5f};   // key 0 gets −0.5
  p.params.logits_soft_cap = 2.0f;  // 4 → 2·tanh(2)
  const auto r = p.run();
  const double s0 = 2.0 * std::tanh(2.0) - 0.5, s1 = 0.0;
  const double w0 = std::exp(s0) / (std::exp(s0) + std::exp(s1));
  EXPECT_NEAR(r.out[0], w0, 1e-14);
  EXPECT_NEAR(r.out[1], 1.0 - w0, 1e-14);
  EXPECT_NEAR(r.lse_ln[0], std::log(std::exp(s0) + std::exp(s1)), 1e-14);
}

TEST(HostReference, PaddingRowsAreZeroWithMinusInfinityLse) {
  TinyProblem p(1, 1, {{1, 1}}, {{2, 2}}, {1.0f, 1.0f});
  p.batch = make_synthetic_batch({.prefills = {{1, 1}}, .block_size = 2, .padding_rows = 2});
  HostTensor q(DType::kF32, {3, 1, 2});
  q.fill_bytes(0);
  p.query = q;
  const auto r = p.run();
  ASSERT_EQ(r.out.size(), 6u);
  EXPECT_EQ(r.out[2], 0.0);
  EXPECT_EQ(r.lse_ln[2], -kInf);
}

TEST(HostReference, MergeOfShardsEqualsUnshardedAttention) {
  // A decode over 37 positions, sharded round-robin over 3 ranks as DCP does (interleave 1):
  // merging the ranks' (output, LSE) must give the unsharded result.
  std::mt19937 rng(11);
  const int len = 37, world = 3, d = 8;
  AttentionParams params;
  params.num_heads = params.num_kv_heads = 1;
  params.head_size = d;
  params.scale = 0.3f;
  params.kv_cache_dtype = DType::kF32;
  HostTensor keys(DType::kF32, {len, 1, d}), values(DType::kF32, {len, 1, d}),
      q(DType::kF32, {1, 1, d});
  testing::fill_normal(keys, rng);
  testing::fill_normal(values, rng);
  testing::fill_normal(q, rng);

  auto attend = [&](const std::vector<int>& positions) {
    const int n = static_cast<int>(positions.size());
    const SyntheticBatch b = make_synthetic_batch({.decode_seq_lens = {n}, .block_size = 4});
    HostTensor cache(DType::kF32, {2, b.num_blocks, 4, 1, d}), k(DType::kF32, {n, 1, d}),
        v(DType::kF32, {n, 1, d});
    cache.fill_bytes(0);
    for (int j = 0; j < n; ++j) {
      for (int e = 0; e < d; ++e) {
        k.set(j * d + e, keys.get(positions[j] * d + e));
        v.set(j * d + e, values.get(positions[j] * d + e));
      }
    }
    std::vector<std::int64_t> slots = b.context_slot_mapping;
    slots.insert(slots.end(), b.slot_mapping.begin(), b.slot_mapping.end());
    host_reference::reshape_and_cache(k.view(), v.view(), cache.view(), slots, 1.0f, 1.0f);
    return host_reference::attention(params, q.view(), {}, {}, cache.view(), b.metadata(), 1.0f,
                                     1.0f);
  };
  std::vector<int> all(len);
  for (int j = 0; j < len; ++j) all[j] = j;
  const auto full = attend(all);

  std::vector<double> partial_out, partial_lse;
  for (int r = 0; r < world; ++r) {
    std::vector<int> mine;
    for (int j = r; j < len; j += world) mine.push_back(j);
    const auto shard = attend(mine);
    partial_out.insert(partial_out.end(), shard.out.begin(), shard.out.end());
    partial_lse.insert(partial_lse.end(), shard.lse_ln.begin(), shard.lse_ln.end());
  }
  std::vector<double> out, lse;
  host_reference::merge_attention_states(partial_out, partial_lse, world, 1, 1, d, out, lse);
  for (int e = 0; e < d; ++e) EXPECT_NEAR(out[e], full.out[e], 1e-12) << "dim " << e;
  EXPECT_NEAR(lse[0], full.lse_ln[0], 1e-12);
}

TEST(HostReference, MergeOfEmptyShardsIsZeroAndMinusInfinity) {
  const std::vector<double> partial_out = {1.0, 2.0, 3.0, 4.0}, partial_lse = {-kInf, -kInf};
  std::vector<double> out, lse;
  host_reference::merge_attention_states(partial_out, partial_lse, 2, 1, 1, 2, out, lse);
  EXPECT_EQ(out, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(lse[0], -kInf);
  // One empty shard among full ones leaves the others' result unchanged.
  const std::vector<double> mixed_lse = {-kInf, 0.7};
  host_reference::merge_attention_states(partial_out, mixed_lse, 2, 1, 1, 2, out, lse);
  EXPECT_EQ(out, (std::vector<double>{3.0, 4.0}));
  EXPECT_DOUBLE_EQ(lse[0], 0.7);
}

TEST(SyntheticBatch, SlotsFollowThePermutedBlockTable) {
  const SyntheticBatch b = make_synthetic_batch({.decode_seq_lens = {5, 17},
                                                 .prefills = {{40, 7}},
                                                 .block_size = 16,
                                                 .padding_rows = 3,
                                                 .seed = 5});
  EXPECT_EQ(b.num_decodes, 2);
  EXPECT_EQ(b.num_tokens, 1 + 1 + 7 + 3);
  EXPECT_EQ(b.query_start_loc, (std::vector<std::int32_t>{0, 1, 2, 9}));
  EXPECT_EQ(b.slot_mapping.size(), 12u);
  EXPECT_EQ(b.slot_mapping.back(), -1);
  // Request 1's new token is position 16: the first slot of its second block.
  EXPECT_EQ(b.slot_mapping[1], std::int64_t(b.block_table[1 * b.block_table_stride + 1]) * 16);
  EXPECT_EQ(b.context_slot_mapping.size(), 4u + 16u + 33u);
}

// A deployment's table rows (max_model_len / block_size wide), the requests' blocks first.
TEST(SyntheticBatch, TableRowsAsWideAsTheDeploymentsWhenAsked) {
  const SyntheticBatch narrow = make_synthetic_batch({.decode_seq_lens = {40, 3}});
  EXPECT_EQ(narrow.block_table_stride, 3) << "the widest request's";
  const SyntheticBatch wide =
      make_synthetic_batch({.decode_seq_lens = {40, 3}, .block_table_stride = 512});
  EXPECT_EQ(wide.block_table_stride, 512);
  EXPECT_EQ(wide.block_table.size(), 2u * 512u);
  EXPECT_EQ(wide.limits().max_blocks_per_req, 512);
  EXPECT_EQ(wide.slot_mapping[1], std::int64_t(wide.block_table[512]) * 16 + 2);
  EXPECT_EQ(
      make_synthetic_batch({.decode_seq_lens = {40}, .block_table_stride = 1}).block_table_stride,
      3)
      << "never narrower than a request";
}

// The tests' row-wise error: one wrong row among many shows, where the whole tensor's L2 hides it.
TEST(TestSupport, TheWorstRowShowsWhatTheWholeHides) {
  std::vector<double> want(100 * 64), got;
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = std::sin(double(i));
  got = want;
  for (std::size_t i = 37 * 64; i < 38 * 64; ++i) got[i] = -got[i];  // row 37 negated
  EXPECT_LT(testing::relative_l2(got, want), 0.21);
  EXPECT_NEAR(testing::worst_row_relative_l2(got, want, 64), 2.0, 1e-12);
  EXPECT_EQ(testing::worst_row_relative_l2(want, want, 64), 0.0);
  EXPECT_TRUE(std::isinf(testing::worst_row_relative_l2(got, want, 65))) << "rows that do not fit";
}

}  // namespace
}  // namespace freezeframe
