#pragma once
// ContinuousBatcher: the scheduling half of a serving loop. Requests arrive, are admitted while
// the KV cache has room, prefill in chunks under the per-step token limit, then decode one
// token per step until their outputs are done, when their blocks go back to the pool. Each
// step it hands out a StepBatch (decodes first) for the engine to run.
//
// Blocks are taken as sequences grow, not reserved for the whole sequence at admission. When
// the pool runs out, the latest admitted request not in the step gives its blocks back and
// waits, first in line, to be recomputed (its prompt and outputs so far prefilled again), as
// vLLM preempts; abort() ends a request at any time.

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "freezeframe/engine/runtime/step_batch.h"
#include "freezeframe/memory/block_pool.h"

namespace freezeframe {

/// How add() took a request.
enum class Admission {
  kQueued,         ///< queued as it is
  kOutputCut,      ///< queued with its output cut so the sequence ends at max_model_len
  kPromptTooLong,  ///< refused: the prompt alone is longer than max_model_len
  kCacheTooSmall,  ///< refused: the sequence needs more KV blocks than the whole cache has
};
[[nodiscard]] std::string_view to_string(Admission admission);

class ContinuousBatcher {
 public:
  /// Schedules within `limits` (scheduler.max_num_seqs, max_num_batched_tokens, max_model_len,
  /// cache.block_size) over `pool`, which must outlive the batcher.
  ContinuousBatcher(const DeploymentLimits& limits, BlockPool& pool);

  /// Queues a request that has arrived, unless it cannot run (a prompt longer than
  /// max_model_len, or a sequence larger than the whole cache); an output that would run past
  /// max_model_len is cut there, as a server stops such a request by length. Nothing is
  /// clamped silently: the return value says which. An output of 0 finishes at prefill.
  Admission add(int id, std::int32_t prompt_tokens, std::int32_t output_tokens);

  /// The next step, or nullptr when no request can run. Valid until complete_step().
  [[nodiscard]] const StepBatch* schedule();
  /// The ids of the scheduled step's requests, in the step's order.
  [[nodiscard]] std::span<const int> scheduled_ids() const { return step_ids_; }

  /// What a completed step did to its requests.
  struct StepEvents {
    std::vector<int> produced;      ///< produced an output token this step
    std::vector<int> first_tokens;  ///< ... their first one (the prompt is done)
    std::vector<int> finished;      ///< finished: their blocks are back in the pool
  };
  /// Records that the scheduled step ran.
  StepEvents complete_step();

  /// Ends request `id` now, waiting or running, and gives its blocks back; false when it is
  /// not known (finished, refused, never added). Not between schedule() and complete_step().
  bool abort(int id);

  [[nodiscard]] int num_waiting() const { return static_cast<int>(waiting_.size()); }
  [[nodiscard]] int num_running() const { return static_cast<int>(running_.size()); }
  /// Requests preempted so far (each recomputed later).
  [[nodiscard]] long num_preemptions() const { return preemptions_; }

 private:
  struct Request {
    int id = 0;
    std::int32_t prompt = 0, output = 0;
    std::int32_t target = 0;     // tokens to prefill: the prompt (and outputs, recomputing)
    std::int32_t computed = 0;   // tokens whose K/V are in the cache
    std::int32_t generated = 0;  // output tokens produced
    std::vector<std::int32_t> blocks;
    std::int32_t scheduled = 0;  // new tokens in the current step
  };
  [[nodiscard]] bool in_prefill(const Request& r) const { return r.computed < r.target; }
  /// Takes the blocks `r` needs for `tokens` more, preempting others; false when it cannot.
  bool grow(Request& r, std::int32_t tokens);
  void preempt(Request& r);

  DeploymentLimits limits_;
  BlockPool& pool_;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;  // admission order
  std::vector<Request*> step_order_;
  std::vector<int> step_ids_;
  StepBatch step_;
  long preemptions_ = 0;
};

}  // namespace freezeframe
