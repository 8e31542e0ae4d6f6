#pragma once
// HashTokenSource: a TokenSource that needs no GPU and no model. Each request's next token is a
// hash of its last token, its position and (unless it is greedy) its seed, picked among the
// tokens `allowed` lists; so a request's output is the same for the same prompt and seed, and
// a continuation is a function of what came before, as a model's is. It lets a server, a
// serving loop or a client be run and tested end to end on a machine without a GPU; the text
// it makes means nothing.

#include <cstdint>
#include <span>
#include <vector>

#include "freezeframe/serving/token_source.h"

namespace freezeframe {

class HashTokenSource final : public TokenSource {
 public:
  /// Draws from `allowed` (not empty). `step_delay_us`: time each step takes, as a stand-in for
  /// the GPU's.
  explicit HashTokenSource(std::vector<std::int32_t> allowed, int step_delay_us = 0);
  std::span<const std::int32_t> run(const StepBatch& step) override;

 private:
  std::vector<std::int32_t> allowed_;
  int step_delay_us_ = 0;
  std::vector<std::int32_t> drawn_;
};

}  // namespace freezeframe
