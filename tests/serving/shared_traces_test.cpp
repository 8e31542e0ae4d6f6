// The real request traces, where they sit beside the checkout (../shared/data/traces, not in
// the repository): read whole, and one replayed through the batcher. Labelled `shared`, not
// `cpu`: without the traces they skip, saying so.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "freezeframe/serving/continuous_batcher.h"
#include "freezeframe/serving/request_trace.h"
#include "serving/batcher_drive.h"

namespace freezeframe {
namespace {

using serving_testing::drive;
using serving_testing::LoopResult;

TEST(RequestTrace, ReadsTheAzureCodeTrace) {
  const std::filesystem::path path = std::filesystem::path(FREEZEFRAME_SOURCE_DIR) / ".." /
                                     "shared" / "data" / "traces" /
                                     "AzureLLMInferenceTrace_code.csv";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "the Azure traces are not beside the checkout: " << path;
  const auto trace = load_azure_trace(path.string());
  ASSERT_EQ(trace.size(), 8819u);
  EXPECT_EQ(trace[0].prompt_tokens, 4808);
  EXPECT_EQ(trace[0].output_tokens, 10);
  EXPECT_GT(trace.back().arrival_s, 3000.0) << "the trace spans about an hour";
  EXPECT_LT(trace.back().arrival_s, 3600.0);
}

// The real conversation trace, where the traces sit beside the checkout: 12,031 requests; the
// prefix reuse worked out independently (Python over the same file): 105,710 of its 288,500
// hash blocks, 54,098,411 of 144,793,823 prompt tokens.
TEST(MooncakeTrace, ReadsTheConversationTrace) {
  const std::filesystem::path path = std::filesystem::path(FREEZEFRAME_SOURCE_DIR) / ".." /
                                     "shared" / "data" / "traces" /
                                     "mooncake_conversation_trace.jsonl";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "the traces are not beside the checkout";
  const auto trace = load_trace(path.string());
  ASSERT_EQ(trace.size(), 12031u);
  std::int64_t prompt = 0, reusable = 0;
  for (const TraceRequest& r : trace) {
    prompt += r.prompt_tokens;
    reusable += r.reusable_prefix_tokens;
  }
  EXPECT_EQ(prompt, 144'793'823);
  EXPECT_EQ(reusable, 54'098'411);
  EXPECT_NEAR(trace.back().arrival_s, 3536.999, 1e-6) << "its last timestamp, 3536999 ms";
}

TEST(ContinuousBatcher, ReplaysTheAzureConversationTrace) {
  const std::filesystem::path path = std::filesystem::path(FREEZEFRAME_SOURCE_DIR) / ".." /
                                     "shared" / "data" / "traces" /
                                     "AzureLLMInferenceTrace_conv.csv";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << "the Azure traces are not beside the checkout: " << path;
  // The first 500 requests, arriving 20× faster than recorded.
  const auto trace = load_azure_trace(path.string(), {.time_scale = 0.05, .max_requests = 500});
  const DeploymentLimits limits{
      .max_num_seqs = 64, .max_num_batched_tokens = 2048, .max_model_len = 8192, .block_size = 16};
  BlockPool pool(8192);
  ContinuousBatcher batcher(limits, pool);
  const LoopResult run = drive(batcher, pool, limits, trace);
  EXPECT_EQ(run.finished.size(), 500u);
  EXPECT_EQ(pool.num_free(), 8192);
}

}  // namespace
}  // namespace freezeframe
