// engine/: the continuous batcher over a real request trace, step by step.

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "freezeframe/core/error.h"
#include "freezeframe/engine/continuous_batcher.h"
#include "freezeframe/engine/request_trace.h"

namespace freezeframe {
namespace {

struct LoopResult {
  int steps = 0;
  std::int64_t tokens = 0;
  std::set<int> finished;
};

/// Drives the batcher to completion, checking every step against the step validation.
LoopResult drive(ContinuousBatcher& batcher, BlockPool& pool, const BatcherLimits& limits,
          const std::vector<TraceRequest>& trace) {
  StepLimits step_limits;
  step_limits.max_num_seqs = limits.max_num_seqs;
  step_limits.max_num_batched_tokens = limits.max_num_batched_tokens;
  step_limits.max_model_len = limits.max_model_len;
  step_limits.block_size = limits.block_size;
  step_limits.num_blocks = pool.num_blocks();
  LoopResult run;
  std::size_t next = 0;
  double now = 0.0;
  while (run.finished.size() < trace.size()) {
    while (next < trace.size() && trace[next].arrival_s <= now) {
      batcher.add(static_cast<int>(next), trace[next].prompt_tokens, trace[next].output_tokens);
      ++next;
    }
    const StepBatch* step = batcher.schedule();
    if (step == nullptr) {
      EXPECT_LT(next, trace.size()) << "nothing runs yet requests are unfinished";
      if (next >= trace.size()) break;
      now = trace[next].arrival_s;  // idle until the next arrival
      continue;
    }
    const StepShape shape = validate_step(*step, step_limits);  // throws on any broken rule
    run.tokens += shape.num_tokens;
    for (int id : batcher.complete_step()) EXPECT_TRUE(run.finished.insert(id).second) << id;
    now += 0.02;  // a simulated step time
    ++run.steps;
    if (run.steps > 1000000) {
      ADD_FAILURE() << "no progress";
      break;
    }
  }
  return run;
}

TEST(ContinuousBatcher, RunsEveryRequestToCompletionAndFreesEveryBlock) {
  std::mt19937 rng(12);
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 300; ++i) {
    trace.push_back({i * 0.01, static_cast<std::int32_t>(1 + rng() % 700), static_cast<std::int32_t>(rng() % 60)});
  }
  const BatcherLimits limits{.max_num_seqs = 16, .max_num_batched_tokens = 256, .max_model_len = 512, .block_size = 16};
  BlockPool pool(400);
  ContinuousBatcher batcher(limits, pool);
  const LoopResult run = drive(batcher, pool, limits, trace);
  EXPECT_EQ(run.finished.size(), trace.size());
  EXPECT_EQ(pool.num_free(), 400) << "every block back in the pool";
  EXPECT_EQ(batcher.num_running() + batcher.num_waiting(), 0);
  // Every prompt token (clamped to the model length) and every fed-back output token ran once.
  std::int64_t expected = 0;
  for (const auto& r : trace) {
    const std::int64_t prompt = std::min<std::int64_t>(r.prompt_tokens, 511);
    const std::int64_t output = std::min<std::int64_t>(r.output_tokens, 512 - prompt + 1);
    expected += prompt + std::max<std::int64_t>(0, output - 1);
  }
  EXPECT_EQ(run.tokens, expected);
}

TEST(ContinuousBatcher, ReplaysTheAzureConversationTrace) {
  const std::filesystem::path path = std::filesystem::path(FREEZEFRAME_SOURCE_DIR) / ".." / "shared" /
                                     "data" / "traces" / "AzureLLMInferenceTrace_conv.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "the Azure traces are not beside the checkout: " << path;
  // The first 500 requests, arriving 20× faster than recorded.
  const auto trace = load_azure_trace(path.string(), {.time_scale = 0.05, .max_requests = 500});
  const BatcherLimits limits{.max_num_seqs = 64, .max_num_batched_tokens = 2048, .max_model_len = 8192, .block_size = 16};
  BlockPool pool(8192);
  ContinuousBatcher batcher(limits, pool);
  const LoopResult run = drive(batcher, pool, limits, trace);
  EXPECT_EQ(run.finished.size(), 500u);
  EXPECT_EQ(pool.num_free(), 8192);
}

TEST(ContinuousBatcher, RejectsBadLimitsAndRequests) {
  BlockPool pool(10);
  EXPECT_THROW(ContinuousBatcher({.max_num_seqs = 8, .max_num_batched_tokens = 4, .max_model_len = 64, .block_size = 16}, pool), Error);
  ContinuousBatcher batcher({.max_num_seqs = 2, .max_num_batched_tokens = 8, .max_model_len = 64, .block_size = 16}, pool);
  EXPECT_THROW(batcher.add(0, 0, 4), Error);
  EXPECT_THROW(batcher.add(0, 4, -1), Error);
  BlockPool small(2);
  ContinuousBatcher tight({.max_num_seqs = 2, .max_num_batched_tokens = 8, .max_model_len = 64, .block_size = 16}, small);
  EXPECT_NO_THROW(tight.add(1, 20, 5)) << "24 positions: 2 blocks";
  EXPECT_THROW(tight.add(2, 63, 2), Error) << "64 positions need 4 blocks, the cache has 2";
}

}  // namespace
}  // namespace freezeframe
