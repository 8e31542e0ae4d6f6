#pragma once
// A stand-in for an engine that samples, for the serving loop's tests (see FakeModel), and the
// limits and requests they run.

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "freezeframe/serving/generation_loop.h"

namespace freezeframe::serving_testing {

constexpr std::int32_t kVocab = 1000;
constexpr std::int32_t kEos = kVocab - 1;

inline DeploymentLimits limits(std::int32_t num_blocks) {
  DeploymentLimits l;
  l.max_num_seqs = 4;
  l.max_num_batched_tokens = 64;
  l.max_model_len = 256;
  l.block_size = 16;
  l.num_blocks = num_blocks;
  l.max_blocks_per_req = 16;
  l.vocab_size = kVocab;
  return l;
}

inline std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/// A stand-in for an engine that samples. It holds a KV cache of token ids by slot (what the
/// engine's cache holds as keys and values), writes each step's new tokens at their slots, and
/// draws a request's next token from its seed, the position and its whole sequence read back
/// through its block table: a token fed back wrong, a block mixed up or a recompute that
/// differs changes every later token. A token is never the stop token unless `eos_at` says so
/// for that (seed, position). Every step must pass the engine's validation.
class FakeModel final : public TokenSource {
 public:
  explicit FakeModel(const DeploymentLimits& l)
      : limits_(l), cache_(static_cast<std::size_t>(l.num_blocks) * l.block_size, -1) {}

  /// The stop token for the request of `seed` at `position` (where its token goes).
  std::set<std::pair<std::uint64_t, std::int64_t>> eos_at;
  /// Prompt length by seed: drawn tokens are checked when fed back, past the prompt.
  std::map<std::uint64_t, std::int32_t> prompt_len;

  std::span<const std::int32_t> run(const StepBatch& step) override {
    (void)validate_step(step, limits_);  // throws on any rule the engine holds a step to
    EXPECT_EQ(step.sampling.size(), step.requests.size()) << "each request's parameters";
    tokens_.clear();
    fed_tokens += static_cast<long>(step.token_ids.size());
    int row = 0;
    for (std::size_t i = 0; i < step.requests.size(); ++i) {
      const StepRequest& r = step.requests[i];
      const std::uint64_t seed = step.sampling[i].seed;
      for (std::int32_t p = r.seq_len - r.query_len; p < r.seq_len; ++p, ++row) {
        const std::int32_t token = step.token_ids[row];
        const auto drawn = drawn_.find({seed, p});
        if (drawn != drawn_.end()) {
          EXPECT_EQ(token, drawn->second)
              << "seed " << seed << " position " << p << ": the input is not the token drawn there";
        }
        cache_[slot(r, p)] = token;
      }
      std::uint64_t h = mix(seed, static_cast<std::uint64_t>(r.seq_len));
      for (std::int32_t p = 0; p < r.seq_len; ++p) {
        h = mix(h, static_cast<std::uint64_t>(cache_[slot(r, p)] + 1));
      }
      std::int32_t token = static_cast<std::int32_t>(h % (kVocab - 1));
      if (eos_at.count({seed, r.seq_len}) != 0) token = kEos;
      // A mid-prompt chunk draws a token nobody keeps; only tokens past the prompt are fed back.
      const auto prompt = prompt_len.find(seed);
      if (prompt != prompt_len.end() && r.seq_len >= prompt->second)
        drawn_[{seed, r.seq_len}] = token;
      tokens_.push_back(token);
    }
    ++steps;
    return tokens_;
  }

  long steps = 0;
  long fed_tokens = 0;  ///< new tokens every step carried, all told

 private:
  std::size_t slot(const StepRequest& r, std::int32_t p) const {
    return static_cast<std::size_t>(r.block_ids[p / limits_.block_size]) * limits_.block_size +
           p % limits_.block_size;
  }

  DeploymentLimits limits_;
  std::vector<std::int32_t> cache_;
  std::map<std::pair<std::uint64_t, std::int64_t>, std::int32_t> drawn_;
  std::vector<std::int32_t> tokens_;
};

inline GenerationRequest request(int id, int prompt, int max_tokens, std::uint64_t seed,
                                 std::mt19937& rng) {
  GenerationRequest g;
  g.id = id;
  g.prompt.resize(prompt);
  for (auto& t : g.prompt) t = static_cast<std::int32_t>(rng() % (kVocab - 1));
  g.max_tokens = max_tokens;
  g.stop_token_ids = {kEos};
  g.sampling = {0.8f, 50, 0.95f, seed};
  return g;
}

}  // namespace freezeframe::serving_testing
