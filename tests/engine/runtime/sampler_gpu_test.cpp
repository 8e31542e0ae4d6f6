// The on-device sampler against its host reference (sample_reference): token ids must be
// equal, row by row, for greedy and sampled rows with fixed seeds over random logits, rows full of
// ties (bf16 values, rows of one value but a few), −∞ and NaN, rows so flat that every token
// weighs, top_k 1, a tiny top_p, top-p alone, temperature 0, vocabularies from 1 to Qwen2's
// 151,936 tokens, and padded (inactive) rows; launched eagerly and replayed from a graph whose
// rows, logits and seeds change between replays. The output is poisoned before every launch so
// a row the kernel does not write cannot pass.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/engine/runtime/sampler.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "runtime/sampler_kernel.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

constexpr std::int32_t kPoisonToken = 0x7f7f7f7f;

/// A batch of rows on the host and the device: logits [reqs, vocab] f32, one SampleRow each.
struct Batch {
  int vocab = 0;
  std::vector<float> logits;
  std::vector<SampleRow> rows;
  DeviceBuffer d_logits, d_rows, d_tokens;

  Batch(int reqs, int vocab_size)
      : vocab(vocab_size),
        logits(static_cast<std::size_t>(reqs) * vocab_size),
        rows(reqs),
        d_logits(logits.size() * sizeof(float)),
        d_rows(rows.size() * sizeof(SampleRow)),
        d_tokens(rows.size() * sizeof(std::int32_t)) {}

  [[nodiscard]] int reqs() const { return static_cast<int>(rows.size()); }
  [[nodiscard]] TensorView logits_view() const {
    return TensorView(d_logits.data(), DType::kF32, {reqs(), vocab}, Device::cuda());
  }
  void upload(cudaStream_t stream) const {
    FF_CUDA_CHECK(cudaMemcpyAsync(d_logits.data(), logits.data(), d_logits.bytes(),
                                  cudaMemcpyHostToDevice, stream));
    FF_CUDA_CHECK(cudaMemcpyAsync(d_rows.data(), rows.data(), d_rows.bytes(),
                                  cudaMemcpyHostToDevice, stream));
    // Poison: a token the kernel does not write stays 0x7f7f7f7f.
    FF_CUDA_CHECK(cudaMemsetAsync(d_tokens.data(), 0x7f, d_tokens.bytes(), stream));
  }
  [[nodiscard]] std::vector<std::int32_t> tokens(cudaStream_t stream) const {
    std::vector<std::int32_t> out(rows.size());
    FF_CUDA_CHECK(cudaMemcpyAsync(out.data(), d_tokens.data(), d_tokens.bytes(),
                                  cudaMemcpyDeviceToHost, stream));
    FF_CUDA_CHECK(cudaStreamSynchronize(stream));
    return out;
  }
  /// What the reference draws for each row.
  [[nodiscard]] std::vector<std::int32_t> expected() const {
    std::vector<std::int32_t> want(rows.size());
    for (int r = 0; r < reqs(); ++r) {
      const SampleRow& row = rows[r];
      if (row.active == 0) {
        want[r] = -1;
        continue;
      }
      const std::span<const float> logit_row(logits.data() + std::size_t(r) * vocab,
                                             static_cast<std::size_t>(vocab));
      want[r] = sample_reference(logit_row, {row.temperature, row.top_k, row.top_p, row.seed},
                                 row.position);
    }
    return want;
  }
};

/// The kinds of rows the tests mix.
enum class Logits {
  kNormal,
  kTies,
  kConstant,
  kSpecial,
  kHuge,
  kPeaked,
  kNearlyEqual,
  kBf16,
  kFlat,
  kCount
};

void fill_row(float* row, int vocab, Logits kind, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  for (int v = 0; v < vocab; ++v) {
    switch (kind) {
      case Logits::kNormal: row[v] = normal(rng); break;
      // Multiples of 0.5 in a narrow range: hundreds of tokens share each value.
      case Logits::kTies: row[v] = 0.5f * std::round(std::clamp(normal(rng), -4.0f, 4.0f)); break;
      case Logits::kConstant: row[v] = 1.25f; break;
      case Logits::kSpecial: row[v] = normal(rng); break;
      case Logits::kHuge: row[v] = normal(rng) * 1e37f; break;
      case Logits::kPeaked: row[v] = normal(rng) - 40.0f; break;
      case Logits::kNearlyEqual: row[v] = 2.0f; break;
      // bf16 values (8 bits of mantissa), as a bf16 LM head gives: thousands of ties.
      case Logits::kBf16: {
        std::uint32_t bits = 0;
        const float x = normal(rng) + 5.0f;
        std::memcpy(&bits, &x, sizeof bits);
        bits &= 0xffff0000u;
        std::memcpy(&row[v], &bits, sizeof bits);
        break;
      }
      // Every token within a few hundredths of the best: all weigh, a bucket holds many.
      case Logits::kFlat: row[v] = 0.01f * normal(rng); break;
      case Logits::kCount: break;
    }
  }
  if (kind == Logits::kSpecial) {
    const float inf = std::numeric_limits<float>::infinity();
    for (int i = 0; i < 1 + vocab / 50; ++i) {
      row[pick(rng)] = -inf;
      row[pick(rng)] = std::nanf("");
      row[pick(rng)] = -0.0f;
    }
  }
  if (kind == Logits::kPeaked) {  // a few tokens far above the rest, one duplicated
    for (int i = 0; i < 3; ++i) row[pick(rng)] = 10.0f + static_cast<float>(i);
    row[pick(rng)] = 12.0f;
  }
  if (kind == Logits::kNearlyEqual) {  // one value but a few just above it and one below
    for (int i = 0; i < 5; ++i) row[pick(rng)] = 2.0f + 1e-3f * static_cast<float>(i + 1);
    row[pick(rng)] = 1.0f;
  }
}

/// Parameters that cover greedy, each filter alone and together, and the edges.
std::vector<SamplingParams> parameter_mix(int vocab) {
  return {
      {0.0f, 0, 1.0f, 1},                // greedy
      {0.0f, 5, 0.3f, 2},                // temperature 0 ignores the rest
      {1.0f, 0, 1.0f, 3},                // the whole distribution
      {0.7f, 50, 1.0f, 4},               // top-k
      {1.3f, 1, 1.0f, 5},                // top_k 1: greedy on the scaled logits
      {1.0f, 0, 1e-6f, 6},               // a tiny top_p: the best token
      {1.0f, 0, 0.9f, 7},                // top-p
      {0.8f, 40, 0.95f, 8},              // both
      {1e-3f, 0, 1.0f, 9},               // nearly greedy
      {5.0f, 0, 0.5f, 10},               // flat, half the mass
      {1.0f, vocab - 1, 1.0f, 11},       // top-k cutting one token
      {1.0f, vocab + 5, 0.99f, 12},      // top-k past the vocabulary
      {2.0f, 2, 1.0f, 0xffffffffffull},  // a large seed
      {0.8f, 0, 0.95f, 13},              // top-p alone, as most clients ask
      {1.0f, vocab / 2 + 1, 0.9f, 14},   // a top-k too large to gather, and top-p
      {1.0f, vocab, 1.0f, 15},           // top_k = vocab: every token
      {0.9f, 2000, 0.8f, 16},            // a large top-k and top-p
  };
}

/// Fills `b` with rows of every kind under every parameter set, seeds and positions from `rng`;
/// every `inactive_every`-th row is padding.
void fill_batch(Batch& b, std::mt19937& rng, int inactive_every = 7) {
  const std::vector<SamplingParams> params = parameter_mix(b.vocab);
  constexpr int kKinds = static_cast<int>(Logits::kCount);
  std::uniform_int_distribution<std::int64_t> position(1, 1 << 20);
  for (int r = 0; r < b.reqs(); ++r) {
    fill_row(b.logits.data() + std::size_t(r) * b.vocab, b.vocab,
             static_cast<Logits>((r + rng() % 2) % kKinds), rng);
    const SamplingParams& p = params[(r + rng() % 3) % params.size()];
    SampleRow& row = b.rows[r];
    row = {p.temperature, p.top_k, p.top_p, 1, p.seed + rng() % 1000, position(rng)};
    if (inactive_every > 0 && r % inactive_every == inactive_every - 1) row.active = 0;
  }
}

class Sampler : public ::testing::TestWithParam<int> {};

TEST_P(Sampler, DrawsTheReferenceTokens) {
  FF_REQUIRE_GPU();
  const int vocab = GetParam();
  std::mt19937 rng(vocab);
  Batch b(vocab > 100000 ? 40 : 90, vocab);
  for (int round = 0; round < 3; ++round) {
    fill_batch(b, rng);
    b.upload(nullptr);
    model_kernels::sample(b.logits_view(), static_cast<const SampleRow*>(b.d_rows.data()), b.reqs(),
                          static_cast<std::int32_t*>(b.d_tokens.data()), nullptr);
    const std::vector<std::int32_t> got = b.tokens(nullptr), want = b.expected();
    for (int r = 0; r < b.reqs(); ++r) {
      const SampleRow& row = b.rows[r];
      ASSERT_NE(got[r], kPoisonToken) << "row " << r << " was not written";
      EXPECT_EQ(got[r], want[r]) << "round " << round << " row " << r << ": temperature "
                                 << row.temperature << ", top_k " << row.top_k << ", top_p "
                                 << row.top_p << ", seed " << row.seed << ", position "
                                 << row.position;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, Sampler,
                         ::testing::Values(1, 2, 7, 1000, 1023, 1024, 1025, 12345, 32000, 49152,
                                           151936),
                         [](const auto& info) { return "vocab" + std::to_string(info.param); });

// The same launch captured once, replayed with new logits, parameters, seeds and positions
// written into its buffers between replays: each replay draws that replay's tokens.
TEST(Sampler, GraphReplayDrawsEachReplaysTokens) {
  FF_REQUIRE_GPU();
  {
    const Stream stream = Stream::create();
    Batch b(33, 32000);
    std::mt19937 rng(77);
    fill_batch(b, rng);
    b.upload(stream.get());
    const CudaGraph graph = capture_graph(stream.get(), [&] {
      model_kernels::sample(b.logits_view(), static_cast<const SampleRow*>(b.d_rows.data()),
                            b.reqs(), static_cast<std::int32_t*>(b.d_tokens.data()), stream.get());
    });
    const GraphExec exec(graph);
    for (int replay = 0; replay < 5; ++replay) {
      fill_batch(b, rng, replay % 2 == 0 ? 5 : 0);
      b.upload(stream.get());
      exec.launch(stream.get());
      const std::vector<std::int32_t> got = b.tokens(stream.get()), want = b.expected();
      EXPECT_EQ(got, want) << "replay " << replay;
    }
    // Replaying one step again draws the same tokens: (seed, position) decide them.
    exec.launch(stream.get());
    EXPECT_EQ(b.tokens(stream.get()), b.expected());
  }
}

// Greedy rows: the lowest id of the best value, whatever the ties and the vocabulary's size.
TEST(Sampler, GreedyTiesGoToTheLowestId) {
  FF_REQUIRE_GPU();
  Batch b(4, 151936);
  std::fill(b.logits.begin(), b.logits.end(), -1.0f);
  for (int r = 0; r < 4; ++r) {
    float* row = b.logits.data() + std::size_t(r) * b.vocab;
    for (const int id : {151935, 77777 + r, 100000, 3000 * (r + 1)}) row[id] = 7.0f;
    b.rows[r] = {0.0f, 0, 1.0f, 1, std::uint64_t(r), 10};
  }
  b.rows[3].temperature = 0.5f;  // top_k 1 on the scaled logits: the same ties
  b.rows[3].top_k = 1;
  b.upload(nullptr);  // poisons the output too
  model_kernels::sample(b.logits_view(), static_cast<const SampleRow*>(b.d_rows.data()), b.reqs(),
                        static_cast<std::int32_t*>(b.d_tokens.data()), nullptr);
  EXPECT_EQ(b.tokens(nullptr), (std::vector<std::int32_t>{3000, 6000, 9000, 12000}));
}

TEST(Sampler, RefusesBadArguments) {
  FF_REQUIRE_GPU();
  DeviceBuffer logits(4 * 8 * sizeof(float)), rows(4 * sizeof(SampleRow)), ids(16);
  const TensorView view(logits.data(), DType::kF32, {4, 8}, Device::cuda());
  const auto* r = static_cast<const SampleRow*>(rows.data());
  auto* out = static_cast<std::int32_t*>(ids.data());
  EXPECT_THROW(model_kernels::sample(view, r, 5, out, nullptr), Error) << "more rows than logits";
  EXPECT_THROW(model_kernels::sample(view, nullptr, 2, out, nullptr), Error);
  const TensorView bf16(logits.data(), DType::kBF16, {4, 8}, Device::cuda());
  EXPECT_THROW(model_kernels::sample(bf16, r, 2, out, nullptr), Error) << "f32 logits only";
  EXPECT_NO_THROW(model_kernels::sample(view, r, 0, out, nullptr)) << "no rows: nothing to do";
}

}  // namespace
}  // namespace freezeframe
