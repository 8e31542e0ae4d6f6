#pragma once
// The reference outputs of scripts/fixtures/make_reference_logits.py (transformers on the CPU,
// in float32, under tests/fixtures/reference/), and the engine runs the tests hold against
// them: sequences prefilled in one step, fed one token at a time, or decoded greedily, each
// sequence on cache blocks of its own.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/safetensors_file.h"
#include "freezeframe/engine/runtime/engine.h"

namespace freezeframe::testing {

inline std::filesystem::path reference_fixtures() {
  return std::filesystem::path(FREEZEFRAME_SOURCE_DIR) / "tests" / "fixtures" / "reference";
}

/// A reference file: per prompt i, tensors named "prompt.<i>.<what>".
class ReferenceFile {
 public:
  explicit ReferenceFile(const std::filesystem::path& path)
      : file_(SafetensorsFile::open(path.string())) {}

  [[nodiscard]] int prompts() const {
    int n = 0;
    while (file_.find_tensor(name(n, "token_ids")) != nullptr) ++n;
    return n;
  }
  [[nodiscard]] std::vector<std::int32_t> ints(int prompt, const std::string& what) const {
    const SafetensorsTensor& t = file_.tensor(name(prompt, what));
    FF_CHECK(t.dtype == "I32", ErrorCode::kInvalidArgument, file_.path(), ": ", t.name, " is ",
             t.dtype, ", not I32");
    std::vector<std::int32_t> values(static_cast<std::size_t>(t.elements()));
    std::memcpy(values.data(), file_.bytes(t).data(), values.size() * sizeof(std::int32_t));
    return values;
  }
  [[nodiscard]] std::vector<float> floats(int prompt, const std::string& what) const {
    const SafetensorsTensor& t = file_.tensor(name(prompt, what));
    std::vector<float> values(static_cast<std::size_t>(t.elements()));
    file_.read_f32(t, values);
    return values;
  }

 private:
  static std::string name(int prompt, const std::string& what) {
    return "prompt." + std::to_string(prompt) + "." + what;
  }
  SafetensorsFile file_;
};

/// ‖a − b‖ / ‖b‖ (infinite when a holds a non-finite value).
inline double relative_l2(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

/// The first index of the largest value.
inline int argmax(std::span<const float> v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

/// Runs token sequences through an engine, one request per sequence: sequence s holds the
/// cache blocks [s·B, (s + 1)·B), B the blocks of a sequence of max_len tokens, so sequences
/// of one step never share a block.
class SequenceRunner {
 public:
  SequenceRunner(Engine& engine, int sequences, int max_len) : engine_(engine) {
    const DeploymentLimits& limits = engine.limits();
    vocab_ = limits.vocab_size;
    // Under DCP a block id names a virtual block of block_size tokens on each rank.
    block_tokens_ = limits.block_size * engine.geometry().rank.dcp_world_size;
    const int per_sequence = (max_len + block_tokens_ - 1) / block_tokens_;
    EXPECT_LE(sequences * per_sequence, limits.num_blocks) << "the KV pool is too small";
    blocks_.resize(static_cast<std::size_t>(sequences));
    for (int s = 0; s < sequences; ++s) {
      for (int b = 0; b < per_sequence; ++b) blocks_[s].push_back(s * per_sequence + b);
    }
  }

  /// One request: sequence `sequence`, whose tokens before `tokens` are in the cache.
  struct Request {
    int sequence = 0;
    int cached = 0;
    std::span<const std::int32_t> tokens;
  };

  /// One step (decodes first); the logits of each request's last token, [requests · vocab].
  std::vector<float> step(const std::vector<Request>& requests, const StepOptions& options) {
    StepBatch batch;
    std::vector<std::int32_t> tokens;
    for (const Request& r : requests) {
      const int seq_len = r.cached + static_cast<int>(r.tokens.size());
      batch.requests.push_back(
          {static_cast<std::int32_t>(r.tokens.size()), seq_len,
           std::span<const std::int32_t>(blocks_[r.sequence])
               .first(static_cast<std::size_t>((seq_len + block_tokens_ - 1) / block_tokens_))});
      tokens.insert(tokens.end(), r.tokens.begin(), r.tokens.end());
    }
    batch.token_ids = tokens;
    const StepResult result = engine_.step(batch, options);
    modes_.insert(result.mode);
    engine_.synchronize();
    std::vector<float> logits(requests.size() * static_cast<std::size_t>(vocab_));
    EXPECT_EQ(result.logits.numel(), static_cast<std::int64_t>(logits.size()));
    EXPECT_EQ(cudaMemcpy(logits.data(), result.logits.data(), logits.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return logits;
  }

  /// Each sequence prefilled whole, one step each: its last position's logits.
  std::vector<std::vector<float>> prefill(const std::vector<std::vector<std::int32_t>>& sequences,
                                          const StepOptions& options) {
    std::vector<std::vector<float>> last;
    for (std::size_t s = 0; s < sequences.size(); ++s) {
      last.push_back(step({{static_cast<int>(s), 0, sequences[s]}}, options));
    }
    return last;
  }

  /// Every sequence fed one token at a time, all of them in each step (single-token decodes
  /// over the cache): the logits at every position, [tokens · vocab] per sequence.
  std::vector<std::vector<float>> one_at_a_time(
      const std::vector<std::vector<std::int32_t>>& sequences, const StepOptions& options) {
    std::vector<std::vector<float>> logits(sequences.size());
    std::size_t longest = 0;
    for (const auto& s : sequences) longest = std::max(longest, s.size());
    for (std::size_t t = 0; t < longest; ++t) {
      std::vector<Request> requests;
      for (std::size_t s = 0; s < sequences.size(); ++s) {
        if (t < sequences[s].size()) {
          requests.push_back({static_cast<int>(s), static_cast<int>(t),
                              std::span<const std::int32_t>(sequences[s]).subspan(t, 1)});
        }
      }
      const std::vector<float> out = step(requests, options);
      for (std::size_t r = 0; r < requests.size(); ++r) {
        auto& dst = logits[static_cast<std::size_t>(requests[r].sequence)];
        dst.insert(dst.end(), out.begin() + r * vocab_, out.begin() + (r + 1) * vocab_);
      }
    }
    return logits;
  }

  [[nodiscard]] int vocab() const { return vocab_; }
  /// The runtime modes the steps so far ran in.
  [[nodiscard]] const std::set<RuntimeMode>& modes() const { return modes_; }

 private:
  Engine& engine_;
  int vocab_ = 0;
  int block_tokens_ = 0;  // positions a block id names
  std::vector<std::vector<std::int32_t>> blocks_;
  std::set<RuntimeMode> modes_;
};

}  // namespace freezeframe::testing
