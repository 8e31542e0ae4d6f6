// freezeframe serve-sim SPEC.yaml --trace FILE --schedule-only [--time-scale X]
//                      [--max-requests N] [--device-memory SIZE] [--step-ms MS]
// Replays a request trace through the continuous batcher and the graph dispatcher of the
// spec: KV blocks from the memory plan, admission, chunked prefill, decodes. With
// --schedule-only no step is executed: a step is taken to last --step-ms, and the report is
// what the schedule decides — steps, tokens, which graphs the steps hit, padding waste.

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "commands.h"
#include "arguments.h"
#include "freezeframe/core/error.h"
#include "freezeframe/engine/continuous_batcher.h"
#include "freezeframe/engine/graph_scope.h"
#include "freezeframe/engine/memory_planner.h"
#include "freezeframe/engine/request_trace.h"
#include "freezeframe/engine/spec.h"
#include "freezeframe/graphs/dispatcher.h"

namespace freezeframe::tools {
namespace {

constexpr const char* kUsage =
    "usage: freezeframe serve-sim SPEC.yaml --trace FILE --schedule-only [--time-scale X]\n"
    "                             [--max-requests N] [--device-memory SIZE] [--step-ms MS]\n"
    "  --trace FILE       Azure LLM inference trace (TIMESTAMP,ContextTokens,GeneratedTokens)\n"
    "  --schedule-only    schedule and dispatch without executing steps (each lasts --step-ms)\n"
    "  --time-scale X     multiply arrival times by X (default 1; 0.1 = ten times the rate)\n"
    "  --max-requests N   replay the first N requests (default: all)\n"
    "  --device-memory    device memory for the plan (default: the GPU's free memory, or 141GiB)\n"
    "  --step-ms MS       modelled step time with --schedule-only (default 20)\n";

}  // namespace

int run_serve_sim(Args args) {
  std::string spec_path, trace_path;
  std::optional<std::int64_t> device_bytes;
  TraceOptions trace_options;
  double step_ms = 20.0;
  bool schedule_only = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&] { return take_value(args, i); };
    if (a == "-h" || a == "--help") {
      std::printf("%s", kUsage);
      return 0;
    } else if (a == "--trace") {
      trace_path = std::string(value());
    } else if (a == "--schedule-only") {
      schedule_only = true;
    } else if (a == "--time-scale") {
      trace_options.time_scale = parse_positive(a, value());
    } else if (a == "--max-requests") {
      trace_options.max_requests = static_cast<std::size_t>(parse_positive(a, value()));
    } else if (a == "--device-memory") {
      device_bytes = parse_size_arg(a, value());
    } else if (a == "--step-ms") {
      step_ms = parse_positive(a, value());
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "freezeframe serve-sim: unknown option '%.*s'\n%s", int(a.size()),
                   a.data(), kUsage);
      return 2;
    } else {
      FF_CHECK(spec_path.empty(), ErrorCode::kInvalidArgument, "one spec at a time");
      spec_path = std::string(a);
    }
  }
  if (spec_path.empty() || trace_path.empty()) {
    std::fprintf(stderr, "freezeframe serve-sim: needs a spec and --trace\n%s", kUsage);
    return 2;
  }
  FF_CHECK(schedule_only, ErrorCode::kUnsupported,
           "serve-sim executes steps through the engine, which this build does not have yet; "
           "pass --schedule-only to replay the schedule alone");

  const EngineSpec spec = load_spec(spec_path);
  const DeviceMemory device = device_memory(device_bytes);
  const MemoryPlan plan = plan_memory(spec, device.bytes);
  const auto trace = load_azure_trace(trace_path, trace_options);
  const Dispatcher dispatcher(effective_graph_mode(spec), spec.cuda_graphs.capture_sizes,
                              spec.scheduler.max_num_seqs);

  BlockPool pool(static_cast<std::int32_t>(plan.kv_cache.num_blocks));
  const BatcherLimits limits{spec.scheduler.max_num_seqs, spec.scheduler.max_num_batched_tokens,
                             spec.scheduler.max_model_len, spec.cache.block_size};
  ContinuousBatcher batcher(limits, pool);

  std::size_t next = 0, finished = 0;
  double now = 0.0;
  long steps = 0, prefill_tokens = 0, decode_tokens = 0, real_in_graphs = 0, padded_in_graphs = 0;
  long by_mode[3] = {0, 0, 0};
  while (finished < trace.size()) {
    while (next < trace.size() && trace[next].arrival_s <= now) {
      batcher.add(static_cast<int>(next), trace[next].prompt_tokens, trace[next].output_tokens);
      ++next;
    }
    const StepBatch* step = batcher.schedule();
    if (step == nullptr) {
      if (next >= trace.size()) break;  // cannot happen: a lone request always fits
      now = trace[next].arrival_s;
      continue;
    }
    int tokens = 0, decodes = 0;
    for (const StepRequest& r : step->requests) {
      tokens += r.query_len;
      decodes += r.query_len == 1;
      (r.query_len == 1 ? decode_tokens : prefill_tokens) += r.query_len;
    }
    const int reqs = static_cast<int>(step->requests.size());
    const Dispatch d = dispatcher.dispatch(tokens, reqs, decodes == reqs);
    ++by_mode[static_cast<int>(d.mode)];
    if (d.mode != RuntimeMode::kEager) {
      real_in_graphs += tokens;
      padded_in_graphs += d.descriptor.num_tokens;
    }
    finished += batcher.complete_step().size();
    now += step_ms * 1e-3;
    ++steps;
  }

  std::printf("serve-sim (schedule only; each step modelled as %.1f ms)\n", step_ms);
  std::printf("spec %s, trace %s: %zu requests, time scale %g\n", spec.source.c_str(),
              trace_path.c_str(), trace.size(), trace_options.time_scale);
  std::printf("kv cache %lld blocks of %d (device memory %s), graph mode %.*s, %zu capture sizes\n",
              static_cast<long long>(plan.kv_cache.num_blocks), spec.cache.block_size,
              device.note.c_str(), int(to_string(dispatcher.mode()).size()),
              to_string(dispatcher.mode()).data(), dispatcher.capture_sizes().size());
  std::printf("finished %zu of %zu requests in %ld steps (%.1f s modelled)\n", finished,
              trace.size(), steps, now);
  std::printf("tokens: %ld prefill, %ld decode\n", prefill_tokens, decode_tokens);
  const double total = std::max(1L, steps);
  std::printf("steps by mode: full %ld (%.1f%%), piecewise %ld (%.1f%%), eager %ld (%.1f%%)\n",
              by_mode[2], 100.0 * by_mode[2] / total, by_mode[1], 100.0 * by_mode[1] / total,
              by_mode[0], 100.0 * by_mode[0] / total);
  std::printf("padding in graph steps: %ld real tokens run as %ld (%.1f%% waste)\n",
              real_in_graphs, padded_in_graphs,
              padded_in_graphs ? 100.0 * (padded_in_graphs - real_in_graphs) / padded_in_graphs : 0.0);
  return finished == trace.size() ? 0 : 1;
}

}  // namespace freezeframe::tools
