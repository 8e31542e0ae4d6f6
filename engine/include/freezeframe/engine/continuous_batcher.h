#pragma once
// ContinuousBatcher: the scheduling half of a serving loop. Requests arrive, are admitted while
// the KV cache has room, prefill in chunks under the per-step token limit, then decode one
// token per step until their outputs are done, when their blocks go back to the pool. Each
// step it hands out a StepBatch (decodes first) for the engine to run.
//
// Admission reserves a request's blocks for its whole sequence (prompt + output), so a running
// request never waits for a block and nothing is ever preempted; the price is lower
// concurrency than incremental allocation when outputs end early.

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "freezeframe/engine/step_batch.h"
#include "freezeframe/memory/block_pool.h"

namespace freezeframe {

struct BatcherLimits {
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
  std::int64_t max_model_len = 0;
  int block_size = 0;
};

class ContinuousBatcher {
 public:
  /// `pool` must outlive the batcher.
  ContinuousBatcher(const BatcherLimits& limits, BlockPool& pool);

  /// Queues a request that has arrived. Prompt and output are clamped so the sequence fits
  /// max_model_len (at least one prompt token is kept); an output of 0 finishes at prefill.
  void add(int id, std::int32_t prompt_tokens, std::int32_t output_tokens);

  /// The next step, or nullptr when no request can run. Valid until complete_step().
  [[nodiscard]] const StepBatch* schedule();
  /// Records that the scheduled step ran; returns the ids of the requests that finished.
  std::vector<int> complete_step();

  [[nodiscard]] int num_waiting() const { return static_cast<int>(waiting_.size()); }
  [[nodiscard]] int num_running() const { return static_cast<int>(running_.size()); }

 private:
  struct Request {
    int id = 0;
    std::int32_t prompt = 0, output = 0;
    std::int32_t computed = 0;   // tokens whose K/V are in the cache
    std::int32_t generated = 0;  // output tokens produced
    std::vector<std::int32_t> blocks;
    std::int32_t scheduled = 0;  // new tokens in the current step
  };
  [[nodiscard]] bool in_prefill(const Request& r) const { return r.computed < r.prompt; }

  BatcherLimits limits_;
  BlockPool& pool_;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;  // admission order
  std::vector<Request*> step_order_;
  StepBatch step_;
};

}  // namespace freezeframe
