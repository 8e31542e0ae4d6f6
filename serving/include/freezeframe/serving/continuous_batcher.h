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
//
// With prefix caching (prefix_cache.h) a request admitted starts from the longest prefix of its
// sequence other requests left in the cache, whole blocks only and never its last token (whose
// logits draw the next one): those tokens count as computed, and only the rest is prefilled. A
// request's blocks are recorded in the cache as they fill, its prompt's and its outputs' alike,
// so a conversation's next turn finds the last one's.
//
// The batcher holds each request's tokens: its prompt, and every output token as the step that
// drew it reports it (complete_step(sampled)), fed back as the next step's input. A request
// finishes when it draws one of its stop tokens or reaches its output length. A request added
// by lengths only has position-derived prompt tokens (a trace has no text), and output tokens
// of the same kind unless drawn ones are reported.

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "freezeframe/engine/runtime/sampler.h"
#include "freezeframe/engine/runtime/step_batch.h"
#include "freezeframe/memory/block_pool.h"
#include "freezeframe/serving/prefix_cache.h"

namespace freezeframe {

/// How add() took a request.
enum class Admission {
  kQueued,         ///< queued as it is
  kOutputCut,      ///< queued with its output cut so the sequence ends at max_model_len
  kPromptTooLong,  ///< refused: the prompt alone is longer than max_model_len
  kCacheTooSmall,  ///< refused: the sequence needs more KV blocks than the whole cache has
};
[[nodiscard]] std::string_view to_string(Admission admission);

/// A request with its tokens: what a serving loop over an engine that samples runs.
struct GenerationRequest {
  int id = 0;
  std::vector<std::int32_t> prompt;          ///< the prompt's token ids (at least one)
  std::int32_t max_tokens = 0;               ///< output tokens at most, a stop token included
  std::vector<std::int32_t> stop_token_ids;  ///< drawing one of these finishes the request
  SamplingParams sampling;                   ///< how its tokens are drawn
};

/// Why a request finished.
enum class FinishReason {
  kLength,  ///< it produced its output length (max_tokens, or the cut at max_model_len)
  kStop,    ///< it drew one of its stop tokens (which is its last output token)
};
[[nodiscard]] std::string_view to_string(FinishReason reason);

class ContinuousBatcher {
 public:
  /// Schedules within `limits` (scheduler.max_num_seqs, max_num_batched_tokens, max_model_len,
  /// cache.block_size) over `pool`, which must outlive the batcher; with `prefix_caching`,
  /// requests share the blocks of their common prefixes.
  ContinuousBatcher(const DeploymentLimits& limits, BlockPool& pool, bool prefix_caching = false);
  /// The same for ranks under decode context parallelism: a block of `pool` is a virtual block
  /// of dcp.virtual_block_size() positions (each rank keeps its share of it in its own block
  /// of that id), so the pool holds dcp.world_size times the tokens; the steps validate with
  /// validate_step(step, limits, dcp). Prefix caching is refused here (kUnsupported) for now.
  ContinuousBatcher(const DeploymentLimits& limits, BlockPool& pool, const DcpSharding& dcp,
                    bool prefix_caching = false);

  /// Queues a request that has arrived, unless it cannot run (a prompt longer than
  /// max_model_len, or a sequence larger than the whole cache); an output that would run past
  /// max_model_len is cut there, as a server stops such a request by length. Nothing is
  /// clamped silently: the return value says which. An output of 0 finishes at prefill.
  /// Its prompt's tokens are derived from its id and their positions.
  Admission add(int id, std::int32_t prompt_tokens, std::int32_t output_tokens);
  /// The same for a request with its tokens, stop tokens and sampling parameters. Throws
  /// kInvalidArgument naming the request for an empty prompt, a negative max_tokens, or a
  /// prompt or stop token outside the vocabulary (DeploymentLimits::vocab_size, when known).
  Admission add(GenerationRequest request);

  /// The next step, or nullptr when no request can run. Valid until complete_step(). It holds
  /// the token id of every new token and, when one of its requests was added with sampling
  /// parameters (GenerationRequest), each request's parameters (the others' greedy).
  [[nodiscard]] const StepBatch* schedule();
  /// The ids of the scheduled step's requests, in the step's order.
  [[nodiscard]] std::span<const int> scheduled_ids() const { return step_ids_; }
  /// The scheduled step's new tokens that build a request's context (its prompt, or what a
  /// recompute prefills again); the others are decodes. A one-token prefill chunk runs among
  /// the decodes but counts here.
  [[nodiscard]] std::int64_t scheduled_prefill_tokens() const { return step_prefill_tokens_; }

  /// What a completed step did to its requests.
  struct StepEvents {
    std::vector<int> produced;          ///< produced an output token this step
    std::vector<std::int32_t> tokens;   ///< ... that token, one per produced request, in order
    std::vector<int> first_tokens;      ///< ... their first one (the prompt is done)
    std::vector<int> finished;          ///< finished: their blocks are back in the pool
    std::vector<FinishReason> reasons;  ///< ... why, one per finished request, in order
  };
  /// Records that the scheduled step ran. `sampled`: the token drawn for each of its requests,
  /// in its order (the engine's StepResult::host_token_ids); a request whose prefill the step
  /// did not end drew nothing, and its entry is ignored. Empty: output tokens derived from
  /// the request and position, and no stop token ever drawn. Throws kInvalidArgument (recording
  /// nothing) for a count other than the step's requests.
  StepEvents complete_step(std::span<const std::int32_t> sampled = {});

  /// Ends request `id` now, waiting or running, and gives its blocks back; false when it is
  /// not known (finished, refused, never added). Not between schedule() and complete_step().
  bool abort(int id);

  [[nodiscard]] int num_waiting() const { return static_cast<int>(waiting_.size()); }
  [[nodiscard]] int num_running() const { return static_cast<int>(running_.size()); }
  /// Requests preempted so far (each recomputed later).
  [[nodiscard]] long num_preemptions() const { return preemptions_; }
  /// The blocks: free, cached, and the prefix cache's hits.
  [[nodiscard]] const PrefixCache& prefix_cache() const { return cache_; }

 private:
  struct Request {
    int id = 0;
    std::int32_t prompt = 0, output = 0;
    std::int32_t target = 0;     // tokens to prefill: the prompt (and outputs, recomputing)
    std::int32_t computed = 0;   // tokens whose K/V are in the cache
    std::int32_t generated = 0;  // output tokens produced
    std::vector<std::int32_t> blocks;
    std::int32_t committed = 0;            // blocks recorded in the prefix cache
    PrefixCache::Chain chain;              // where their chain stands
    std::int32_t scheduled = 0;            // new tokens in the current step
    std::vector<std::int32_t> prompt_ids;  // empty: derived from the id and position
    std::vector<std::int32_t> outputs;     // every output token so far
    std::vector<std::int32_t> stop;
    SamplingParams sampling;
    bool sampled = false;  // added with sampling parameters
    bool stopped = false;  // drew a stop token
  };
  [[nodiscard]] Admission queue(std::unique_ptr<Request> r);
  /// The token at position `p` of `r`'s sequence (a prompt token or an output so far).
  [[nodiscard]] std::int32_t token_at(const Request& r, std::int32_t p) const;
  /// The token of request `id` at position `p` when it has none of its own.
  [[nodiscard]] std::int32_t derived_token(int id, std::int64_t p) const;
  [[nodiscard]] bool in_prefill(const Request& r) const { return r.computed < r.target; }
  /// Takes the blocks `r` needs for `tokens` more, preempting others; false when it cannot.
  bool grow(Request& r, std::int32_t tokens);
  void preempt(Request& r);
  /// Starts `r` from the longest cached prefix of its sequence.
  void match_prefix(Request& r);
  /// Gives `r`'s blocks back and forgets what it computed.
  void drop_blocks(Request& r);
  /// Records `r`'s blocks that its computed tokens fill.
  void commit_blocks(Request& r);

  DeploymentLimits limits_;
  BlockPool& pool_;
  int tokens_per_block_ = 0;
  PrefixCache cache_;
  std::vector<std::int32_t> scratch_tokens_;  // a sequence's tokens for the cache, reused  ///<
                                              // block_size, times the DCP ranks (virtual blocks)
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;  // admission order
  std::vector<Request*> step_order_;
  std::vector<int> step_ids_;
  std::int64_t step_prefill_tokens_ = 0;
  std::vector<std::int32_t> step_tokens_;
  std::vector<SamplingParams> step_sampling_;
  StepBatch step_;
  long preemptions_ = 0;
};

}  // namespace freezeframe
