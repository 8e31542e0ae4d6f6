#include "freezeframe/serving/serving_loop.h"

#include <algorithm>
#include <chrono>

#include "freezeframe/base/error.h"
#include "freezeframe/memory/block_pool.h"
#include "freezeframe/serving/continuous_batcher.h"
#include "splitmix.h"

namespace freezeframe {
namespace {

/// A token of a trace's hash block: the block's id and the position in it, mixed.
std::uint64_t mix_token(std::uint64_t id, std::uint64_t offset) {
  return splitmix64_finalise(id * 0x9E3779B97F4A7C15ull + offset);
}

Percentiles percentiles(std::vector<double> v);

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto at = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(at, v.size() - 1)];
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.samples = v.size();
  p.p50 = percentile(v, 0.50);
  p.p99 = percentile(std::move(v), 0.99);
  return p;
}

}  // namespace

double ServingReport::tokens_per_second() const {
  return busy_seconds > 0 ? static_cast<double>(prefill_tokens + decode_tokens) / busy_seconds
                          : 0.0;
}

double ServingReport::padding_waste() const {
  return padded_tokens_in_graphs > 0 ? 1.0 - static_cast<double>(real_tokens_in_graphs) /
                                                 static_cast<double>(padded_tokens_in_graphs)
                                     : 0.0;
}

ServingReport run_serving_loop(const EngineSpec& spec, std::int64_t num_blocks,
                               const Dispatcher& dispatcher, const std::vector<TraceRequest>& trace,
                               Engine* engine, const ServingOptions& options) {
  FF_CHECK(options.modelled_step_ms > 0 && options.modelled_step_ms <= kMaxStepMs,
           ErrorCode::kInvalidArgument, "the modelled step time must be above 0 and at most ",
           std::int64_t(kMaxStepMs), " ms (an hour), got ", options.modelled_step_ms);
  const DeploymentGeometry geometry = DeploymentGeometry::of(spec).with_num_blocks(num_blocks);
  BlockPool pool(geometry.limits.num_blocks);
  ContinuousBatcher batcher(geometry.limits, pool, options.prefix_caching);
  const std::int32_t vocab = std::max(1, spec.model.vocab_size);

  ServingReport report;
  report.requests = trace.size();
  std::vector<double> step_ms;
  // With an engine that samples, requests carry their tokens, and the drawn ones go back.
  const bool sampling = engine != nullptr && engine->samples();
  const auto admit = [&](std::size_t i) {
    const TraceRequest& t = trace[i];
    // A prompt that cannot run is refused by its length, before its tokens are made.
    if ((!sampling && !options.prefix_caching) || t.prompt_tokens <= 0 ||
        t.prompt_tokens > geometry.limits.max_model_len) {
      return batcher.add(static_cast<int>(i), t.prompt_tokens, t.output_tokens);
    }
    GenerationRequest g;
    g.id = static_cast<int>(i);
    g.prompt.resize(static_cast<std::size_t>(t.prompt_tokens));
    for (std::size_t p = 0; p < g.prompt.size(); ++p) {
      const std::size_t block = p / kTraceHashBlockTokens;
      const std::uint64_t key =
          block < t.hash_ids.size()
              ? mix_token(static_cast<std::uint64_t>(t.hash_ids[block]), p % kTraceHashBlockTokens)
              : i * 7919 + p;
      g.prompt[p] = static_cast<std::int32_t>(key % static_cast<std::uint64_t>(vocab));
    }
    g.max_tokens = t.output_tokens;
    g.stop_token_ids = options.stop_token_ids;
    g.sampling = options.sampling;
    g.sampling.seed += i;
    return batcher.add(std::move(g));
  };
  // Per request, on the loop's clock (s): first run, first token, finish; −1 until then.
  std::vector<double> first_run(trace.size(), -1.0), first_token(trace.size(), -1.0),
      finish(trace.size(), -1.0);
  std::vector<std::int32_t> generated(trace.size(), 0);
  std::size_t next = 0;
  double now = 0.0;
  std::size_t refused = 0;
  const auto loop_start = std::chrono::steady_clock::now();
  while (report.finished + refused < trace.size()) {
    while (next < trace.size() && trace[next].arrival_s <= now) {
      switch (admit(next)) {
        case Admission::kQueued: break;
        case Admission::kOutputCut: ++report.outputs_cut; break;
        case Admission::kPromptTooLong: ++report.refused_prompt_too_long, ++refused; break;
        case Admission::kCacheTooSmall: ++report.refused_cache_too_small, ++refused; break;
      }
      ++next;
    }
    const StepBatch* step = batcher.schedule();
    if (step == nullptr) {
      if (next >= trace.size()) break;  // cannot happen: an admitted request always fits
      now = trace[next].arrival_s;      // idle: jump to the next arrival
      continue;
    }
    int tokens = 0, decodes = 0;
    for (const StepRequest& r : step->requests) {
      tokens += r.query_len;
      decodes += r.query_len == 1;  // a one-token prefill chunk runs as a decode
    }
    // Counted by what the tokens are for: a one-token prefill chunk is prompt.
    report.prefill_tokens += batcher.scheduled_prefill_tokens();
    report.decode_tokens += tokens - batcher.scheduled_prefill_tokens();
    const int reqs = static_cast<int>(step->requests.size());
    Dispatch dispatch = dispatcher.dispatch(tokens, reqs, decodes == reqs);
    double ms = options.modelled_step_ms;
    if (engine == nullptr && options.cost_model != nullptr) {
      // A graph runs the step padded to its size.
      const int run_tokens =
          dispatch.mode == RuntimeMode::kEager ? tokens : dispatch.descriptor.num_tokens;
      ms = options.cost_model->step_ms(step->requests, run_tokens);
    }
    std::span<const std::int32_t> drawn;  // empty: output tokens are derived
    if (engine != nullptr) {
      const auto start = std::chrono::steady_clock::now();
      const StepResult result = engine->step(*step);  // the batcher's token ids and parameters
      engine->synchronize();
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
               .count();
      dispatch = {result.mode, result.descriptor};
      drawn = result.host_token_ids;
    }
    ++report.steps_by_mode[static_cast<int>(dispatch.mode)];
    if (dispatch.mode != RuntimeMode::kEager) {
      report.real_tokens_in_graphs += tokens;
      report.padded_tokens_in_graphs += dispatch.descriptor.num_tokens;
    }
    step_ms.push_back(ms);
    report.busy_seconds += ms * 1e-3;
    for (const int id : batcher.scheduled_ids()) {
      if (first_run[id] < 0) first_run[id] = now;
    }
    now += ms * 1e-3;
    const ContinuousBatcher::StepEvents events = batcher.complete_step(drawn);
    for (const int id : events.produced) ++generated[id];
    report.output_tokens += static_cast<long>(events.produced.size());
    for (const int id : events.first_tokens) first_token[id] = now;
    for (const int id : events.finished) finish[id] = now;
    for (const FinishReason why : events.reasons) {
      ++(why == FinishReason::kStop ? report.finished_by_stop : report.finished_by_length);
    }
    report.finished += events.finished.size();
    ++report.steps;
  }
  report.seconds = now;
  if (engine != nullptr) {
    report.wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count();
  }
  report.preemptions = batcher.num_preemptions();
  report.prefix_queried_tokens = batcher.prefix_cache().queried_tokens();
  report.prefix_hit_tokens = batcher.prefix_cache().hit_tokens();
  std::vector<double> queue, ttft, tpot;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    if (first_run[i] >= 0) queue.push_back((first_run[i] - trace[i].arrival_s) * 1e3);
    if (first_token[i] >= 0) ttft.push_back((first_token[i] - trace[i].arrival_s) * 1e3);
    const std::int64_t later = static_cast<std::int64_t>(generated[i]) - 1;
    if (finish[i] >= 0 && first_token[i] >= 0 && later > 0) {
      tpot.push_back((finish[i] - first_token[i]) * 1e3 / static_cast<double>(later));
    }
  }
  report.queue_ms = percentiles(std::move(queue));
  report.ttft_ms = percentiles(std::move(ttft));
  report.tpot_ms = percentiles(std::move(tpot));
  report.step_ms_p50 = percentile(step_ms, 0.50);
  report.step_ms_p99 = percentile(step_ms, 0.99);
  report.step_ms_max = step_ms.empty() ? 0.0 : *std::max_element(step_ms.begin(), step_ms.end());
  return report;
}

}  // namespace freezeframe
