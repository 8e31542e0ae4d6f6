// freezeframe bench SPEC.yaml [--batches 1,8,64,256] [--context 1024] [--iterations N]
//                  [--prefill BxN,...] [--prefill-context C]
//                  [--sample] [--backend NAME] [--device-memory SIZE] [--json FILE]
// Decode-step latency of a spec's engine per batch size, run eagerly, with piecewise graphs and
// with full graphs: every request a single-token decode over `context` tokens of KV cache
// (shuffled blocks). Each figure is the median over N steps of CUDA events around one step
// (inputs and metadata upload included) after warm-up; the host time is the median wall time
// of one step() call, by phase, in four conditions: right after synchronize(), after 200 us of
// host work following it, with the GPU still running the previous step (a serving loop that
// prepares the next step while one runs), and after waiting for the previous step by polling
// the stream instead. Also the capture time and the graphs' memory.
// Prefill steps (--prefill): B requests of N new tokens after C cached ones, timed eagerly and
// in the graph mode the dispatcher runs them in, with their model TFLOP/s (step_flops.h).
// With --sample the engine draws each request's next token on the device (kDefaultSampling:
// temperature 0.8, top-k 40, top-p 0.95), and the op breakdown shows the draw's cost per step.
// A spec with tp.world_size T > 1 runs as T ranks on this GPU (a LocalGroup), the op breakdown
// showing the collectives (all_reduce, gather_logits).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "arguments.h"
#include "bench_steps.h"
#include "commands.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/device.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/runtime/local_group.h"
#include "freezeframe/engine/spec/spec.h"
#include "prefill_shapes.h"
#include "step_flops.h"

namespace freezeframe::tools {
namespace {

constexpr const char* kUsage =
    "usage: freezeframe bench SPEC.yaml [--batches LIST] [--context N] [--iterations N]\n"
    "                         [--prefill LIST] [--prefill-context C] [--sample]\n"
    "                         [--backend NAME] [--device-memory SIZE] [--json FILE]\n"
    "  --batches LIST     decode batch sizes (default 1,8,64,256; none when only --prefill\n"
    "                     is given)\n"
    "  --context N        tokens of each request, the new one included (default 1024)\n"
    "  --iterations N     timed steps per figure, after warm-up (default 50)\n"
    "  --prefill LIST     prefill steps, comma-separated BxN: B requests of N new tokens\n"
    "                     each (e.g. 1x8192,4x2048,16x512,64x128); each is timed eagerly\n"
    "                     and in the graph mode that runs it, with its op breakdown and\n"
    "                     model TFLOP/s\n"
    "  --prefill-context C  tokens cached before the new ones of each prefill request\n"
    "                     (default 0)\n"
    "  --sample           the engine samples each request's next token on the device\n"
    "                     (temperature 0.8, top-k 40, top-p 0.95, a seed per request)\n"
    "  --backend NAME     run every layer's attention on this backend\n"
    "  --device-memory    device memory the plan assumes (default: the GPU's free memory)\n"
    "  --json FILE        writes the figures as JSON (decode rows in \"results\", prefill\n"
    "                     rows in \"prefill\"; serve-sim --cost-model reads both)\n"
    "A spec with tp.world_size T > 1 runs its T ranks on this GPU (a local group), each with\n"
    "1/T of the device memory; the figures are rank 0's.\n";

std::vector<int> parse_list(std::string_view flag, std::string_view text) {
  std::vector<int> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(static_cast<int>(parse_count(flag, text.substr(at, comma - at))));
    at = comma + 1;
  }
  return out;
}

struct BenchFigures {
  int context = 0, prefill_context = 0, iterations = 0;
  bool sample = false;
  double weight_bytes = 0.0;
  std::vector<Row> decode;
  std::vector<PrefillRow> prefill;
};

void write_json(const std::string& path, const Engine& engine, const BenchFigures& f) {
  std::ofstream out(path);
  FF_CHECK(out.good(), ErrorCode::kInvalidArgument, "--json: cannot write ", quote(path, 200));
  const CaptureReport& report = engine.capture_report();
  out << "{\n  \"spec\": \"" << json_escape(engine.spec().source)
      << "\",\n  \"sample_tokens\": " << (engine.samples() ? "true" : "false")
      << ",\n  \"model\": \"" << json_escape(engine.spec().model.name) << "\",\n  \"backend\": \""
      << json_escape(engine.spec().model.layers.front().backend)
      << "\",\n  \"context\": " << f.context << ",\n  \"iterations\": " << f.iterations
      << ",\n  \"capture_total_ms\": " << report.total_ms
      << ",\n  \"graphs\": " << engine.num_graphs()
      << ",\n  \"executables\": " << engine.num_executables()
      << ",\n  \"graph_device_bytes\": " << report.graph_device_bytes
      << ",\n  \"warmup_device_bytes\": " << report.warmup_device_bytes
      << ",\n  \"warmup_ms\": " << report.warmup_ms << ",\n  \"weight_bytes\": " << f.weight_bytes
      << ",\n  \"results\": [";
  for (std::size_t i = 0; i < f.decode.size(); ++i) {
    const Row& r = f.decode[i];
    out << (i ? ",\n    " : "\n    ") << "{\"batch\": " << r.batch << ", \"context\": " << f.context
        << ", \"run_tokens\": " << r.run_tokens << ", \"eager_ms\": " << r.ms[0]
        << ", \"piecewise_ms\": " << r.ms[1] << ", \"full_ms\": " << r.ms[2]
        << ", \"host_us_per_step\": " << r.host_us[0]
        << ", \"host_validate_us\": " << r.host[0].validate_us
        << ", \"host_upload_us\": " << r.host[0].upload_us
        << ", \"host_launch_us\": " << r.host[0].launch_us
        << ", \"host_us_warm\": " << r.host_us[int(HostCondition::kWarm)]
        << ", \"host_us_gpu_busy\": " << r.host_us[int(HostCondition::kGpuBusy)]
        << ", \"host_us_after_poll\": " << r.host_us[int(HostCondition::kAfterPoll)]
        << ", \"ops\": \"" << json_escape(r.breakdown.text())
        << "\", \"breakdown\": " << r.breakdown.json() << "}";
  }
  out << (f.decode.empty() ? "]" : "\n  ]") << ",\n  \"prefill_context\": " << f.prefill_context
      << ",\n  \"prefill\": [";
  for (std::size_t i = 0; i < f.prefill.size(); ++i) {
    const PrefillRow& r = f.prefill[i];
    out << (i ? ",\n    " : "\n    ") << "{\"b\": " << r.shape.b << ", \"n\": " << r.shape.n
        << ", \"context\": " << f.prefill_context << ", \"tokens\": " << r.shape.b * r.shape.n
        << ", \"run_tokens\": " << r.run_tokens << ", \"mode\": \"" << to_string(r.mode)
        << "\", \"eager_ms\": " << r.ms[0] << ", \"piecewise_ms\": " << r.ms[1]
        << ", \"full_ms\": " << r.ms[2] << ", \"ms\": " << r.dispatched_ms()
        << ", \"dense_flops\": " << r.flops.dense << ", \"attention_flops\": " << r.flops.attention
        << ", \"tflops\": " << r.tflops() << ", \"breakdown\": " << r.breakdown.json() << "}";
  }
  out << (f.prefill.empty() ? "]" : "\n  ]") << "\n}\n";
}

}  // namespace

const std::string_view kBenchUsage = kUsage;

/// The bench on one rank's engine: every figure measured, and printed to `out` (rank 0's:
/// stdout; the other ranks of a tensor-parallel deployment, which must make the same calls,
/// print nowhere) with the JSON written when `json_path` is given. `meet` is called before the
/// first row and after each: the ranks of a local group meet on the host there, so every rank
/// times the same row at once and rank 0's figures are of the deployment's steps.
void bench_engine(
    Engine& engine, const std::vector<int>& batches, const std::vector<PrefillShape>& prefill,
    BenchFigures f, const std::string& json_path, std::FILE* out,
    const std::function<void()>& meet = [] {}) {
  meet();
  const CaptureReport& report = engine.capture_report();
  FF_CHECK(report.failure.empty(), ErrorCode::kCudaError, "capture failed: ", report.failure);
  // The KV blocks are known once planned.
  for (const PrefillShape& shape : prefill) {
    check_prefill_shape(shape, f.prefill_context, engine.limits(), engine.spec());
  }
  const MemoryRegion* weights = engine.plan().find("weights");
  f.weight_bytes = weights != nullptr ? static_cast<double>(weights->bytes) : 0.0;

  std::fprintf(out, "spec %s (%s), backend %s, context %d, %d iterations; graph mode %.*s%s\n",
               printable(engine.spec().source, 200).c_str(),
               printable(engine.spec().model.name).c_str(),
               printable(engine.spec().model.layers.front().backend).c_str(), f.context,
               f.iterations, int(to_string(engine.dispatcher().mode()).size()),
               to_string(engine.dispatcher().mode()).data(),
               f.sample ? "; tokens sampled on the device" : "");
  std::fprintf(out,
               "capture: %zu descriptors, %d graphs on %d executables in %.1f ms (warm-up %.1f ms "
               "of it); graph memory %.2f MiB (kernels loaded by the warm-up: %.2f MiB)\n",
               report.captured.size(), engine.num_graphs(), engine.num_executables(),
               report.total_ms, report.warmup_ms, report.graph_device_bytes / 1048576.0,
               report.warmup_device_bytes / 1048576.0);
  std::mt19937 rng(1);
  if (!batches.empty()) {
    std::fprintf(out, "%6s %10s %13s %9s %14s %16s\n", "batch", "eager ms", "piecewise ms",
                 "full ms", "host us/step", "weights TB/s");
  }
  for (const int b : batches) {
    const Row row = time_decode(engine, b, f.context, f.iterations, rng);
    meet();
    const double best = row.ms[int(RuntimeMode::kFull)] > 0 ? row.ms[int(RuntimeMode::kFull)]
                                                            : row.ms[int(RuntimeMode::kPiecewise)];
    std::fprintf(out, "%6d %10s %13s %9s %14.1f %16.2f\n", b, cell(row.ms[0]).c_str(),
                 cell(row.ms[1]).c_str(), cell(row.ms[2]).c_str(), row.host_us[0],
                 best > 0 ? f.weight_bytes / (best * 1e-3) / 1e12 : 0.0);
    f.decode.push_back(row);
  }
  if (!f.decode.empty()) {
    std::fprintf(out,
                 "host time per step (median, us): validate + upload + launch = step() call\n");
  }
  for (const Row& r : f.decode) {
    for (int c = 0; c < kHostConditions; ++c) {
      const StepHostTimes& h = r.host[c];
      std::fprintf(out, "%6d %-10s %7.1f + %7.1f + %7.1f = %7.1f\n", r.batch,
                   kHostConditionNames[c], h.validate_us, h.upload_us, h.launch_us, r.host_us[c]);
    }
  }
  if (!prefill.empty()) {
    std::fprintf(out,
                 "prefill after %d cached tokens per request (TFLOP/s in the dispatched mode)\n",
                 f.prefill_context);
    std::fprintf(out, "%11s %10s %13s %9s %10s\n", "b x n", "eager ms", "piecewise ms", "full ms",
                 "TFLOP/s");
  }
  for (const PrefillShape& shape : prefill) {
    const PrefillRow row = time_prefill(engine, shape, f.prefill_context, f.iterations, rng);
    meet();
    const std::string name = std::to_string(shape.b) + "x" + std::to_string(shape.n);
    std::fprintf(out, "%11s %10s %13s %9s %10.1f\n", name.c_str(), cell(row.ms[0]).c_str(),
                 cell(row.ms[1]).c_str(), cell(row.ms[2]).c_str(), row.tflops());
    f.prefill.push_back(row);
  }
  std::fprintf(out, "device time by op, eager with events between ops (ms)\n");
  for (const Row& r : f.decode) std::fprintf(out, "%11d %s\n", r.batch, r.breakdown.text().c_str());
  for (const PrefillRow& r : f.prefill) {
    const std::string name = std::to_string(r.shape.b) + "x" + std::to_string(r.shape.n);
    std::fprintf(out, "%11s %s\n", name.c_str(), r.breakdown.text().c_str());
  }
  if (!json_path.empty()) write_json(json_path, engine, f);
}

int run_bench(Args args) {
  EngineArgs common;
  std::vector<int> batches = {1, 8, 64, 256};
  std::vector<PrefillShape> prefill;
  bool batches_given = false;
  BenchFigures f;
  f.context = 1024, f.iterations = 50;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (is_help(a)) {
      std::printf("%s", kUsage);
      return 0;
    } else if (a == "--batches") {
      batches = parse_list(a, take_value(args, i));
      batches_given = true;
    } else if (a == "--context") {
      f.context = static_cast<int>(parse_count(a, take_value(args, i)));
    } else if (a == "--iterations") {
      f.iterations = static_cast<int>(parse_count(a, take_value(args, i)));
    } else if (a == "--prefill") {
      prefill = parse_prefill_shapes(a, take_value(args, i));
    } else if (a == "--sample") {
      f.sample = true;
    } else if (a == "--prefill-context") {
      f.prefill_context =
          static_cast<int>(parse_whole(a, take_value(args, i), 0, std::numeric_limits<int>::max()));
    } else if (!common.take(args, i)) {
      refuse(a);
    }
  }
  common.require_spec();
  if (!prefill.empty() && !batches_given) batches.clear();
  // Ranks sharing the GPU get a hardware queue each (LocalGroup::prepare_process: their work
  // overlaps), decided before CUDA starts: only the spec's world sizes are read here, as
  // loading it asks the GPU (a spec that fails is reported below, after the GPU's check).
  const std::optional<ParallelSizes> sizes = read_parallel_sizes(common.spec_path);
  if (sizes && sizes->tp > 1) LocalGroup::prepare_process();
  // A GPU this build has no code for is refused before the spec, whose backends query the
  // device; the prefill shapes are checked against the spec's limits before any GPU work.
  if (has_gpu()) require_usable_gpu();
  EngineSpec spec = common.load();
  for (const PrefillShape& shape : prefill) {
    check_prefill_shape(shape, f.prefill_context, DeploymentGeometry::of(spec).limits, spec);
  }
  require_usable_gpu();
  EngineOptions options;
  options.device_memory = device_memory(common.device_bytes).bytes;
  options.sample_tokens = f.sample;
  const int ranks = spec.tp.world_size, dcp = spec.dcp.world_size;
  if (ranks == 1) {
    Engine engine(std::move(spec), options);
    bench_engine(engine, batches, prefill, f, common.json_path, stdout);
    return 0;
  }
  // A tensor-parallel spec runs as that many ranks on this GPU (a LocalGroup), each an engine
  // on its own thread with its share of the memory; rank 0's figures are the deployment's
  // (its steps wait for the others at every collective), and its op breakdown shows the
  // collectives.
  options.device_memory /= ranks;
  std::printf(
      "tp %d: every rank an engine on this GPU (a local group), with 1/%d of its memory; "
      "the figures are rank 0's\n",
      ranks, ranks);
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> nowhere(std::fopen("/dev/null", "w"),
                                                                &std::fclose);
  FF_CHECK(nowhere != nullptr, ErrorCode::kInternal, "cannot open /dev/null");
  LocalGroup group(ranks);
  std::barrier<> ranks_meet(ranks);
  group.run([&](int r) {
    try {
      EngineOptions own = options;
      own.communicator = &group.rank(r);
      // DCP groups: D consecutive ranks each (the tensor-parallel group itself when D = T).
      if (dcp > 1) own.dcp_communicator = &group.rank(r, dcp);
      Engine engine(spec, own);
      bench_engine(engine, batches, prefill, f, r == 0 ? common.json_path : std::string(),
                   r == 0 ? stdout : nowhere.get(), [&] { ranks_meet.arrive_and_wait(); });
      ranks_meet.arrive_and_wait();  // no rank frees its engine while another still times
    } catch (...) {
      ranks_meet.arrive_and_drop();  // the others go on to fail in their next collective
      throw;
    }
  });
  return 0;
}

}  // namespace freezeframe::tools
