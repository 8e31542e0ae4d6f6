// serving/: the serving loop's per-request figures on its modelled clock.

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/engine/runtime/graph_scope.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/graphs/dispatcher.h"
#include "freezeframe/serving/request_trace.h"
#include "freezeframe/serving/serving_loop.h"
#include "freezeframe/serving/step_cost_model.h"

namespace freezeframe {
namespace {

constexpr const char* kSpec = R"(model:
  name: small
  num_layers: 2
  hidden_size: 256
  num_heads: 4
  intermediate_size: 512
  vocab_size: 1000
  max_position_embeddings: 1024
scheduler:
  max_num_seqs: 4
  max_num_batched_tokens: 64
)";

TEST(ServingLoop, RefusesAModelledStepTimeOutsideItsRange) {
  const EngineSpec spec = parse_spec(kSpec);
  const Dispatcher dispatcher(effective_graph_mode(spec), spec.cuda_graphs.capture_sizes,
                              spec.scheduler.max_num_seqs);
  const std::vector<TraceRequest> trace = {{0.0, 40, 4}};
  for (const double ms : {1e300, 0.0, -1.0, std::numeric_limits<double>::quiet_NaN()}) {
    try {
      (void)run_serving_loop(spec, 1000, dispatcher, trace, nullptr, {.modelled_step_ms = ms});
      ADD_FAILURE() << ms << " ms was accepted";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("the modelled step time must be above 0 and at most 3600000 ms"),
                std::string::npos)
          << e.message();
    }
  }
}

// Steps of 10 ms. Request 0 arrives at 0 with a 40-token prompt and 4 output tokens: its
// prompt runs in the first step (first token at 10 ms), then three decodes (the last at
// 40 ms). Request 1 arrives at 5 ms, while that step runs, with a 100-token prompt: it is
// first scheduled at 10 ms (queued 5 ms), prefills 63 tokens beside the decode, then 37, so
// its first token comes at 30 ms (25 ms after arrival) and its only other token at 40 ms.
TEST(ServingLoop, ReportsQueueingTimeToFirstTokenAndTimePerOutputToken) {
  const EngineSpec spec = parse_spec(kSpec);
  const Dispatcher dispatcher(effective_graph_mode(spec), spec.cuda_graphs.capture_sizes,
                              spec.scheduler.max_num_seqs);
  const std::vector<TraceRequest> trace = {{0.0, 40, 4}, {0.005, 100, 2}};
  const ServingReport r =
      run_serving_loop(spec, 1000, dispatcher, trace, nullptr, {.modelled_step_ms = 10.0});
  ASSERT_EQ(r.finished, 2u);
  EXPECT_EQ(r.finished_by_length, 2u) << "nothing is drawn without an engine";
  EXPECT_EQ(r.finished_by_stop, 0u);
  EXPECT_EQ(r.steps, 4);
  ASSERT_EQ(r.queue_ms.samples, 2u);
  // Nearest rank, rounding half up: the p50 of two samples is the larger.
  EXPECT_NEAR(r.queue_ms.p50, 5.0, 1e-9) << "{0, 5}";
  EXPECT_NEAR(r.queue_ms.p99, 5.0, 1e-9);
  ASSERT_EQ(r.ttft_ms.samples, 2u);
  EXPECT_NEAR(r.ttft_ms.p50, 25.0, 1e-9) << "{10, 25}";
  EXPECT_NEAR(r.ttft_ms.p99, 25.0, 1e-9);
  ASSERT_EQ(r.tpot_ms.samples, 2u);
  EXPECT_NEAR(r.tpot_ms.p50, 10.0, 1e-9) << "(40 − 10) / 3 and (40 − 30) / 1";
  EXPECT_NEAR(r.tpot_ms.p99, 10.0, 1e-9);
}

// With a cost model each step takes what the model says: here a flat 2 ms of dense time and
// 1 us per decode context token and per prefill query-key pair. Request 0 (40-token prompt, 3
// outputs) prefills in one step (2 + 0.820 ms: 40·41/2 pairs), then decodes over 41 and 42
// tokens (2.041 and 2.042 ms).
TEST(ServingLoop, TimesEachStepWithTheCostModel) {
  std::vector<StepSample> samples(2);
  samples[0].work = {1, 1000, 0};
  samples[0].run_tokens = 1, samples[0].ms = 3.0, samples[0].attention_ms = 1.0;
  samples[1].work = {100, 0, 5050};
  samples[1].run_tokens = 100, samples[1].ms = 7.05, samples[1].attention_ms = 5.05;
  const StepCostModel model = StepCostModel::fit(samples, "fitted");
  ASSERT_NEAR(model.decode_ms_per_context_token(), 1e-3, 1e-12);
  ASSERT_NEAR(model.prefill_ms_per_pair(), 1e-3, 1e-12);

  const EngineSpec spec = parse_spec(kSpec);
  const Dispatcher dispatcher(effective_graph_mode(spec), spec.cuda_graphs.capture_sizes,
                              spec.scheduler.max_num_seqs);
  const std::vector<TraceRequest> trace = {{0.0, 40, 3}};
  const ServingReport r =
      run_serving_loop(spec, 1000, dispatcher, trace, nullptr, {.cost_model = &model});
  ASSERT_EQ(r.finished, 1u);
  EXPECT_EQ(r.steps, 3);
  EXPECT_NEAR(r.busy_seconds * 1e3, 2.820 + 2.041 + 2.042, 1e-9);
  EXPECT_NEAR(r.ttft_ms.p50, 2.820, 1e-9);
  EXPECT_NEAR(r.tpot_ms.p50, (2.041 + 2.042) / 2, 1e-9);
  EXPECT_NEAR(r.step_ms_max, 2.820, 1e-9);
}

// Every prompt token is a prefill token, a one-token last chunk included (it runs among the
// decodes): a 65-token prompt in steps of 64 tokens prefills 64, then 1 with its first output,
// then decodes its other two outputs.
TEST(ServingLoop, ACountOfPrefillTokensIsTheSumOfThePrompts) {
  const EngineSpec spec = parse_spec(kSpec);
  const Dispatcher dispatcher(effective_graph_mode(spec), spec.cuda_graphs.capture_sizes,
                              spec.scheduler.max_num_seqs);
  const ServingReport one =
      run_serving_loop(spec, 1000, dispatcher, {{0.0, 65, 3}}, nullptr, {.modelled_step_ms = 10});
  EXPECT_EQ(one.prefill_tokens, 65);
  EXPECT_EQ(one.decode_tokens, 2);
  // The shipped traces' heads, whole, in Llama-3.1-8B's 28,750 blocks (80 GiB): every request
  // finishes unpreempted, so the prefill tokens are the prompts' sum and the decodes each
  // request's outputs after its first.
  for (const char* name :
       {"azure_code_head.csv", "azure_conv_head.csv", "mooncake_conversation_head.jsonl"}) {
    SCOPED_TRACE(name);
    const std::vector<TraceRequest> trace =
        load_trace(std::string(FREEZEFRAME_SOURCE_DIR) + "/tests/traces/" + name);
    const EngineSpec llama =
        load_spec(std::string(FREEZEFRAME_SOURCE_DIR) + "/configs/llama-3.1-8b.yaml");
    const Dispatcher d(effective_graph_mode(llama), llama.cuda_graphs.capture_sizes,
                       llama.scheduler.max_num_seqs);
    const ServingReport r =
        run_serving_loop(llama, 28750, d, trace, nullptr, {.modelled_step_ms = 20});
    ASSERT_EQ(r.finished, trace.size());
    ASSERT_EQ(r.preemptions, 0);
    long prompts = 0, later_outputs = 0;
    for (const TraceRequest& t : trace) {
      prompts += t.prompt_tokens;
      later_outputs += t.output_tokens - 1;
    }
    EXPECT_EQ(r.prefill_tokens, prompts);
    EXPECT_EQ(r.decode_tokens, later_outputs);
    EXPECT_EQ(r.output_tokens, later_outputs + static_cast<long>(trace.size()));
    EXPECT_EQ(r.wall_seconds, 0.0) << "no engine: the loop's clock is modelled";
  }
}

// With prefix caching the Mooncake head's equal hash ids are equal tokens: nearly all the reuse
// they allow is found (whole 16-token blocks of 512-token hash blocks, never a prompt's last
// token), the prefill shrinks by exactly what was found, and nothing else changes.
TEST(ServingLoop, PrefixCachingFindsTheReuseTheHashIdsAllow) {
  const std::vector<TraceRequest> trace = load_trace(
      std::string(FREEZEFRAME_SOURCE_DIR) + "/tests/traces/mooncake_conversation_head.jsonl");
  const EngineSpec llama =
      load_spec(std::string(FREEZEFRAME_SOURCE_DIR) + "/configs/llama-3.1-8b.yaml");
  const Dispatcher d(effective_graph_mode(llama), llama.cuda_graphs.capture_sizes,
                     llama.scheduler.max_num_seqs);
  const ServingReport off =
      run_serving_loop(llama, 28750, d, trace, nullptr, {.modelled_step_ms = 20});
  ServingOptions caching{.modelled_step_ms = 20};
  caching.prefix_caching = true;
  const ServingReport on = run_serving_loop(llama, 28750, d, trace, nullptr, caching);
  std::int64_t bound = 0, prompts = 0;
  for (const TraceRequest& t : trace) {
    bound += t.reusable_prefix_tokens;
    prompts += t.prompt_tokens;
  }
  ASSERT_EQ(on.finished, trace.size());
  EXPECT_EQ(on.prefix_queried_tokens, prompts);
  EXPECT_GE(on.prefix_hit_tokens, bound * 9 / 10);
  EXPECT_LE(on.prefix_hit_tokens, bound);
  EXPECT_EQ(on.prefill_tokens, off.prefill_tokens - on.prefix_hit_tokens);
  EXPECT_EQ(on.decode_tokens, off.decode_tokens);
  EXPECT_EQ(off.prefix_hit_tokens, 0);
  EXPECT_LE(on.ttft_ms.p50, off.ttft_ms.p50);
}

}  // namespace
}  // namespace freezeframe
