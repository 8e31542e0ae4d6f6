#pragma once
// TokenSource: what runs a generation loop's steps and draws each request's next token. The
// engine is one (EngineTokenSource: a step with on-device sampling, then a wait for its
// tokens); tests put a stand-in in its place, so the loop's scheduling, stopping and feeding
// back can be checked without a GPU.

#include <cstdint>
#include <optional>
#include <span>

#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/runtime/step_batch.h"

namespace freezeframe {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  /// Runs `step` and returns the token drawn for each of its requests, in its order; valid
  /// until the next call.
  virtual std::span<const std::int32_t> run(const StepBatch& step) = 0;
  /// How the last step ran (eager, piecewise or full graphs), where that means something.
  [[nodiscard]] virtual std::optional<RuntimeMode> last_mode() const { return std::nullopt; }
};

/// An engine that samples (EngineOptions::sample_tokens), each step waited for.
class EngineTokenSource final : public TokenSource {
 public:
  /// Throws kInvalidArgument when `engine` does not sample. The engine must outlive it.
  explicit EngineTokenSource(Engine& engine);
  std::span<const std::int32_t> run(const StepBatch& step) override;
  [[nodiscard]] std::optional<RuntimeMode> last_mode() const override { return last_.mode; }
  /// The last step's result (its mode, padded shape and host times).
  [[nodiscard]] const StepResult& last() const { return last_; }

 private:
  Engine& engine_;
  StepResult last_;
};

}  // namespace freezeframe
