// freezeframe plan SPEC.yaml [--device-memory SIZE] [--budget SIZE|FRACTION] [--json FILE]
//                            [--svg FILE]
// The static memory plan of a spec, without a GPU: the deployment (tensor- and decode-context-
// parallel sizes), a table of one rank's regions (every rank plans the same), the KV cache in
// blocks, tokens and max-length sequences, the activation peak against its lower bound;
// optionally the plan as JSON and an SVG memory map. On a GPU the device memory defaults to its
// free memory.

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "arguments.h"
#include "commands.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/spec/byte_size.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe::tools {
namespace {

constexpr const char* kUsage =
    "usage: freezeframe plan SPEC.yaml [--device-memory SIZE] [--budget SIZE|FRACTION]\n"
    "                                  [--json FILE] [--svg FILE]\n"
    "  --device-memory  device memory to plan for, e.g. 141GiB or 80GB (default: the GPU's\n"
    "                   free memory, or 141GiB without a GPU)\n"
    "  --budget         overrides cache.memory_budget: a fraction in (0, 1] or a size\n"
    "  --json FILE      writes the plan as JSON\n"
    "  --svg FILE       writes an SVG memory map\n"
    "  FILE '-' is standard output, which then holds that file alone (no table)\n";

/// Runs write(stream) into the file `path`, or into standard output for "-".
template <typename Write>
void write_output(const std::string& path, std::string_view flag, Write&& write) {
  if (path == "-") {
    write(std::cout);
    std::cout.flush();
    return;
  }
  std::ofstream file(path);
  FF_CHECK(file.good(), ErrorCode::kInvalidArgument, flag, ": cannot write ", quote(path, 200));
  write(file);
}

void write_json(std::ostream& out, const EngineSpec& spec, const MemoryPlan& plan) {
  const KvCacheSummary& kv = plan.kv_cache;
  std::string checkpoint = "null";  // or the path the model section came from, as a string
  if (spec.model.checkpoint) {
    checkpoint = "\"";
    checkpoint += json_escape(spec.model.checkpoint->path);
    checkpoint += '"';
  }
  out << "{\n  \"spec\": \"" << json_escape(spec.source) << "\",\n"
      << "  \"model\": \"" << json_escape(spec.model.name) << "\",\n"
      << "  \"model_shape\": {\"num_layers\": " << spec.model.num_layers
      << ", \"hidden_size\": " << spec.model.hidden_size
      << ", \"num_heads\": " << spec.model.num_heads
      << ", \"num_kv_heads\": " << spec.model.num_kv_heads
      << ", \"head_size\": " << spec.model.head_size
      << ", \"intermediate_size\": " << spec.model.intermediate_size
      << ", \"vocab_size\": " << spec.model.vocab_size << "},\n"
      << "  \"checkpoint\": " << checkpoint << ",\n"
      << "  \"deployment\": {\"tp_world_size\": " << kv.tp_world_size
      << ", \"dcp_world_size\": " << kv.dcp_world_size
      << ", \"dcp_interleave_size\": " << kv.dcp_interleave_size
      << ", \"ranks\": " << kv.tp_world_size << ", \"regions_per_rank\": true},\n"
      << "  \"device_bytes\": " << plan.device_bytes << ",\n"
      << "  \"budget_bytes\": " << plan.capacity_bytes() << ",\n"
      << "  \"used_bytes\": " << plan.used_bytes() << ",\n"
      << "  \"alignment\": " << MemoryPlan::kAlignment << ",\n"
      << "  \"kv_cache\": {\"num_blocks\": " << kv.num_blocks
      << ", \"block_size\": " << kv.block_size << ", \"bytes_per_block\": " << kv.bytes_per_block
      << ", \"cache_layers\": " << kv.cache_layers
      << ", \"tokens_per_rank\": " << kv.tokens_per_rank
      << ", \"deployment_tokens\": " << kv.deployment_tokens
      << ", \"tp_world_size\": " << kv.tp_world_size
      << ", \"dcp_world_size\": " << kv.dcp_world_size
      << ", \"dcp_interleave_size\": " << kv.dcp_interleave_size
      << ", \"max_model_len\": " << kv.max_model_len
      << ", \"max_concurrent_sequences\": " << kv.max_concurrent_sequences << "},\n"
      << "  \"activations\": {\"peak_bytes\": " << plan.activations.peak_bytes
      << ", \"lower_bound_bytes\": " << plan.activations.lower_bound_bytes
      << ", \"num_tensors\": " << plan.activations.num_tensors
      << ", \"num_steps\": " << plan.activations.num_steps << "},\n"
      << "  \"warnings\": [";
  for (std::size_t i = 0; i < plan.warnings.size(); ++i) {
    out << (i ? ", " : "") << "\"" << json_escape(plan.warnings[i]) << "\"";
  }
  out << "],\n  \"regions\": [\n";
  const auto regions = plan.regions();
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const MemoryRegion& r = regions[i];
    out << "    {\"name\": \"" << json_escape(r.name) << "\", \"kind\": \"" << to_string(r.kind)
        << "\", \"offset\": " << r.offset << ", \"bytes\": " << r.bytes << ", \"placements\": [";
    for (std::size_t j = 0; j < r.placements.size(); ++j) {
      const Placement& p = r.placements[j];
      out << (j ? ",\n      " : "\n      ") << "{\"name\": \"" << json_escape(p.name)
          << "\", \"offset\": " << p.offset << ", \"bytes\": " << p.bytes;
      if (p.first_step >= 0) {
        out << ", \"first_step\": " << p.first_step << ", \"last_step\": " << p.last_step;
      }
      if (!p.aliases.empty()) out << ", \"aliases\": \"" << json_escape(p.aliases) << "\"";
      out << "}";
    }
    out << "]}" << (i + 1 < regions.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
}

/// Left: the arena as bands (height ∝ bytes, with a minimum so small regions stay visible).
/// Right: the activation region, program step across, offset down, one rectangle per tensor.
void write_svg(std::ostream& out, const EngineSpec& spec, const MemoryPlan& plan) {
  constexpr double kTop = 40, kHeight = 720, kBarX = 20, kBarW = 360, kMapX = 460, kMapW = 720;
  static constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                            "#edc948", "#b07aa1", "#ff9da7", "#9c755f"};
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"800\" "
         "font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<text x=\"20\" y=\"22\" font-size=\"15\">" << json_escape(spec.model.name)
      << ": memory plan, budget " << format_bytes(plan.capacity_bytes()) << " of "
      << format_bytes(plan.device_bytes) << "</text>\n";
  // Bands: each region gets at least 14 px; the rest is shared in proportion to its bytes.
  const auto regions = plan.regions();
  const double min_px = 14;
  const double spare = std::max(0.0, kHeight - min_px * double(regions.size()));
  const double total = std::max<double>(1, double(plan.capacity_bytes()));
  double y = kTop;
  for (const MemoryRegion& r : regions) {
    const double h = min_px + spare * double(r.bytes) / total;
    out << "<rect x=\"" << kBarX << "\" y=\"" << y << "\" width=\"" << kBarW << "\" height=\"" << h
        << "\" fill=\"" << kColors[int(r.kind) % 9] << "\" stroke=\"white\"/>\n"
        << "<text x=\"" << kBarX + 6 << "\" y=\"" << y + std::min(h, 24.0) / 2 + 4 << "\">"
        << json_escape(r.name) << " — " << format_bytes(r.bytes) << " @ " << r.offset
        << "</text>\n";
    y += h;
  }
  // Activations: offset × program step.
  const MemoryRegion* act = plan.find("activations");
  out << "<text x=\"" << kMapX << "\" y=\"" << kTop - 8 << "\">activations: peak "
      << format_bytes(plan.activations.peak_bytes) << ", lower bound "
      << format_bytes(plan.activations.lower_bound_bytes) << " (step →, offset ↓)</text>\n"
      << "<rect x=\"" << kMapX << "\" y=\"" << kTop << "\" width=\"" << kMapW << "\" height=\""
      << kHeight << "\" fill=\"#f4f4f4\" stroke=\"#999\"/>\n";
  if (act != nullptr && act->bytes > 0 && plan.activations.num_steps > 0) {
    const double sx = kMapW / double(plan.activations.num_steps);
    const double sy = kHeight / double(act->bytes);
    int i = 0;
    for (const Placement& p : act->placements) {
      out << "<rect x=\"" << kMapX + p.first_step * sx << "\" y=\""
          << kTop + double(p.offset - act->offset) * sy << "\" width=\""
          << std::max(1.0, (p.last_step - p.first_step + 1) * sx) << "\" height=\""
          << std::max(0.5, double(p.bytes) * sy) << "\" fill=\"" << kColors[i++ % 9]
          << "\" fill-opacity=\"0.8\"><title>" << json_escape(p.name) << " "
          << format_bytes(p.bytes) << ", steps " << p.first_step << "–" << p.last_step
          << "</title></rect>\n";
    }
  }
  out << "</svg>\n";
}

void print_plan(const EngineSpec& spec, const MemoryPlan& plan, const std::string& device_note) {
  const ModelSpec& m = spec.model;
  std::printf("spec: %s (%s)\n", printable(spec.source, 200).c_str(), printable(m.name).c_str());
  std::printf(
      "model: %d layers, hidden %d, heads %d/%d (query/kv), head %d, intermediate %d, "
      "vocab %d, %.*s%s\n",
      m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_size, m.intermediate_size,
      m.vocab_size, int(name_of(m.dtype).size()), name_of(m.dtype).data(),
      m.tie_word_embeddings ? ", tied embeddings" : "");
  // Layers without an MLP plan none: say so, so a plan of a model whose MLP is elsewhere (a
  // mixture of experts) is not taken for the whole model's.
  const auto no_mlp = std::count_if(m.layers.begin(), m.layers.end(),
                                    [](const LayerSpec& l) { return l.mlp == MlpKind::kNone; });
  if (no_mlp > 0) {
    std::printf(
        "note: %lld of %d layers have no MLP (mlp: none): no weights or activations are planned "
        "for one\n",
        static_cast<long long>(no_mlp), m.num_layers);
  }
  const auto moe = std::count_if(m.layers.begin(), m.layers.end(),
                                 [](const LayerSpec& l) { return l.mlp == MlpKind::kMoe; });
  if (moe > 0 && m.moe) {
    std::printf(
        "note: %lld of %d layers are a mixture of experts (%d experts of %d, %d a token, %d "
        "shared): planned whole, weights and activations\n",
        static_cast<long long>(moe), m.num_layers, m.moe->num_experts, m.moe->intermediate_size,
        m.moe->experts_per_token, m.moe->num_shared_experts);
  }
  if (m.checkpoint) {
    std::printf("checkpoint: %s (%s); weights: %s\n", printable(m.checkpoint->path, 200).c_str(),
                printable(m.checkpoint->architecture).c_str(),
                m.builtin_weights ? "random (model.builtin_weights)" : "the checkpoint's");
  }
  const KvCacheSummary& kv = plan.kv_cache;
  // DCP reuses the tensor-parallel ranks, so the deployment is tp.world_size GPUs.
  std::printf(
      "deployment: tp %d, dcp %d (interleave %d): %d GPU rank%s%s\n", kv.tp_world_size,
      kv.dcp_world_size, kv.dcp_interleave_size, kv.tp_world_size, kv.tp_world_size == 1 ? "" : "s",
      kv.tp_world_size == 1 ? "" : "; the plan below is one rank's, the same on every rank");
  std::printf("device memory (per rank): %s (%lld bytes, %s); budget %s (%lld bytes)\n\n",
              format_bytes(plan.device_bytes).c_str(), static_cast<long long>(plan.device_bytes),
              device_note.c_str(), format_bytes(plan.capacity_bytes()).c_str(),
              static_cast<long long>(plan.capacity_bytes()));
  std::printf("%-22s %16s %16s %12s %8s\n", "region (per rank)", "offset", "bytes", "size",
              "share");
  for (const MemoryRegion& r : plan.regions()) {
    std::printf("%-22s %16lld %16lld %12s %7.2f%%\n", r.name.c_str(),
                static_cast<long long>(r.offset), static_cast<long long>(r.bytes),
                format_bytes(r.bytes).c_str(), 100.0 * double(r.bytes) / double(plan.device_bytes));
  }
  const std::int64_t unused = plan.capacity_bytes() - plan.used_bytes();
  std::printf("%-22s %16s %16lld %12s %7.2f%%\n\n", "(unused budget)", "",
              static_cast<long long>(unused), format_bytes(unused).c_str(),
              100.0 * double(unused) / double(plan.device_bytes));
  std::printf(
      "kv cache: %lld blocks x %d tokens = %lld tokens per rank (%s per block over %d "
      "layers); %lld concurrent sequences of max length %lld",
      static_cast<long long>(kv.num_blocks), kv.block_size,
      static_cast<long long>(kv.tokens_per_rank), format_bytes(kv.bytes_per_block).c_str(),
      kv.cache_layers, static_cast<long long>(kv.max_concurrent_sequences),
      static_cast<long long>(kv.max_model_len));
  if (kv.dcp_world_size > 1) std::printf(" (DCP over %d ranks)", kv.dcp_world_size);
  // A block id names block_size · D positions spread over the DCP group.
  std::printf("\nkv capacity: %lld tokens in the deployment (%lld blocks x %d tokens x dcp %d)",
              static_cast<long long>(kv.deployment_tokens), static_cast<long long>(kv.num_blocks),
              kv.block_size, kv.dcp_world_size);
  std::printf("\nactivations: peak %s, lower bound %s, ratio %.4f (%d tensors over %d steps)\n",
              format_bytes(plan.activations.peak_bytes).c_str(),
              format_bytes(plan.activations.lower_bound_bytes).c_str(),
              plan.activations.lower_bound_bytes > 0
                  ? double(plan.activations.peak_bytes) / double(plan.activations.lower_bound_bytes)
                  : 1.0,
              plan.activations.num_tensors, plan.activations.num_steps);
  std::printf("cuda graphs: %.*s, %zu capture sizes (largest %d)\n",
              int(to_string(spec.cuda_graphs.mode).size()), to_string(spec.cuda_graphs.mode).data(),
              spec.cuda_graphs.capture_sizes.size(), spec.cuda_graphs.max_capture_size);
  if (m.fp8_linear) {
    // What fp8 projections change: the same deployment planned with them in the model dtype.
    EngineSpec unquantised = spec;
    unquantised.model.fp8_linear = false;
    const MemoryPlan base = plan_memory(unquantised, plan.device_bytes);
    const std::int64_t saved = base.region("weights").bytes - plan.region("weights").bytes;
    std::printf(
        "quantization: fp8 projections (per-channel weights, per-token inputs): weights %s, %s "
        "less than in %.*s; kv capacity %+lld tokens (%lld in %.*s)\n",
        format_bytes(plan.region("weights").bytes).c_str(), format_bytes(saved).c_str(),
        int(name_of(m.dtype).size()), name_of(m.dtype).data(),
        static_cast<long long>(plan.kv_cache.deployment_tokens - base.kv_cache.deployment_tokens),
        static_cast<long long>(base.kv_cache.deployment_tokens), int(name_of(m.dtype).size()),
        name_of(m.dtype).data());
  }
  for (const std::string& w : plan.warnings) std::printf("warning: %s\n", w.c_str());
}

}  // namespace

const std::string_view kPlanUsage = kUsage;

int run_plan(Args args) {
  std::string spec_path, json_path, svg_path;
  std::optional<std::int64_t> device_bytes;
  std::optional<std::string> budget;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&] { return take_value(args, i); };
    if (is_help(a)) {
      std::printf("%s", kUsage);
      return 0;
    } else if (a == "--device-memory") {
      device_bytes = parse_size_arg(a, value());
    } else if (a == "--budget") {
      budget = std::string(value());
    } else if (a == "--json") {
      json_path = std::string(value());
    } else if (a == "--svg") {
      svg_path = std::string(value());
    } else if (a.empty() || a[0] == '-') {
      refuse(a);
    } else {
      if (!spec_path.empty()) refuse(a, "one spec at a time");
      spec_path = std::string(a);
    }
  }
  if (spec_path.empty()) throw UsageError("no spec file given");
  if (json_path == "-" && svg_path == "-") {
    throw UsageError("--json - and --svg - both ask for standard output; give one a file");
  }
  EngineSpec spec = load_spec(spec_path);
  if (budget) {
    double fraction = 0;
    std::size_t used = 0;
    try {
      fraction = std::stod(*budget, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == budget->size() && fraction > 0 && fraction <= 1) {
      spec.cache.memory_budget = {fraction, 0};
    } else {
      spec.cache.memory_budget = {0, parse_size_arg("--budget", *budget)};
    }
    spec.locations["cache.memory_budget"] = SpecLocation{"--budget " + *budget, 0, 0};
  }
  const DeviceMemory device = device_memory(device_bytes);
  device_bytes = device.bytes;
  const std::string note = device.note;
  const MemoryPlan plan = plan_memory(spec, *device_bytes);
  if (json_path != "-" && svg_path != "-") print_plan(spec, plan, note);
  if (!json_path.empty()) {
    write_output(json_path, "--json", [&](std::ostream& out) { write_json(out, spec, plan); });
  }
  if (!svg_path.empty()) {
    write_output(svg_path, "--svg", [&](std::ostream& out) { write_svg(out, spec, plan); });
  }
  return 0;
}

}  // namespace freezeframe::tools
