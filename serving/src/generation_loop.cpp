#include "freezeframe/serving/generation_loop.h"

namespace freezeframe {

GenerationLoop::GenerationLoop(const DeploymentLimits& limits, TokenSource& source,
                               bool prefix_caching)
    : pool_(limits.num_blocks), batcher_(limits, pool_, prefix_caching), source_(source) {}

const ContinuousBatcher::StepEvents* GenerationLoop::step() {
  const StepBatch* batch = batcher_.schedule();
  if (batch == nullptr) return nullptr;
  const std::span<const std::int32_t> tokens = source_.run(*batch);
  events_ = batcher_.complete_step(tokens);
  ++steps_;
  return &events_;
}

}  // namespace freezeframe
