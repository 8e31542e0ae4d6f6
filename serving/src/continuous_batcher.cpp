#include "freezeframe/serving/continuous_batcher.h"

#include <algorithm>
#include <climits>
#include <string>

#include "freezeframe/base/error.h"

namespace freezeframe {

std::string_view to_string(Admission admission) {
  switch (admission) {
    case Admission::kQueued: return "queued";
    case Admission::kOutputCut: return "output cut at max_model_len";
    case Admission::kPromptTooLong: return "prompt longer than max_model_len";
    case Admission::kCacheTooSmall: return "sequence larger than the whole KV cache";
  }
  return "unknown";
}

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop token";
  }
  return "unknown";
}

namespace {

/// Tokens of a block: cache.block_size, times the DCP ranks (a virtual block).
int tokens_per_block(const DcpSharding& dcp) {
  return dcp.virtual_block_size() > 0 && dcp.virtual_block_size() <= INT32_MAX
             ? static_cast<int>(dcp.virtual_block_size())
             : 1;
}

}  // namespace

ContinuousBatcher::ContinuousBatcher(const DeploymentLimits& limits, BlockPool& pool,
                                     bool prefix_caching)
    : ContinuousBatcher(limits, pool, DcpSharding{1, 1, limits.block_size}, prefix_caching) {}

ContinuousBatcher::ContinuousBatcher(const DeploymentLimits& limits, BlockPool& pool,
                                     const DcpSharding& dcp, bool prefix_caching)
    : limits_(limits),
      pool_(pool),
      tokens_per_block_(tokens_per_block(dcp)),
      cache_(pool, tokens_per_block_, prefix_caching) {
  FF_CHECK(!prefix_caching || dcp.world_size == 1, ErrorCode::kUnsupported,
           "prefix caching under decode context parallelism (", dcp.world_size,
           " ranks) is not supported yet: run without it");
  FF_CHECK(limits.max_num_seqs > 0 && limits.max_num_batched_tokens >= limits.max_num_seqs,
           ErrorCode::kInvalidArgument,
           "the batcher needs scheduler.max_num_seqs > 0 and "
           "scheduler.max_num_batched_tokens >= max_num_seqs, got ",
           limits.max_num_seqs, " and ", limits.max_num_batched_tokens);
  FF_CHECK(limits.max_model_len >= 2, ErrorCode::kInvalidArgument,
           "the batcher needs scheduler.max_model_len >= 2 (a prompt token and a generated one), "
           "got ",
           limits.max_model_len);
  FF_CHECK(limits.block_size > 0, ErrorCode::kInvalidArgument,
           "the batcher needs a positive cache.block_size, got ", limits.block_size);
  FF_CHECK(dcp.block_size == limits.block_size && dcp.world_size >= 1 && dcp.interleave_size >= 1 &&
               limits.block_size % dcp.interleave_size == 0 &&
               dcp.virtual_block_size() <= INT32_MAX,
           ErrorCode::kInvalidArgument, "the batcher's DCP layout (", dcp.world_size,
           " ranks, interleave ", dcp.interleave_size, ", blocks of ", dcp.block_size,
           ") does not fit cache.block_size ", limits.block_size);
}

Admission ContinuousBatcher::add(int id, std::int32_t prompt_tokens, std::int32_t output_tokens) {
  FF_CHECK(prompt_tokens > 0 && output_tokens >= 0, ErrorCode::kInvalidArgument, "request ", id,
           ": needs a prompt and a non-negative output length, got ", prompt_tokens, " and ",
           output_tokens);
  auto r = std::make_unique<Request>();
  r->id = id;
  r->prompt = prompt_tokens;
  r->output = output_tokens;
  return queue(std::move(r));
}

Admission ContinuousBatcher::add(GenerationRequest request) {
  const int id = request.id;
  FF_CHECK(!request.prompt.empty() && request.max_tokens >= 0, ErrorCode::kInvalidArgument,
           "request ", id, ": needs a prompt and a non-negative max_tokens, got ",
           request.prompt.size(), " prompt tokens and max_tokens ", request.max_tokens);
  FF_CHECK(request.prompt.size() <= static_cast<std::size_t>(INT32_MAX),
           ErrorCode::kInvalidArgument, "request ", id, ": a prompt of ", request.prompt.size(),
           " tokens");
  const std::int32_t vocab = limits_.vocab_size > 0 ? limits_.vocab_size : INT32_MAX;
  const auto outside = [&](std::int32_t t) { return t < 0 || t >= vocab; };
  for (const std::int32_t t : request.prompt) {
    FF_CHECK(!outside(t), ErrorCode::kInvalidArgument, "request ", id, ": prompt token ", t,
             " is outside the vocabulary of ", limits_.vocab_size, " tokens");
  }
  for (const std::int32_t t : request.stop_token_ids) {
    FF_CHECK(!outside(t), ErrorCode::kInvalidArgument, "request ", id, ": stop token ", t,
             " is outside the vocabulary of ", limits_.vocab_size, " tokens");
  }
  check_sampling(request.sampling, "request " + std::to_string(id) + ": sampling");
  auto r = std::make_unique<Request>();
  r->id = id;
  r->prompt = static_cast<std::int32_t>(request.prompt.size());
  r->output = request.max_tokens;
  r->prompt_ids = std::move(request.prompt);
  r->stop = std::move(request.stop_token_ids);
  r->sampling = request.sampling;
  r->sampled = true;
  return queue(std::move(r));
}

Admission ContinuousBatcher::queue(std::unique_ptr<Request> r) {
  if (r->prompt > limits_.max_model_len) return Admission::kPromptTooLong;
  // The last output token is sampled but never fed back, so it needs no cache slot.
  const std::int64_t most_output = limits_.max_model_len - r->prompt + 1;
  const Admission admission = r->output > most_output ? Admission::kOutputCut : Admission::kQueued;
  r->output = static_cast<std::int32_t>(std::min<std::int64_t>(r->output, most_output));
  const std::int32_t blocks = blocks_for(r->prompt + std::max(0, r->output - 1), tokens_per_block_);
  // Its longest sequence must fit the whole cache; blocks are taken as it grows.
  if (blocks > cache_.num_blocks()) return Admission::kCacheTooSmall;
  r->target = r->prompt;
  waiting_.push_back(std::move(r));
  return admission;
}

std::int32_t ContinuousBatcher::derived_token(int id, std::int64_t p) const {
  if (limits_.vocab_size <= 0) return 0;
  return static_cast<std::int32_t>(
      (static_cast<std::uint64_t>(static_cast<std::uint32_t>(id)) * 7919u +
       static_cast<std::uint64_t>(p)) %
      static_cast<std::uint64_t>(limits_.vocab_size));
}

std::int32_t ContinuousBatcher::token_at(const Request& r, std::int32_t p) const {
  if (p >= r.prompt) return r.outputs[p - r.prompt];
  return r.prompt_ids.empty() ? derived_token(r.id, p) : r.prompt_ids[p];
}

bool ContinuousBatcher::grow(Request& r, std::int32_t tokens) {
  const std::int32_t needed = blocks_for(r.computed + tokens, tokens_per_block_) -
                              static_cast<std::int32_t>(r.blocks.size());
  while (needed > cache_.num_free()) {
    // Free the latest admitted request not in this step, to recompute it later.
    Request* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      if ((*it)->scheduled == 0 && it->get() != &r) {
        victim = it->get();
        break;
      }
    }
    if (victim == nullptr) return false;
    preempt(*victim);
  }
  if (needed > 0) cache_.allocate(needed, r.blocks);
  return true;
}

void ContinuousBatcher::drop_blocks(Request& r) {
  cache_.release(r.blocks);
  r.blocks.clear();
  r.computed = 0;
  r.committed = 0;
  r.chain = PrefixCache::Chain{};
}

void ContinuousBatcher::match_prefix(Request& r) {
  if (!cache_.enabled() || r.computed > 0 || !r.blocks.empty()) return;
  std::vector<std::int32_t>& tokens = scratch_tokens_;
  tokens.resize(static_cast<std::size_t>(r.target));
  for (std::int32_t p = 0; p < r.target; ++p) tokens[p] = token_at(r, p);
  // Never the last token: the step that computes it draws the next one.
  r.computed = cache_.match(tokens, r.target - 1, r.blocks, r.chain);
  r.committed = static_cast<std::int32_t>(r.blocks.size());
}

void ContinuousBatcher::commit_blocks(Request& r) {
  const std::int32_t full = r.computed / tokens_per_block_;
  if (!cache_.enabled() || full <= r.committed) return;
  std::vector<std::int32_t>& tokens = scratch_tokens_;
  tokens.clear();
  for (std::int32_t p = r.committed * tokens_per_block_; p < full * tokens_per_block_; ++p) {
    tokens.push_back(token_at(r, p));
  }
  cache_.commit(r.blocks, tokens, r.committed, full, r.chain);
  r.committed = full;
}

void ContinuousBatcher::preempt(Request& r) {
  drop_blocks(r);
  // Recompute: the prompt and every output token so far are prefilled again (from the cache,
  // where it still holds them), and the step that ends that prefill samples the next token.
  r.target = r.prompt + r.generated;
  ++preemptions_;
  const auto it =
      std::find_if(running_.begin(), running_.end(), [&](const auto& q) { return q.get() == &r; });
  waiting_.push_front(std::move(*it));
  running_.erase(it);
}

const StepBatch* ContinuousBatcher::schedule() {
  step_order_.clear();
  for (auto& r : running_) r->scheduled = 0;
  int budget = limits_.max_num_batched_tokens;
  // Blocks are taken as sequences grow; when the pool runs out, the latest admitted request
  // not yet in this step gives its blocks back and waits to be recomputed (vLLM's recompute
  // preemption). A request that cannot grow even so sits this step out.
  auto run = [&](Request& r, std::int32_t tokens) {
    if (tokens <= 0 || !grow(r, tokens)) return;
    r.scheduled = tokens;
    budget -= tokens;
    step_order_.push_back(&r);
  };
  // Decodes first: one token each (the last sampled token goes in). The running list may
  // shrink as requests are preempted: walk it by position.
  for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request& r = *running_[i];
    if (!in_prefill(r) && r.scheduled == 0) run(r, 1);
  }
  // Prefill chunks of running requests, then admit waiting ones first come, first served
  // (a preempted request waits at the front).
  for (std::size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request& r = *running_[i];
    if (in_prefill(r) && r.scheduled == 0) run(r, std::min(budget, r.target - r.computed));
  }
  while (budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < limits_.max_num_seqs) {
    Request& next = *waiting_.front();
    match_prefix(next);
    const std::int32_t chunk = std::min(budget, next.target - next.computed);
    // Admission preempts nobody: it waits for blocks instead (and gives back what it matched).
    const std::int32_t needed = blocks_for(next.computed + chunk, tokens_per_block_) -
                                static_cast<std::int32_t>(next.blocks.size());
    if (needed > cache_.num_free()) {
      drop_blocks(next);
      break;
    }
    if (cache_.enabled()) cache_.record_lookup(next.target, next.computed);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    run(*running_.back(), chunk);
  }
  if (step_order_.empty()) return nullptr;
  // Every one-token request runs as a decode, so a one-token prefill chunk joins them in front.
  std::stable_partition(step_order_.begin(), step_order_.end(),
                        [](const Request* r) { return r->scheduled == 1; });

  step_.requests.clear();
  step_ids_.clear();
  step_tokens_.clear();
  step_sampling_.clear();
  step_prefill_tokens_ = 0;
  bool sampling = false;
  for (const Request* r : step_order_) {
    const std::int32_t seq_len = r->computed + r->scheduled;
    if (in_prefill(*r)) step_prefill_tokens_ += r->scheduled;
    step_.requests.push_back({r->scheduled, seq_len, r->blocks});
    step_ids_.push_back(r->id);
    for (std::int32_t p = r->computed; p < seq_len; ++p) step_tokens_.push_back(token_at(*r, p));
    step_sampling_.push_back(r->sampling);
    sampling = sampling || r->sampled;
  }
  step_.token_ids = step_tokens_;
  step_.sampling = sampling ? std::span<const SamplingParams>(step_sampling_)
                            : std::span<const SamplingParams>();
  return &step_;
}

bool ContinuousBatcher::abort(int id) {
  FF_CHECK(step_order_.empty(), ErrorCode::kInvalidArgument, "abort request ", id,
           " before schedule() or after complete_step(), not between");
  auto match = [&](const std::unique_ptr<Request>& r) { return r->id == id; };
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), match); it != waiting_.end()) {
    waiting_.erase(it);
    return true;
  }
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    cache_.release((*it)->blocks);
    running_.erase(it);
    return true;
  }
  return false;
}

ContinuousBatcher::StepEvents ContinuousBatcher::complete_step(
    std::span<const std::int32_t> sampled) {
  FF_CHECK(sampled.empty() || sampled.size() == step_order_.size(), ErrorCode::kInvalidArgument,
           "complete_step: ", sampled.size(), " sampled tokens for a step of ", step_order_.size(),
           " requests");
  StepEvents events;
  for (std::size_t i = 0; i < step_order_.size(); ++i) {
    Request* r = step_order_[i];
    const bool was_prefill = in_prefill(*r);
    r->computed += r->scheduled;
    commit_blocks(*r);
    // A step that ends the prefill, and every decode step, samples one output token: the one
    // at position `computed`, fed back by the next step (a recompute puts it back where it
    // was, so the outputs so far stay as they are).
    if (!was_prefill || r->computed == r->target) {
      if (r->output > 0) {
        const std::int32_t token = sampled.empty() ? derived_token(r->id, r->computed) : sampled[i];
        r->outputs.push_back(token);
        r->stopped = std::find(r->stop.begin(), r->stop.end(), token) != r->stop.end();
        events.produced.push_back(r->id);
        events.tokens.push_back(token);
        if (r->generated == 0) events.first_tokens.push_back(r->id);
      }
      ++r->generated;
    }
    r->scheduled = 0;
  }
  step_order_.clear();
  step_ids_.clear();
  step_prefill_tokens_ = 0;
  step_.requests.clear();
  auto done = [&](const std::unique_ptr<Request>& r) {
    return !in_prefill(*r) && (r->generated >= r->output || r->stopped);
  };
  for (auto& r : running_) {
    if (done(r)) {
      events.finished.push_back(r->id);
      events.reasons.push_back(r->stopped ? FinishReason::kStop : FinishReason::kLength);
      cache_.release(r->blocks);
    }
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(), done), running_.end());
  return events;
}

}  // namespace freezeframe
