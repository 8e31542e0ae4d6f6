// serving/: the generation loop over an engine that samples. Every token the engine draws, step
// after step with prefills, chunks and decodes batched together, is the host reference's draw
// from that step's logits; requests stop at their stop tokens or their length, and every block
// comes back.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "engine/runtime/engine_test_util.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/runtime/sampler.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/serving/generation_loop.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

using testing::tiny_spec;

/// The engine, with each step's tokens checked against sample_reference on its logits.
class CheckedEngine final : public TokenSource {
 public:
  explicit CheckedEngine(Engine& engine) : engine_(engine), source_(engine) {}

  std::span<const std::int32_t> run(const StepBatch& step) override {
    const std::span<const std::int32_t> tokens = source_.run(step);
    const StepResult& r = source_.last();
    std::vector<float> logits(static_cast<std::size_t>(r.logits.numel()));
    FF_CUDA_CHECK(cudaMemcpy(logits.data(), r.logits.data(), logits.size() * sizeof(float),
                             cudaMemcpyDeviceToHost));
    const std::size_t vocab = static_cast<std::size_t>(engine_.limits().vocab_size);
    EXPECT_EQ(tokens.size(), step.requests.size());
    for (std::size_t i = 0; i < step.requests.size(); ++i) {
      const std::span<const float> row(logits.data() + i * vocab, vocab);
      EXPECT_EQ(tokens[i], sample_reference(row, step.sampling[i], step.requests[i].seq_len))
          << "step " << steps << " request " << i << " ran " << to_string(r.mode);
    }
    ++steps;
    return tokens;
  }

  int steps = 0;

 private:
  Engine& engine_;
  EngineTokenSource source_;
};

TEST(GenerationLoopGpu, DrawsTheReferenceTokensUntilEachRequestStops) {
  FF_REQUIRE_GPU();
  EngineOptions options;
  options.sample_tokens = true;
  Engine engine(parse_spec(tiny_spec("paged_decode", "  max_capture_size: 64\n")), options);
  CheckedEngine checked(engine);
  GenerationLoop loop(engine.limits(), checked);
  std::mt19937 rng(41);
  // A hundred stop tokens of the thousand: some requests stop early, others run their length.
  std::vector<std::int32_t> stop;
  for (std::int32_t t = 0; t < 1000; t += 10) stop.push_back(t);
  const SamplingParams kinds[] = {{0.0f, 0, 1.0f, 0}, {1.0f, 0, 1.0f, 0}, {0.8f, 40, 0.9f, 0}};
  for (int id = 0; id < 10; ++id) {
    GenerationRequest g;
    g.id = id;
    g.prompt.resize(5 + rng() % 300);
    for (auto& t : g.prompt) t = static_cast<std::int32_t>(rng() % 1000);
    g.max_tokens = 10 + static_cast<std::int32_t>(rng() % 40);
    g.stop_token_ids = stop;
    g.sampling = kinds[id % 3];
    g.sampling.seed = rng();
    ASSERT_EQ(loop.add(std::move(g)), Admission::kQueued);
  }
  std::map<int, FinishReason> finished;
  while (!loop.idle()) {
    const ContinuousBatcher::StepEvents* e = loop.step();
    ASSERT_NE(e, nullptr);
    for (std::size_t i = 0; i < e->finished.size(); ++i) finished[e->finished[i]] = e->reasons[i];
  }
  EXPECT_EQ(finished.size(), 10u);
  EXPECT_GT(checked.steps, 10);
  EXPECT_EQ(loop.pool().num_free(), engine.limits().num_blocks);
}

TEST(GenerationLoopGpu, AnEngineThatDoesNotSampleIsRefused) {
  FF_REQUIRE_GPU();
  Engine engine(parse_spec(tiny_spec("paged_decode", "  max_capture_size: 16\n")));
  EXPECT_THROW(EngineTokenSource source(engine), Error);
}

}  // namespace
}  // namespace freezeframe
