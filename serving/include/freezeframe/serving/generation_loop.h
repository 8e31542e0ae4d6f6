#pragma once
// GenerationLoop: requests with their tokens through continuous batching, a step at a time:
// the batcher schedules (admission, chunked prefill, decodes first, preemption by recompute),
// a TokenSource runs the step and draws each request's next token, and the tokens go back to
// the batcher as the next inputs. A request finishes when it draws one of its stop tokens or
// reaches max_tokens, and its KV blocks go back to the pool; abort() ends one at any time.
// freezeframe generate and examples/generate.cpp run it over an engine that samples.

#include <cstdint>

#include "freezeframe/engine/spec/deployment.h"
#include "freezeframe/memory/block_pool.h"
#include "freezeframe/serving/continuous_batcher.h"
#include "freezeframe/serving/token_source.h"

namespace freezeframe {

class GenerationLoop {
 public:
  /// Schedules within `limits` over a pool of its limits.num_blocks KV blocks, with prefix
  /// caching when `prefix_caching` (prefix_cache.h); `source` (which must outlive the loop)
  /// runs every step.
  GenerationLoop(const DeploymentLimits& limits, TokenSource& source, bool prefix_caching = false);
  GenerationLoop(const GenerationLoop&) = delete;
  GenerationLoop& operator=(const GenerationLoop&) = delete;

  /// Queues a request (ContinuousBatcher::add).
  Admission add(GenerationRequest request) { return batcher_.add(std::move(request)); }
  /// Ends request `id` and frees its blocks; false when it is not waiting or running.
  bool abort(int id) { return batcher_.abort(id); }

  /// Schedules a step, runs it and feeds its tokens back. The step's events (tokens produced,
  /// requests finished and why), valid until the next call; nullptr when no request can run.
  const ContinuousBatcher::StepEvents* step();

  /// No request waits or runs.
  [[nodiscard]] bool idle() const { return batcher_.num_waiting() + batcher_.num_running() == 0; }
  [[nodiscard]] const BlockPool& pool() const { return pool_; }
  [[nodiscard]] const ContinuousBatcher& batcher() const { return batcher_; }
  /// Steps run so far.
  [[nodiscard]] long steps() const { return steps_; }

 private:
  BlockPool pool_;
  ContinuousBatcher batcher_;
  TokenSource& source_;
  ContinuousBatcher::StepEvents events_;
  long steps_ = 0;
};

}  // namespace freezeframe
