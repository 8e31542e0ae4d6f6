// freezeframe serve-sim SPEC.yaml --trace FILE [--schedule-only] [--time-scale X]
//                      [--max-requests N] [--device-memory SIZE] [--backend NAME]
//                      [--step-ms MS | --cost-model FILE] [--sample]
// Replays a request trace through the serving loop (run_serving_loop): the spec's engine runs
// every step on the GPU, fed by continuous batching over the plan's KV blocks (admission,
// chunked prefill, decodes, completion). With --schedule-only no GPU is used: each step is
// taken to last --step-ms, or as long as the step cost model fitted to a `freezeframe bench
// --json` file says (--cost-model), and the report is what the schedule decides. With --sample
// the engine draws every output token and the loop feeds it back, so a request that draws its
// checkpoint's end-of-sequence token finishes before its trace length.

#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "arguments.h"
#include "commands.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/core/device.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/runtime/graph_scope.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/graphs/dispatcher.h"
#include "freezeframe/serving/request_trace.h"
#include "freezeframe/serving/serving_loop.h"
#include "freezeframe/serving/step_cost_model.h"

namespace freezeframe::tools {
namespace {

constexpr const char* kUsage =
    "usage: freezeframe serve-sim SPEC.yaml --trace FILE [--schedule-only] [--time-scale X]\n"
    "                             [--max-requests N] [--device-memory SIZE] [--backend NAME]\n"
    "                             [--step-ms MS | --cost-model FILE] [--sample]\n"
    "                             [--no-prefix-cache]\n"
    "  --trace FILE       request trace: Azure CSV (TIMESTAMP,ContextTokens,GeneratedTokens)\n"
    "                     or Mooncake JSON Lines (timestamp, input_length, output_length, "
    "hash_ids)\n"
    "  --schedule-only    schedule and dispatch without executing steps (each lasts --step-ms,\n"
    "                     or as long as --cost-model says)\n"
    "  --backend NAME     run every layer's attention on this backend\n"
    "  --time-scale X     multiply arrival times by X (default 1; 0.1 = ten times the rate;\n"
    "                     at most 1000)\n"
    "  --max-requests N   replay the first N requests (default: all)\n"
    "  --device-memory    device memory for the plan (default: the GPU's free memory, or 141GiB)\n"
    "  --step-ms MS       modelled step time with --schedule-only (default 20; at most an\n"
    "                     hour, 3600000)\n"
    "  --cost-model FILE  with --schedule-only, time each step by the cost model fitted to\n"
    "                     this `freezeframe bench --json` file (it needs decode rows,\n"
    "                     --batches, and prefill rows, --prefill): dense time by step\n"
    "                     tokens, plus decode and prefill attention by their work\n"
    "  --sample           draw each output token on the GPU (temperature 0.8, top-k 40,\n"
    "                     top-p 0.95, a seed per request)\n"
    "                     and feed it back; a request that draws one of the checkpoint's\n"
    "                     end-of-sequence tokens finishes early\n"
    "  --no-prefix-cache  prefill every prompt whole (default: a request starts from the\n"
    "                     longest prefix cached; a Mooncake trace's equal hash ids are equal\n"
    "                     tokens)\n";

}  // namespace

const std::string_view kServeSimUsage = kUsage;

int run_serve_sim(Args args) {
  std::string spec_path, trace_path, backend;
  std::optional<std::int64_t> device_bytes;
  TraceOptions trace_options;
  ServingOptions serving;
  serving.prefix_caching = true;
  bool schedule_only = false, step_ms_given = false, sample = false;
  std::string cost_model_path;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&] { return take_value(args, i); };
    if (is_help(a)) {
      std::printf("%s", kUsage);
      return 0;
    } else if (a == "--trace") {
      trace_path = std::string(value());
    } else if (a == "--schedule-only") {
      schedule_only = true;
    } else if (a == "--time-scale") {
      trace_options.time_scale =
          parse_number(a, value(), 0, kMaxTimeScale, true, "above 0 and at most 1000");
    } else if (a == "--max-requests") {
      trace_options.max_requests = static_cast<std::size_t>(parse_count(a, value()));
    } else if (a == "--device-memory") {
      device_bytes = parse_size_arg(a, value());
    } else if (a == "--backend") {
      backend = std::string(value());
    } else if (a == "--step-ms") {
      serving.modelled_step_ms =
          parse_number(a, value(), 0, kMaxStepMs, true, "above 0 and at most 3600000 (an hour)");
      step_ms_given = true;
    } else if (a == "--cost-model") {
      cost_model_path = std::string(value());
    } else if (a == "--no-prefix-cache") {
      serving.prefix_caching = false;
    } else if (a == "--sample") {
      sample = true;
    } else if (a.empty() || a[0] == '-') {
      refuse(a);
    } else {
      // A second file is most likely the trace without its flag.
      if (!spec_path.empty()) {
        refuse(a, trace_path.empty() ? "--trace FILE is required: a trace goes after --trace"
                                     : "one spec at a time");
      }
      spec_path = std::string(a);
    }
  }
  if (spec_path.empty()) throw UsageError("no spec file given");
  if (trace_path.empty()) throw UsageError("--trace FILE is required: the request trace to replay");
  if (!cost_model_path.empty() && !schedule_only) {
    throw UsageError("--cost-model models steps that are not run: it goes with --schedule-only");
  }
  if (sample && schedule_only) {
    throw UsageError("--sample draws tokens on the GPU: it does not go with --schedule-only");
  }
  if (!cost_model_path.empty() && step_ms_given) {
    throw UsageError("--step-ms and --cost-model both time the steps: give one");
  }

  // A GPU this build has no code for is refused before the spec, whose backends query the
  // device; no GPU at all only where the engine is built, after the spec and the trace.
  if (!schedule_only && has_gpu()) require_usable_gpu();
  EngineSpec spec = load_spec(spec_path);
  if (!backend.empty()) use_backend(spec, backend);
  const DeviceMemory device = device_memory(device_bytes);
  const auto trace = load_trace(trace_path, trace_options);
  std::optional<StepCostModel> cost_model;
  if (!cost_model_path.empty()) {
    cost_model.emplace(StepCostModel::load(cost_model_path));
    serving.cost_model = &*cost_model;
  }
  std::unique_ptr<Engine> engine;
  std::optional<MemoryPlan> plan;
  std::optional<Dispatcher> dispatcher;
  if (schedule_only) {
    plan = plan_memory(spec, device.bytes);
    dispatcher.emplace(effective_graph_mode(spec), spec.cuda_graphs.capture_sizes,
                       spec.scheduler.max_num_seqs);
  } else {
    FF_CHECK(has_gpu(), ErrorCode::kUnsupported, "no GPU to run the steps on: ", gpu_status(),
             "; --schedule-only replays the trace's schedule without one");
    EngineOptions options;
    options.device_memory = device.bytes;
    options.sample_tokens = sample;
    if (sample) {
      serving.sampling = kDefaultSampling;
      if (spec.model.checkpoint) serving.stop_token_ids = spec.model.checkpoint->eos_token_ids;
    }
    engine = std::make_unique<Engine>(spec, options);
    FF_CHECK(engine->capture_report().failure.empty(), ErrorCode::kCudaError,
             "graph capture failed: ", engine->capture_report().failure);
  }
  const MemoryPlan& the_plan = engine ? engine->plan() : *plan;
  const Dispatcher& the_dispatcher = engine ? engine->dispatcher() : *dispatcher;
  const ServingReport r = run_serving_loop(spec, the_plan.kv_cache.num_blocks, the_dispatcher,
                                           trace, engine.get(), serving);

  // Every time below comes from the clock the steps ran on: say which, on each line a reader
  // may quote (a constant step time makes no figure of a GPU's).
  char modelled[96] = " (measured)";
  if (cost_model) {
    std::snprintf(modelled, sizeof modelled, " (modelled by the cost model, not measured)");
  } else if (schedule_only) {
    std::snprintf(modelled, sizeof modelled, " (modelled: %.1f ms every step, not measured)",
                  serving.modelled_step_ms);
  }
  if (cost_model) {
    std::printf("serve-sim (schedule only; each step timed by a cost model)\n%s\n",
                cost_model->describe().c_str());
    if (!cost_model->model_name().empty() && cost_model->model_name() != spec.model.name) {
      std::printf("note: the cost model was measured on model %s, the spec is of %s\n",
                  quote(cost_model->model_name()).c_str(), quote(spec.model.name).c_str());
    }
  } else if (schedule_only) {
    std::printf("serve-sim (schedule only; each step modelled as %.1f ms)\n",
                serving.modelled_step_ms);
  } else {
    std::printf("serve-sim on %s (every step run and waited for)\n", device.note.c_str());
  }
  std::printf("spec %s, trace %s: %zu requests, time scale %g\n",
              printable(spec.source, 200).c_str(), printable(trace_path, 200).c_str(), trace.size(),
              trace_options.time_scale);
  std::int64_t prompt_tokens = 0, reusable = 0;
  for (const TraceRequest& t : trace) {
    prompt_tokens += t.prompt_tokens;
    reusable += t.reusable_prefix_tokens;
  }
  const auto share = [](std::int64_t part, std::int64_t whole) {
    return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
  };
  if (reusable > 0) {
    std::printf("prefix reuse the trace's hash ids allow: %lld of %lld prompt tokens (%.1f%%)\n",
                static_cast<long long>(reusable), static_cast<long long>(prompt_tokens),
                share(reusable, prompt_tokens));
  }
  if (serving.prefix_caching) {
    std::printf("prefix cache: %lld of %lld prompt tokens admitted found cached (%.1f%%)",
                static_cast<long long>(r.prefix_hit_tokens),
                static_cast<long long>(r.prefix_queried_tokens),
                share(r.prefix_hit_tokens, r.prefix_queried_tokens));
    if (reusable > 0) {
      std::printf("; %.1f%% of what the hash ids allow", share(r.prefix_hit_tokens, reusable));
    }
    std::printf("\n");
  } else {
    std::printf("prefix cache: off (--no-prefix-cache)\n");
  }
  std::printf("kv cache %lld blocks of %d (device memory %s), graph mode %.*s, %zu capture sizes\n",
              static_cast<long long>(the_plan.kv_cache.num_blocks), spec.cache.block_size,
              device.note.c_str(), int(to_string(the_dispatcher.mode()).size()),
              to_string(the_dispatcher.mode()).data(), the_dispatcher.capture_sizes().size());
  std::printf(
      "finished %zu of %zu requests in %ld steps (%.1f s on the trace's clock, %.1f s in "
      "steps)%s\n",
      r.finished, r.requests, r.steps, r.seconds, r.busy_seconds, modelled);
  const std::size_t refused = r.refused_prompt_too_long + r.refused_cache_too_small;
  if (refused > 0 || r.outputs_cut > 0) {
    std::printf(
        "refused %zu: %zu with a prompt longer than scheduler.max_model_len (%lld), %zu "
        "needing more KV blocks than the cache has; %zu outputs cut at max_model_len\n",
        refused, r.refused_prompt_too_long, static_cast<long long>(spec.scheduler.max_model_len),
        r.refused_cache_too_small, r.outputs_cut);
  }
  if (sample) {
    std::printf("finished by a stop token %zu, by length %zu (stop tokens:", r.finished_by_stop,
                r.finished_by_length);
    for (const std::int32_t t : serving.stop_token_ids) std::printf(" %d", t);
    std::printf("%s)\n",
                serving.stop_token_ids.empty() ? " none; the spec names no checkpoint" : "");
  }
  std::printf("tokens: %ld prefill, %ld decode; %.0f tokens/s while stepping%s\n", r.prefill_tokens,
              r.decode_tokens, r.tokens_per_second(), modelled);
  // An offline run's figure: all it produced over the whole run, scheduling included.
  if (r.wall_seconds > 0) {
    std::printf("output: %ld tokens, %.0f tokens/s over the run's %.1f s (host clock)\n",
                r.output_tokens, r.output_tokens / r.wall_seconds, r.wall_seconds);
  } else if (r.seconds > 0) {
    std::printf("output: %ld tokens, %.0f tokens/s over the run's %.1f s%s\n", r.output_tokens,
                r.output_tokens / r.seconds, r.seconds, modelled);
  }
  const double total = std::max(1L, r.steps);
  std::printf("steps by mode: full %ld (%.1f%%), piecewise %ld (%.1f%%), eager %ld (%.1f%%)\n",
              r.steps_by_mode[2], 100.0 * r.steps_by_mode[2] / total, r.steps_by_mode[1],
              100.0 * r.steps_by_mode[1] / total, r.steps_by_mode[0],
              100.0 * r.steps_by_mode[0] / total);
  std::printf("padding in graph steps: %ld real tokens run as %ld (%.1f%% waste)\n",
              r.real_tokens_in_graphs, r.padded_tokens_in_graphs, 100.0 * r.padding_waste());
  if (!schedule_only || cost_model) {
    std::printf("step time: p50 %.2f ms, p99 %.2f ms, max %.2f ms%s\n", r.step_ms_p50,
                r.step_ms_p99, r.step_ms_max, modelled);
  }
  if (r.preemptions > 0) {
    std::printf("preemptions: %ld (blocks taken back when the cache ran out; recomputed)\n",
                r.preemptions);
  }
  std::printf(
      "per request (ms, p50 / p99): queueing %.1f / %.1f, time to first token %.1f / %.1f, "
      "time per output token %.2f / %.2f%s\n",
      r.queue_ms.p50, r.queue_ms.p99, r.ttft_ms.p50, r.ttft_ms.p99, r.tpot_ms.p50, r.tpot_ms.p99,
      modelled);
  // A run in which nothing finished measured nothing: an error, whatever the reason.
  FF_CHECK(r.finished > 0, ErrorCode::kInvalidArgument, "no request of the ", r.requests,
           " finished (", refused, " refused, see above)");
  // Every request finished or was refused (and counted above).
  return r.finished + refused == r.requests ? 0 : 1;
}

}  // namespace freezeframe::tools
