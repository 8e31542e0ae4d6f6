#include "freezeframe/serving/token_source.h"

#include "freezeframe/base/error.h"

namespace freezeframe {

EngineTokenSource::EngineTokenSource(Engine& engine) : engine_(engine) {
  FF_CHECK(engine.samples(), ErrorCode::kInvalidArgument,
           "a token source needs an engine that samples (EngineOptions::sample_tokens)");
}

std::span<const std::int32_t> EngineTokenSource::run(const StepBatch& step) {
  last_ = engine_.step(step);
  engine_.synchronize();  // the step copies its tokens to pinned memory itself
  return last_.host_token_ids;
}

}  // namespace freezeframe
