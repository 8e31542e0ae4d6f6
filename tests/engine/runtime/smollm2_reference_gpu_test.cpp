// SmolLM2-135M-Instruct (its Q4_1 GGUF, where scripts/fetch-smollm2 has put it) against
// transformers' float32 run of the same file, its weights dequantised by the gguf package
// (tests/fixtures/reference/smollm2-135m-instruct.greedy.safetensors, written by
// scripts/fixtures/make_reference_logits.py): for 8 chat prompts, the greedy continuation of
// 64 tokens and, at every position of prompt + continuation, the reference's top-1 token, its
// logit and its gap to the second.
//
// The engine runs the file's weights in f16 or bf16, so its logits move by that dtype's
// rounding: a token whose lead is smaller than that may flip. The thresholds say so per dtype
// (the script prints what storing activations in each dtype alone does: f16 keeps over 99.5%
// of the top-1s and turns greedy only at gaps of hundredths, bf16 at gaps up to a few tenths):
//  - greedy decoding (all 8 prompts prefilled in one step, then decoded together, argmax on
//    the host) may leave the reference's continuation only where the reference's top two are
//    a near-tie;
//  - fed prompt + the reference's continuation one token at a time (teacher forcing), the
//    engine's argmax is the reference's at a share of the positions.
// With model.quantization fp8 the projections run W8A8, which moves the logits far more; its
// case is held to the share of top-1s fp8 serving is expected to keep (97%).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/reference_runs.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/spec/spec.h"
#include "support/gpu.h"
#include "support/smollm2.h"

namespace freezeframe {
namespace {

using testing::argmax;
using testing::reference_fixtures;
using testing::ReferenceFile;
using testing::SequenceRunner;

constexpr int kGreedy = 64;

struct Case {
  const char* dtype;
  const char* backend;
  float near_tie;                     ///< a reference gap below it may flip
  double min_agreement;               ///< teacher-forced top-1 agreement
  const char* residual = "auto";      ///< model.residual_dtype
  const char* quantization = "none";  ///< model.quantization
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.dtype << " (residual " << c.residual << ", quantization " << c.quantization
            << ") on " << c.backend;
}

class SmolLM2Reference : public ::testing::TestWithParam<Case> {};

TEST_P(SmolLM2Reference, GreedyAndTeacherForcedFollowTransformers) {
  FF_REQUIRE_GPU();
  const Case& c = GetParam();
  const std::string path = testing::smollm2_path(FREEZEFRAME_SOURCE_DIR);
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "no " << path << " (scripts/fetch-smollm2 fetches it; FREEZEFRAME_SMOLLM2 "
                 << "names another copy)";
  }
  const std::string yaml = "model:\n  checkpoint: " + path + "\n  builtin_weights: false\n" +
                           "  dtype: " + c.dtype + "\n  residual_dtype: " + c.residual +
                           "\n  quantization: " + c.quantization +
                           "\n  attention:\n    backend: " + c.backend +
                           "\ncache:\n  block_size: 16\n  memory_budget: 2GiB\n"
                           "scheduler:\n  max_num_seqs: 8\n  max_num_batched_tokens: 512\n"
                           "  max_model_len: 256\n";
  Engine engine(parse_spec(yaml, "smollm2.yaml"));
  ASSERT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;

  const ReferenceFile reference(reference_fixtures() / "smollm2-135m-instruct.greedy.safetensors");
  const int prompts = reference.prompts();
  ASSERT_EQ(prompts, 8);
  std::vector<std::vector<std::int32_t>> prompt(prompts), greedy(prompts), top1(prompts);
  std::vector<std::vector<float>> top1_logit(prompts), gap(prompts);
  std::size_t longest = 0;
  for (int p = 0; p < prompts; ++p) {
    prompt[p] = reference.ints(p, "token_ids");
    greedy[p] = reference.ints(p, "greedy");
    top1[p] = reference.ints(p, "top1");
    top1_logit[p] = reference.floats(p, "top1_logit");
    gap[p] = reference.floats(p, "gap");
    ASSERT_EQ(greedy[p].size(), std::size_t{kGreedy});
    ASSERT_EQ(top1[p].size(), prompt[p].size() + kGreedy - 1);
    longest = std::max(longest, prompt[p].size() + kGreedy);
  }
  SequenceRunner runner(engine, prompts, static_cast<int>(longest));
  const std::size_t vocab = static_cast<std::size_t>(runner.vocab());

  // Greedy: every prompt prefilled in one step, then 63 steps of 8 single-token decodes.
  std::vector<std::vector<std::int32_t>> decoded(prompts);
  std::vector<SequenceRunner::Request> requests;
  for (int p = 0; p < prompts; ++p) requests.push_back({p, 0, prompt[p]});
  for (int k = 0; k < kGreedy; ++k) {
    const std::vector<float> logits = runner.step(requests, {});
    requests.clear();
    for (int p = 0; p < prompts; ++p) {
      decoded[p].push_back(argmax(std::span<const float>(logits).subspan(p * vocab, vocab)));
      const int cached = static_cast<int>(prompt[p].size()) + k;
      requests.push_back({p, cached, std::span<const std::int32_t>(decoded[p]).last(1)});
    }
  }
  int followed = 0;
  for (int p = 0; p < prompts; ++p) {
    const auto turn = std::mismatch(decoded[p].begin(), decoded[p].end(), greedy[p].begin());
    if (turn.first == decoded[p].end()) {
      ++followed;
      continue;
    }
    const std::size_t k = static_cast<std::size_t>(turn.first - decoded[p].begin());
    const std::size_t position = prompt[p].size() - 1 + k;
    std::printf(
        "SmolLM2 %s on %s, prompt %d: greedy leaves the reference at token %zu (%d, not "
        "%d; the reference's top two are %.4f apart there)\n",
        c.dtype, c.backend, p, k, *turn.first, *turn.second, gap[p][position]);
    EXPECT_LT(gap[p][position], c.near_tie)
        << "prompt " << p << ": greedy token " << k << " is " << *turn.first
        << " where the reference's " << *turn.second << " led by " << gap[p][position]
        << ", more than a near-tie";
  }

  // Teacher forcing: prompt + the reference's continuation, one token at a time, eagerly and
  // through graphs.
  std::vector<std::vector<std::int32_t>> forced(prompts);
  for (int p = 0; p < prompts; ++p) {
    forced[p] = prompt[p];
    forced[p].insert(forced[p].end(), greedy[p].begin(), greedy[p].end() - 1);
  }
  for (const bool eager : {false, true}) {
    const std::vector<std::vector<float>> logits = runner.one_at_a_time(forced, {.eager = eager});
    int agree = 0, total = 0;
    float largest = 0;
    for (int p = 0; p < prompts; ++p) {
      for (std::size_t t = 0; t < forced[p].size(); ++t) {
        const std::span<const float> row =
            std::span<const float>(logits[p]).subspan(t * vocab, vocab);
        const int top = argmax(row);
        agree += top == top1[p][t];
        ++total;
        // A flip only where the reference's top two are a near-tie.
        EXPECT_TRUE(top == top1[p][t] || gap[p][t] < c.near_tie)
            << (eager ? "eager" : "graphs") << ", prompt " << p << ", position " << t << ": " << top
            << " where the reference's " << top1[p][t] << " led by " << gap[p][t];
        largest = std::max(largest,
                           std::abs(row[static_cast<std::size_t>(top1[p][t])] - top1_logit[p][t]));
      }
    }
    const double agreement = double(agree) / total;
    std::printf(
        "SmolLM2 %s (residual %s, quantization %s) on %s, %s: greedy follows the reference on %d "
        "of %d prompts; teacher-forced top-1 agreement %d/%d = %.2f%%; largest difference of "
        "the reference's top-1 logit %.4f\n",
        c.dtype, c.residual, c.quantization, c.backend, eager ? "eager" : "graphs", followed,
        prompts, agree, total, 100.0 * agreement, largest);
    EXPECT_GE(agreement, c.min_agreement) << (eager ? "eager" : "graphs");
  }
  EXPECT_GT(runner.modes().size(), 1u) << "every step ran eagerly";
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, SmolLM2Reference,
    ::testing::Values(Case{"f16", "paged_decode", 0.05f, 0.99},
                      Case{"f16", "reference", 0.05f, 0.99},
                      // bf16 rounds 8x coarser than f16: its logits move by about a tenth,
                      // so a flip may come at a wider gap. With the residual stream in f32 the
                      // share of top-1s agreeing is held to the same 99% (the script's
                      // simulation of that storage keeps 811/817 = 99.27%).
                      Case{"bf16", "paged_decode", 0.3f, 0.99, "f32"},
                      // All in bf16, the residual stream's rounding at every layer alone keeps
                      // 808/817 = 98.90% in the simulation: 99% is out of reach, so the bar
                      // is 98.5% (the engine kept 807/817 = 98.78% on an H200, every flip at a
                      // near-tie).
                      Case{"bf16", "paged_decode", 0.3f, 0.985},
                      // W8A8 projections (fp8 weights per channel, inputs per token) move the
                      // logits by far more than 16-bit rounding: flips may come at wider gaps.
                      // On this 135M model W8A8 alone, simulated in f32 over transformers
                      // (scripts/fixtures/w8a8_agreement.py), keeps 694/817 = 84.9%; the bar
                      // sits under it (the engine kept 715/817 = 87.5% on an H100).
                      Case{"bf16", "paged_decode", 2.0f, 0.84, "f32", "fp8"}),
    [](const auto& info) {
      return std::string(info.param.dtype) +
             (std::string(info.param.residual) == "f32" ? "_f32_residual_" : "_") +
             (std::string(info.param.quantization) == "fp8" ? "fp8_" : "") + info.param.backend;
    });

}  // namespace
}  // namespace freezeframe
