// The engine with on-device sampling: for every captured size and sizes off the ladder, in
// full and piecewise graphs and eagerly, each request's token (on the device and in the pinned
// host copy) is the one sample_reference draws from the step's own logits at (seed, seq_len);
// the buffers are poisoned before each step. An engine that does not sample keeps its steps as
// they were and refuses sampling parameters.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/engine_test_util.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/runtime/sampler.h"
#include "freezeframe/engine/spec/spec.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

using testing::random_shape;
using testing::TestBatch;
using testing::tiny_spec;

constexpr std::int32_t kPoisonToken = 0x7f7f7f7f;

std::vector<float> logits_of(Engine& engine, const StepResult& result) {
  engine.synchronize();
  std::vector<float> host(static_cast<std::size_t>(result.logits.numel()));
  FF_CUDA_CHECK(cudaMemcpy(host.data(), result.logits.data(), host.size() * sizeof(float),
                           cudaMemcpyDeviceToHost));
  return host;
}

std::vector<std::int32_t> device_tokens(Engine& engine, const StepResult& result) {
  engine.synchronize();
  std::vector<std::int32_t> host(static_cast<std::size_t>(result.token_ids.numel()));
  FF_CUDA_CHECK(cudaMemcpy(host.data(), result.token_ids.data(), host.size() * sizeof(std::int32_t),
                           cudaMemcpyDeviceToHost));
  return host;
}

/// One set of parameters per request: greedy, filters alone and together, seeds by request.
std::vector<SamplingParams> mixed_params(int reqs, std::mt19937& rng) {
  const SamplingParams kinds[] = {{0.0f, 0, 1.0f, 0},  {1.0f, 0, 1.0f, 0}, {0.7f, 20, 1.0f, 0},
                                  {1.0f, 1, 1.0f, 0},  {1.2f, 0, 0.9f, 0}, {0.9f, 50, 0.8f, 0},
                                  {1.0f, 0, 1e-6f, 0}, {3.0f, 0, 0.5f, 0}};
  std::vector<SamplingParams> params(reqs);
  for (int r = 0; r < reqs; ++r) {
    params[r] = kinds[(r + rng() % 8) % 8];
    params[r].seed = rng();
  }
  return params;
}

/// Poisons the engine's token buffers (device and pinned host; their addresses are those of
/// every step) so that a step that does not write a request's token cannot pass.
void poison(Engine& engine, const StepResult& any) {
  engine.synchronize();
  const std::size_t bytes = sizeof(std::int32_t) * engine.spec().scheduler.max_num_seqs;
  FF_CUDA_CHECK(cudaMemset(any.token_ids.data(), 0x7f, bytes));
  std::memset(const_cast<std::int32_t*>(any.host_token_ids.data()), 0x7f, bytes);
}

void expect_reference_tokens(Engine& engine, const StepBatch& batch, const StepResult& r,
                             const std::string& what) {
  SCOPED_TRACE(what + " ran " + std::string(to_string(r.mode)) + " " + r.descriptor.describe());
  const std::vector<float> logits = logits_of(engine, r);
  const std::vector<std::int32_t> on_device = device_tokens(engine, r);
  const int reqs = static_cast<int>(batch.requests.size());
  ASSERT_EQ(static_cast<int>(r.host_token_ids.size()), reqs);
  ASSERT_EQ(static_cast<int>(on_device.size()), reqs);
  const int vocab = engine.limits().vocab_size;
  for (int i = 0; i < reqs; ++i) {
    const std::span<const float> row(logits.data() + std::size_t(i) * vocab,
                                     static_cast<std::size_t>(vocab));
    const SamplingParams p = batch.sampling.empty() ? SamplingParams{} : batch.sampling[i];
    const std::int32_t want = sample_reference(row, p, batch.requests[i].seq_len);
    ASSERT_NE(on_device[i], kPoisonToken) << "request " << i << " was not sampled";
    EXPECT_EQ(on_device[i], want) << "request " << i << ": temperature " << p.temperature
                                  << ", top_k " << p.top_k << ", top_p " << p.top_p;
    EXPECT_EQ(r.host_token_ids[i], on_device[i]) << "request " << i << ": the host copy";
  }
}

class EngineSampling : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineSampling, TokensAreTheReferenceDrawsInEveryMode) {
  FF_REQUIRE_GPU();
  EngineOptions options;
  options.sample_tokens = true;
  Engine engine(
      parse_spec(tiny_spec("paged_decode", "  mode: " + GetParam() + "\n  max_capture_size: 64\n")),
      options);
  ASSERT_TRUE(engine.samples());
  ASSERT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;
  std::mt19937 rng(17);
  std::vector<int> sizes(engine.dispatcher().capture_sizes().begin(),
                         engine.dispatcher().capture_sizes().end());
  for (const int off : {3, 13, 45, 70}) sizes.push_back(off);  // 70: past the graphs, eager
  const DeploymentLimits& limits = engine.limits();
  const bool mixed_in_graphs = GetParam() != "full_decode_only";
  StepResult first;
  for (const int n : sizes) {
    for (const bool mixed : {false, true}) {
      if ((mixed && n < 4) || (!mixed && n > limits.max_num_seqs)) continue;
      // Prefill chunks of 2 tokens; the decodes fill the rest: n tokens in all, in no more
      // requests than the scheduler allows (each chunk takes 2 tokens for one request).
      const int prefills = mixed ? std::max(1 + n / 16, n - limits.max_num_seqs) : 0;
      const TestBatch tb(random_shape(n - 2 * prefills, prefills, 2, 300, rng), limits.block_size,
                         limits.num_blocks, rng);
      StepBatch batch = tb.batch();
      const std::vector<SamplingParams> params =
          mixed_params(static_cast<int>(batch.requests.size()), rng);
      batch.sampling = params;
      if (first.token_ids.defined()) poison(engine, first);
      const StepResult graph = engine.step(batch);
      if (!first.token_ids.defined()) first = graph;
      expect_reference_tokens(engine, batch, graph, "size " + std::to_string(n));
      if (n <= 64 && (!mixed || mixed_in_graphs)) {
        EXPECT_NE(graph.mode, RuntimeMode::kEager);
      }
      poison(engine, first);
      expect_reference_tokens(engine, batch, engine.step(batch, {.eager = true}),
                              "size " + std::to_string(n) + " eager");
      // Without parameters every request is greedy.
      batch.sampling = {};
      poison(engine, first);
      expect_reference_tokens(engine, batch, engine.step(batch), "greedy");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, EngineSampling,
                         ::testing::Values("full_and_piecewise", "piecewise", "full_decode_only"));

// A step replayed draws the same tokens: they depend on (seed, position) and the logits only.
TEST(EngineSampling, AReplayedStepDrawsTheSameTokens) {
  FF_REQUIRE_GPU();
  EngineOptions options;
  options.sample_tokens = true;
  Engine engine(parse_spec(tiny_spec("paged_decode", "  max_capture_size: 16\n")), options);
  std::mt19937 rng(23);
  const TestBatch tb(random_shape(8, 0, 1, 200, rng), 16, engine.limits().num_blocks, rng);
  StepBatch batch = tb.batch();
  std::vector<SamplingParams> params(8, SamplingParams{1.5f, 0, 1.0f, 99});
  batch.sampling = params;
  const StepResult a = engine.step(batch);
  engine.synchronize();
  const std::vector<std::int32_t> first(a.host_token_ids.begin(), a.host_token_ids.end());
  const StepResult b = engine.step(batch);
  engine.synchronize();
  EXPECT_EQ(std::vector<std::int32_t>(b.host_token_ids.begin(), b.host_token_ids.end()), first);
  // Other seeds draw other tokens (at temperature 1.5 over 1000 tokens, some of 8 differ).
  for (auto& p : params) p.seed = 100;
  const StepResult c = engine.step(batch);
  engine.synchronize();
  EXPECT_NE(std::vector<std::int32_t>(c.host_token_ids.begin(), c.host_token_ids.end()), first);
}

TEST(EngineSampling, AnEngineThatDoesNotSampleRefusesParameters) {
  FF_REQUIRE_GPU();
  Engine engine(parse_spec(tiny_spec("paged_decode", "  max_capture_size: 16\n")));
  EXPECT_FALSE(engine.samples());
  std::mt19937 rng(29);
  const TestBatch tb(random_shape(2, 1, 8, 100, rng), 16, engine.limits().num_blocks, rng);
  const StepResult r = engine.step(tb.batch());
  EXPECT_FALSE(r.token_ids.defined());
  EXPECT_TRUE(r.host_token_ids.empty());
  StepBatch with = tb.batch();
  const std::vector<SamplingParams> params(3);
  with.sampling = params;
  try {
    (void)engine.step(with);
    ADD_FAILURE() << "sampling parameters were accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("EngineOptions::sample_tokens"), std::string::npos) << e.message();
  }
  // Parameters out of range are refused naming the request and field, before anything runs.
  EngineOptions options;
  options.sample_tokens = true;
  Engine sampling(parse_spec(tiny_spec("paged_decode", "  max_capture_size: 16\n")), options);
  std::vector<SamplingParams> bad(3);
  bad[2].top_p = 0.0f;
  with.sampling = bad;
  try {
    (void)sampling.step(with);
    ADD_FAILURE() << "top_p 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("request 2: sampling.top_p"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace freezeframe
