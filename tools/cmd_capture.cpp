// freezeframe capture SPEC.yaml [--device-memory SIZE] [--backend NAME] [--json FILE]
// Builds the engine of a spec on the GPU (uploading a checkpoint's weights with a progress bar
// when the spec runs them), capturing every graph the spec asks for (largest first, with a
// progress bar), and prints per batch descriptor the mode, graphs, node count,
// capture and instantiate time; then the totals and the device memory the graphs took.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "arguments.h"
#include "commands.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/core/device.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe::tools {
namespace {

constexpr const char* kUsage =
    "usage: freezeframe capture SPEC.yaml [--device-memory SIZE] [--backend NAME] [--json FILE]\n"
    "  --device-memory  device memory the plan assumes (default: the GPU's free memory)\n"
    "  --backend NAME   run every layer's attention on this backend\n"
    "  --json FILE      writes every captured descriptor and the totals as JSON\n";

void progress_bar(int done, int total) {
  constexpr int kWidth = 40;
  const int filled = total > 0 ? done * kWidth / total : kWidth;
  std::fprintf(stderr, "\rcapturing [%s%s] %d/%d", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\n");
}

void weight_bar(std::int64_t done, std::int64_t total) {
  constexpr int kWidth = 40;
  const int filled = total > 0 ? static_cast<int>(done * kWidth / total) : kWidth;
  std::fprintf(stderr, "\rloading weights [%s%s] %.1f/%.1f MiB", std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), done / 1048576.0, total / 1048576.0);
  if (done == total) std::fprintf(stderr, "\n");
}

}  // namespace

const std::string_view kCaptureUsage = kUsage;

int run_capture(Args args) {
  EngineArgs common;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (is_help(a)) {
      std::printf("%s", kUsage);
      return 0;
    } else if (!common.take(args, i)) {
      refuse(a);
    }
  }
  common.require_spec();
  require_usable_gpu();
  EngineOptions options;
  options.device_memory = device_memory(common.device_bytes).bytes;
  options.capture_progress = progress_bar;
  options.weight_progress = weight_bar;  // a checkpoint's weights (model.builtin_weights false)
  const Engine engine(common.load(), options);
  const CaptureReport& report = engine.capture_report();

  std::printf("spec %s (%s): graph mode %.*s, %zu capture sizes, %d layers\n",
              printable(engine.spec().source, 200).c_str(),
              printable(engine.spec().model.name).c_str(),
              int(to_string(engine.dispatcher().mode()).size()),
              to_string(engine.dispatcher().mode()).data(),
              engine.dispatcher().capture_sizes().size(), engine.spec().model.num_layers);
  if (!report.failure.empty()) {
    std::printf("capture FAILED, the engine runs eagerly: %s\n", report.failure.c_str());
    return 1;
  }
  std::printf("%-30s %-10s %7s %8s %11s %15s %10s\n", "descriptor", "mode", "graphs", "nodes",
              "capture ms", "instantiate ms", "MiB");
  double capture_ms = 0, instantiate_ms = 0;
  std::size_t nodes = 0;
  for (const CapturedGraphInfo& c : report.captured) {
    std::printf("%-30s %-10.*s %7d %8zu %11.2f %15.2f %10.2f\n", c.descriptor.describe().c_str(),
                int(to_string(c.mode).size()), to_string(c.mode).data(), c.graphs, c.nodes,
                c.capture_ms, c.instantiate_ms, c.device_bytes / 1048576.0);
    capture_ms += c.capture_ms;
    instantiate_ms += c.instantiate_ms;
    nodes += c.nodes;
  }
  std::printf(
      "total: %zu descriptors, %d graphs on %d executables, %zu nodes; capture %.1f ms"
      " + instantiate %.1f ms + warm-up %.1f ms = %.1f ms of %.1f ms wall\n",
      report.captured.size(), engine.num_graphs(), engine.num_executables(), nodes, capture_ms,
      instantiate_ms, report.warmup_ms, capture_ms + instantiate_ms + report.warmup_ms,
      report.total_ms);
  std::printf(
      "graph memory: %.2f MiB (free device memory after warm-up minus after capture); "
      "the warm-up loaded %.2f MiB of kernels\n",
      report.graph_device_bytes / 1048576.0, report.warmup_device_bytes / 1048576.0);
  // Why piecewise graphs did not join an executable of their group (other shapes), most
  // frequent first.
  std::vector<std::pair<int, std::string>> refused;
  for (const auto& [why, count] : report.refused_updates) refused.emplace_back(count, why);
  std::sort(refused.rbegin(), refused.rend());
  for (std::size_t i = 0; i < refused.size() && i < 24; ++i) {
    std::printf("executable update refused %6d x: %s\n", refused[i].first,
                refused[i].second.c_str());
  }

  if (!common.json_path.empty()) {
    std::ofstream out(common.json_path);
    FF_CHECK(out.good(), ErrorCode::kInvalidArgument, "--json: cannot write ",
             quote(common.json_path, 200));
    out << "{\n  \"spec\": \"" << json_escape(engine.spec().source) << "\",\n  \"mode\": \""
        << to_string(engine.dispatcher().mode()) << "\",\n  \"graphs\": " << engine.num_graphs()
        << ",\n  \"executables\": " << engine.num_executables() << ",\n  \"nodes\": " << nodes
        << ",\n  \"capture_ms\": " << capture_ms << ",\n  \"instantiate_ms\": " << instantiate_ms
        << ",\n  \"warmup_ms\": " << report.warmup_ms << ",\n  \"total_ms\": " << report.total_ms
        << ",\n  \"graph_device_bytes\": " << report.graph_device_bytes
        << ",\n  \"warmup_device_bytes\": " << report.warmup_device_bytes << ",\n  \"captured\": [";
    for (std::size_t i = 0; i < report.captured.size(); ++i) {
      const CapturedGraphInfo& c = report.captured[i];
      out << (i ? ",\n    " : "\n    ") << "{\"descriptor\": \"" << c.descriptor.describe()
          << "\", \"mode\": \"" << to_string(c.mode) << "\", \"graphs\": " << c.graphs
          << ", \"nodes\": " << c.nodes << ", \"capture_ms\": " << c.capture_ms
          << ", \"instantiate_ms\": " << c.instantiate_ms
          << ", \"device_bytes\": " << c.device_bytes << "}";
    }
    out << "\n  ]\n}\n";
  }
  return 0;
}

}  // namespace freezeframe::tools
