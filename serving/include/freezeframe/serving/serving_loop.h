#pragma once
// The built-in serving loop: a request trace through continuous batching (ContinuousBatcher
// over a BlockPool of the plan's KV blocks: admission, chunked prefill under the batched-token
// limit, decodes first, completion) and, when given an engine, each step run on the GPU;
// without one, each step takes a modelled time (a constant, or a StepCostModel's figure).
// Arrivals follow the trace's clock; when nothing can run the clock jumps to the next arrival,
// so an idle trace does not take its wall time.
//
// A trace has lengths only: each prompt token's id is derived from its request and position,
// so steps carry real, varying inputs; where a Mooncake trace gives hash ids, from the block's
// id and the position in it, so equal prefixes are equal tokens (what prefix caching finds). Output
// tokens are derived the same way, unless the engine samples: then each request's tokens are drawn
// on the GPU and fed back, and a request finishes early when it draws one of
// ServingOptions::stop_token_ids.

#include <cstdint>
#include <vector>

#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/graphs/dispatcher.h"
#include "freezeframe/serving/request_trace.h"
#include "freezeframe/serving/step_cost_model.h"

namespace freezeframe {

/// p50 and p99 of a set of samples (nearest rank); zeros without samples.
struct Percentiles {
  double p50 = 0.0;
  double p99 = 0.0;
  std::size_t samples = 0;
};

struct ServingReport {
  std::size_t requests = 0;
  std::size_t finished = 0;
  /// Requests the batcher refused (a prompt longer than scheduler.max_model_len, or a
  /// sequence larger than the whole KV cache), and those whose output it cut at
  /// max_model_len: none is clamped silently.
  std::size_t refused_prompt_too_long = 0;
  std::size_t refused_cache_too_small = 0;
  std::size_t outputs_cut = 0;
  /// How the finished requests finished: by drawing a stop token, or at their output length.
  std::size_t finished_by_stop = 0;
  std::size_t finished_by_length = 0;
  long preemptions = 0;  ///< requests whose blocks were taken back, to be recomputed
  long steps = 0;
  long prefill_tokens = 0;
  long decode_tokens = 0;
  long output_tokens = 0;             ///< tokens the requests produced, each one's first included
  long steps_by_mode[3] = {0, 0, 0};  ///< indexed by RuntimeMode
  /// With prefix caching: prompt tokens admitted requests looked up, and those found cached.
  std::int64_t prefix_queried_tokens = 0;
  std::int64_t prefix_hit_tokens = 0;
  long real_tokens_in_graphs = 0;    ///< tokens of graph steps before padding
  long padded_tokens_in_graphs = 0;  ///< ... and after
  double seconds = 0.0;              ///< on the loop's clock (modelled without an engine)
  double busy_seconds = 0.0;         ///< time spent in steps
  /// The loop's own duration on the host clock, scheduling included: what an offline
  /// throughput divides by (0 without an engine).
  double wall_seconds = 0.0;
  double step_ms_p50 = 0.0;  ///< step() plus waiting for its results
  double step_ms_p99 = 0.0;
  double step_ms_max = 0.0;
  /// What the requests saw, on the loop's clock (ms): from arrival to the first step that ran
  /// a chunk of the request (queueing), to the end of the step that produced its first output
  /// token (time to first token), and between its later tokens (time per output token: from
  /// the first token to the last over the tokens after the first).
  Percentiles queue_ms, ttft_ms, tpot_ms;

  /// (prefill + decode tokens) / busy time.
  [[nodiscard]] double tokens_per_second() const;
  /// 1 − real / padded over graph steps.
  [[nodiscard]] double padding_waste() const;
};

struct ServingOptions {
  /// Without an engine and a cost model, each step is taken to last this long.
  double modelled_step_ms = 20.0;
  /// Without an engine: when given, times each step from its work and padded size instead.
  const StepCostModel* cost_model = nullptr;
  /// With an engine that samples (EngineOptions::sample_tokens): how each request's tokens are
  /// drawn (its seed is this seed plus the request's index in the trace), and the tokens that
  /// finish it early (a checkpoint's CheckpointConfig::eos_token_ids).
  SamplingParams sampling = {};
  std::vector<std::int32_t> stop_token_ids = {};
  /// Automatic prefix caching (prefix_cache.h). A trace's prompts get tokens: those of its
  /// hash blocks (Mooncake: equal ids, equal tokens), then tokens of the request's own.
  bool prefix_caching = false;
};

/// Replays `trace` through the spec's batcher and `dispatcher` (the engine's when `engine` is
/// given, which then runs every step and waits for it). `num_blocks`: the KV cache's blocks.
[[nodiscard]] ServingReport run_serving_loop(const EngineSpec& spec, std::int64_t num_blocks,
                                             const Dispatcher& dispatcher,
                                             const std::vector<TraceRequest>& trace, Engine* engine,
                                             const ServingOptions& options = {});

}  // namespace freezeframe
