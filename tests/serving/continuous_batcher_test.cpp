// serving/: the continuous batcher over a real request trace, step by step.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "freezeframe/base/error.h"
#include "freezeframe/serving/continuous_batcher.h"
#include "freezeframe/serving/request_trace.h"
#include "serving/batcher_drive.h"

namespace freezeframe {
namespace {

using serving_testing::drive;
using serving_testing::LoopResult;

TEST(ContinuousBatcher, RunsEveryRequestToCompletionAndFreesEveryBlock) {
  std::mt19937 rng(12);
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 300; ++i) {
    trace.push_back({i * 0.01, static_cast<std::int32_t>(1 + rng() % 700),
                     static_cast<std::int32_t>(rng() % 60)});
  }
  const DeploymentLimits limits{
      .max_num_seqs = 16, .max_num_batched_tokens = 256, .max_model_len = 512, .block_size = 16};
  BlockPool pool(400);
  ContinuousBatcher batcher(limits, pool);
  const LoopResult run = drive(batcher, pool, limits, trace);
  // Prompts longer than the model length are refused and counted, outputs running past it cut
  // and counted; everything else runs to completion.
  int too_long = 0, cut = 0, with_output = 0;
  std::int64_t expected = 0;
  for (const auto& r : trace) {
    if (r.prompt_tokens > 512) {
      ++too_long;
      continue;
    }
    with_output += r.output_tokens > 0;
    const std::int64_t output = std::min<std::int64_t>(r.output_tokens, 512 - r.prompt_tokens + 1);
    cut += output < r.output_tokens;
    // Every prompt token and every fed-back output token runs once.
    expected += r.prompt_tokens + std::max<std::int64_t>(0, output - 1);
  }
  ASSERT_GT(too_long, 0);
  ASSERT_GT(cut, 0);
  EXPECT_EQ(run.admissions.at(Admission::kPromptTooLong), too_long);
  EXPECT_EQ(run.admissions.at(Admission::kOutputCut), cut);
  EXPECT_EQ(run.finished.size(), trace.size() - too_long);
  EXPECT_EQ(run.first_token.size(), static_cast<std::size_t>(with_output))
      << "one first token per admitted request with an output";
  EXPECT_EQ(pool.num_free(), 400) << "every block back in the pool";
  EXPECT_EQ(batcher.num_running() + batcher.num_waiting(), 0);
  EXPECT_EQ(run.tokens, expected);
}

// Under decode context parallelism a block of the pool is a virtual block of block_size · D
// positions: the same trace runs to completion over tables a quarter as long at D = 4, every
// step valid in virtual blocks, and a sequence the pool cannot hold at D = 1 fits at D = 4.
TEST(ContinuousBatcher, CountsVirtualBlocksUnderDecodeContextParallelism) {
  std::mt19937 rng(13);
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 200; ++i) {
    trace.push_back({i * 0.01, static_cast<std::int32_t>(1 + rng() % 500),
                     static_cast<std::int32_t>(rng() % 60)});
  }
  const DeploymentLimits limits{
      .max_num_seqs = 16, .max_num_batched_tokens = 256, .max_model_len = 512, .block_size = 16};
  BlockPool pool(100);
  ContinuousBatcher batcher(limits, pool, DcpSharding{4, 1, 16});
  const LoopResult run = drive(batcher, pool, limits, trace, 4);
  EXPECT_EQ(run.finished.size(), trace.size());
  EXPECT_EQ(pool.num_free(), 100) << "every block back in the pool";

  BlockPool small(8);  // 128 positions at D = 1, 512 at D = 4
  ContinuousBatcher one(limits, small);
  EXPECT_EQ(one.add(0, 300, 10), Admission::kCacheTooSmall);
  ContinuousBatcher four(limits, small, DcpSharding{4, 1, 16});
  EXPECT_EQ(four.add(0, 300, 10), Admission::kQueued);
  EXPECT_THROW(ContinuousBatcher(limits, small, DcpSharding{4, 1, 32}), Error)
      << "a layout of other blocks than the cache's";
}

// A pool far too small for the load: blocks are taken as sequences grow, the latest admitted
// request gives its blocks back when the pool runs out, and is recomputed later; every
// request still finishes with all its tokens, and every block comes back.
TEST(ContinuousBatcher, PreemptsAndRecomputesWhenBlocksRunOut) {
  std::mt19937 rng(31);
  std::vector<TraceRequest> trace;
  std::int64_t least = 0;  // every prompt token and fed-back output token once
  for (int i = 0; i < 200; ++i) {
    const auto prompt = static_cast<std::int32_t>(1 + rng() % 300);
    const auto output = static_cast<std::int32_t>(1 + rng() % 200);
    trace.push_back({i * 0.005, prompt, output});
    least += prompt + output - 1;
  }
  const DeploymentLimits limits{
      .max_num_seqs = 16, .max_num_batched_tokens = 256, .max_model_len = 512, .block_size = 16};
  BlockPool pool(40);  // 640 tokens: a few requests at a time
  ContinuousBatcher batcher(limits, pool);
  const LoopResult run = drive(batcher, pool, limits, trace);
  EXPECT_EQ(run.finished.size(), trace.size());
  EXPECT_GT(batcher.num_preemptions(), 0);
  EXPECT_GT(run.tokens, least) << "preempted requests recompute their tokens";
  EXPECT_EQ(pool.num_free(), 40);
  EXPECT_EQ(batcher.num_running() + batcher.num_waiting(), 0);

  // Enough blocks for everything at once: nothing is preempted, nothing recomputed.
  BlockPool roomy(100000);
  ContinuousBatcher calm(limits, roomy);
  const LoopResult easy = drive(calm, roomy, limits, trace);
  EXPECT_EQ(calm.num_preemptions(), 0);
  EXPECT_EQ(easy.tokens, least);
}

TEST(ContinuousBatcher, AbortEndsARequestAndFreesItsBlocks) {
  const DeploymentLimits limits{
      .max_num_seqs = 4, .max_num_batched_tokens = 64, .max_model_len = 512, .block_size = 16};
  BlockPool pool(100);
  ContinuousBatcher batcher(limits, pool);
  ASSERT_EQ(batcher.add(0, 40, 10), Admission::kQueued);
  ASSERT_EQ(batcher.add(1, 40, 10), Admission::kQueued);
  ASSERT_EQ(batcher.add(2, 40, 10), Admission::kQueued);
  ASSERT_NE(batcher.schedule(), nullptr);  // 0 and 1 prefill (64 tokens); 2 waits
  EXPECT_THROW((void)batcher.abort(0), Error) << "not between schedule and complete";
  (void)batcher.complete_step();
  EXPECT_EQ(batcher.num_running(), 2);
  EXPECT_LT(pool.num_free(), 100);
  EXPECT_TRUE(batcher.abort(0)) << "running";
  EXPECT_TRUE(batcher.abort(2)) << "waiting";
  EXPECT_FALSE(batcher.abort(2)) << "already gone";
  EXPECT_FALSE(batcher.abort(7)) << "never added";
  EXPECT_EQ(batcher.num_running() + batcher.num_waiting(), 1);
  while (const StepBatch* step = batcher.schedule()) {
    ASSERT_EQ(step->requests.size(), 1u);
    (void)batcher.complete_step();
  }
  EXPECT_EQ(pool.num_free(), 100);
}

TEST(ContinuousBatcher, RejectsBadLimitsAndRequests) {
  BlockPool pool(10);
  try {
    ContinuousBatcher(
        {.max_num_seqs = 8, .max_num_batched_tokens = 4, .max_model_len = 64, .block_size = 16},
        pool);
    ADD_FAILURE() << "limits with fewer batched tokens than sequences were accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("scheduler.max_num_batched_tokens"), std::string::npos)
        << e.message();
  }
  EXPECT_THROW(
      ContinuousBatcher(
          {.max_num_seqs = 8, .max_num_batched_tokens = 8, .max_model_len = 1, .block_size = 16},
          pool),
      Error);
  ContinuousBatcher batcher(
      {.max_num_seqs = 2, .max_num_batched_tokens = 8, .max_model_len = 64, .block_size = 16},
      pool);
  EXPECT_THROW((void)batcher.add(0, 0, 4), Error);
  EXPECT_THROW((void)batcher.add(0, 4, -1), Error);
  EXPECT_EQ(batcher.add(1, 65, 1), Admission::kPromptTooLong);
  EXPECT_EQ(batcher.add(2, 64, 1), Admission::kQueued)
      << "a full-length prompt still yields a token";
  EXPECT_EQ(batcher.add(3, 60, 10), Admission::kOutputCut) << "60 + 9 fed back > 64";
  EXPECT_EQ(batcher.add(4, 2147483647, 1), Admission::kPromptTooLong) << "no wrap, no clamp";
  BlockPool small(2);
  ContinuousBatcher tight(
      {.max_num_seqs = 2, .max_num_batched_tokens = 8, .max_model_len = 64, .block_size = 16},
      small);
  EXPECT_EQ(tight.add(1, 20, 5), Admission::kQueued) << "24 positions: 2 blocks";
  EXPECT_EQ(tight.add(2, 63, 2), Admission::kCacheTooSmall)
      << "64 positions need 4 blocks, the cache has 2";
  EXPECT_EQ(tight.num_waiting(), 1) << "refused requests are not queued";
}

}  // namespace
}  // namespace freezeframe
