// Reading a spec: structure and types first (SpecReader), then defaults, then the checks that
// need several fields or the backend registry. Every problem is collected; the spec is
// returned only when there are none.

#include "freezeframe/engine/spec/spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "freezeframe/backends/registry.h"
#include "freezeframe/core/error.h"
#include "freezeframe/engine/spec/byte_size.h"
#include "freezeframe/engine/model/layer_params.h"
#include "spec/spec_reader.h"

namespace freezeframe {

using spec_detail::join_path;
using spec_detail::SpecReader;

std::int64_t MemoryBudget::resolve(std::int64_t device_bytes) const {
  if (bytes > 0) return bytes;
  return static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(device_bytes)));
}

std::string EngineSpec::where(std::string_view path) const {
  std::string key(path);
  while (true) {
    if (auto it = locations.find(key); it != locations.end()) {
      const SpecLocation& at = it->second;
      if (at.line > 0) {
        return at.file + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " +
               std::string(path);
      }
      // A value set outside the file (a command-line override) names where it came from.
      if (!at.file.empty() && at.file != source) return at.file + ": " + std::string(path);
    }
    const std::size_t dot = key.rfind('.');
    if (dot == std::string::npos) break;
    key.resize(dot);
  }
  return source + ": " + std::string(path);
}

namespace {

constexpr std::int64_t kMaxInt = 1 << 30;
// Upper bounds well above any real model that keep every byte count of the plan inside int64
// (e.g. layers · intermediate · hidden · 12 bytes < 2^63) and block tables inside int.
constexpr std::int64_t kMaxWidth = 1 << 18;         // hidden_size
constexpr std::int64_t kMaxIntermediate = 1 << 22;  // intermediate_size
constexpr std::int64_t kMaxVocab = 1 << 24;
constexpr std::int64_t kMaxPositions = 1 << 28;     // max_position_embeddings, max_model_len

const std::vector<std::string> kAttentionTypes = {"decoder", "encoder", "encoder_only",
                                                  "encoder_decoder"};
const std::vector<std::string> kMlpKinds = {"gated_silu", "none"};
const std::vector<std::string> kModelDTypes = {"bf16", "f16", "f32", "bfloat16", "float16",
                                               "float32"};
const std::vector<std::string> kCacheDTypes = {"auto",     "bf16",     "f16",     "fp8",
                                               "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"};
const std::vector<std::string> kSharings = {"across_sizes", "across_layers", "none", "true",
                                            "false"};
const std::vector<std::string> kGraphModes = {"none", "piecewise", "full", "full_decode_only",
                                              "full_and_piecewise"};

MlpKind parse_mlp(const std::string& s) { return s == "none" ? MlpKind::kNone : MlpKind::kGatedSilu; }

/// The per-layer fields an override may set; unset ones keep the model-wide value.
struct LayerOverride {
  std::optional<AttentionType> type;
  std::optional<std::string> backend;
  std::optional<int> sliding_window;
  std::optional<float> logits_soft_cap;
  std::optional<bool> alibi;
  std::optional<int> kv_sharing_target;
  std::optional<MlpKind> mlp;
  std::optional<int> intermediate_size;
};

class SpecParser {
 public:
  SpecParser(EngineSpec& spec, std::string file) : spec_(spec), r_(spec, std::move(file)) {}

  void parse(const YAML::Node& root);
  [[nodiscard]] const std::vector<std::string>& problems() const { return r_.problems(); }

 private:
  void parse_model(const YAML::Node& m);
  LayerOverride parse_layer_fields(const YAML::Node& map, const std::string& path);
  void parse_layer_overrides(const YAML::Node& list);
  void parse_cache(const YAML::Node& c);
  void parse_scheduler(const YAML::Node& s);
  void parse_cuda_graphs(const YAML::Node& g);
  void parse_dcp(const YAML::Node& d);
  void check_layers();
  void check_dcp();
  void resolve_capture_sizes();
  SpecLocation at(std::string_view path) const {
    auto it = spec_.locations.find(std::string(path));
    if (it != spec_.locations.end()) return it->second;
    return root_location_;
  }
  void problem(std::string_view path, std::string message) {
    r_.problem_at(at(path), path, std::move(message));
  }
  /// A problem of one layer; the same problem of several layers is reported once, listing them.
  void layer_problem(const std::string& path, int layer, const std::string& message) {
    auto key = std::make_pair(path, message);
    if (layer_problems_.find(key) == layer_problems_.end()) layer_problem_order_.push_back(key);
    layer_problems_[key].push_back(layer);
  }
  void flush_layer_problems();

  EngineSpec& spec_;
  SpecReader r_;
  SpecLocation root_location_;
  // Fields whose reading failed: later cross-checks skip them instead of piling up noise.
  bool model_ok_ = true;
  std::vector<std::pair<std::vector<int>, LayerOverride>> overrides_;
  std::vector<std::string> override_paths_;
  LayerOverride defaults_;
  std::vector<int> window_pattern_;
  YAML::Node capture_sizes_node_{YAML::NodeType::Undefined};
  std::optional<int> max_capture_size_;
  std::optional<int> head_size_given_;
  std::optional<int> kv_heads_given_;
  std::map<std::pair<std::string, std::string>, std::vector<int>> layer_problems_;
  std::vector<std::pair<std::string, std::string>> layer_problem_order_;
};

void SpecParser::flush_layer_problems() {
  for (const auto& key : layer_problem_order_) {
    const std::vector<int>& layers = layer_problems_[key];
    // "layer 3", or runs such as "layers 0..3, 7".
    std::string who = layers.size() == 1 ? "layer " : "layers ";
    for (std::size_t i = 0; i < layers.size();) {
      std::size_t j = i;
      while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
      who += (i ? ", " : "") + std::to_string(layers[i]);
      if (j > i) who += ".." + std::to_string(layers[j]);
      i = j + 1;
    }
    problem(key.first, who + ": " + key.second);
  }
}

void SpecParser::parse(const YAML::Node& root) {
  root_location_ = r_.location(root);
  if (!root.IsMap()) {
    r_.problem(root, "", "a spec is a mapping with the sections model, cache, scheduler, "
                         "cuda_graphs and dcp");
    return;
  }
  r_.check_keys(root, "", {"model", "cache", "scheduler", "cuda_graphs", "dcp"});
  const YAML::Node model = SpecReader::child(root, "model");
  if (!model.IsDefined()) {
    r_.problem(root, "model", "is required but missing");
    return;
  }
  if (!r_.expect_map(model, "model")) return;
  parse_model(model);
  const YAML::Node cache = SpecReader::child(root, "cache");
  if (r_.expect_map(cache, "cache")) parse_cache(cache);
  const YAML::Node scheduler = SpecReader::child(root, "scheduler");
  if (r_.expect_map(scheduler, "scheduler")) parse_scheduler(scheduler);
  const YAML::Node graphs = SpecReader::child(root, "cuda_graphs");
  if (r_.expect_map(graphs, "cuda_graphs")) parse_cuda_graphs(graphs);
  const YAML::Node dcp = SpecReader::child(root, "dcp");
  if (r_.expect_map(dcp, "dcp")) parse_dcp(dcp);

  // Defaults that depend on other fields.
  SchedulerSpec& s = spec_.scheduler;
  if (s.max_model_len == 0) {
    s.max_model_len = spec_.model.max_position_embeddings;
    if (s.max_model_len == 0) {
      problem("scheduler.max_model_len",
              "is required when model.max_position_embeddings is not given");
    }
  } else if (spec_.model.max_position_embeddings > 0 &&
             s.max_model_len > spec_.model.max_position_embeddings) {
    problem("scheduler.max_model_len",
            "is " + std::to_string(s.max_model_len) + ", longer than the model's " +
                "max_position_embeddings " + std::to_string(spec_.model.max_position_embeddings));
  }
  if (s.max_num_batched_tokens < s.max_num_seqs) {
    problem("scheduler.max_num_batched_tokens",
            "is " + std::to_string(s.max_num_batched_tokens) +
                ", fewer than scheduler.max_num_seqs " + std::to_string(s.max_num_seqs) +
                ": a step must fit one token of every sequence");
  }
  resolve_capture_sizes();
  if (model_ok_) check_layers();
  check_dcp();
}

void SpecParser::parse_model(const YAML::Node& m) {
  r_.check_keys(m, "model",
                {"name", "num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_size",
                 "intermediate_size", "vocab_size", "tie_word_embeddings", "dtype", "rope_theta",
                 "rms_norm_eps", "max_position_embeddings", "builtin_weights", "mlp",
                 "attention", "mla", "layers"});
  ModelSpec& model = spec_.model;
  if (auto v = r_.read_string(m, "name", "model")) model.name = *v;
  auto required_int = [&](std::string_view key, std::int64_t min, std::int64_t max) -> int {
    auto v = r_.read_int(m, key, "model", min, max);
    if (!v) {
      if (!SpecReader::child(m, key).IsDefined()) r_.missing(m, join_path("model", key));
      model_ok_ = false;
      return 0;
    }
    return static_cast<int>(*v);
  };
  model.num_layers = required_int("num_layers", 1, 4096);
  model.hidden_size = required_int("hidden_size", 1, kMaxWidth);
  model.num_heads = required_int("num_heads", 1, 4096);
  if (SpecReader::child(m, "num_kv_heads").IsDefined()) {
    if (auto v = r_.read_int(m, "num_kv_heads", "model", 1, 4096)) {
      kv_heads_given_ = static_cast<int>(*v);
    } else {
      model_ok_ = false;
    }
  }
  if (SpecReader::child(m, "head_size").IsDefined()) {
    if (auto v = r_.read_int(m, "head_size", "model", 1, 4096)) {
      head_size_given_ = static_cast<int>(*v);
    } else {
      model_ok_ = false;
    }
  }
  if (auto v = r_.read_int(m, "intermediate_size", "model", 1, kMaxIntermediate)) {
    model.intermediate_size = static_cast<int>(*v);
  }
  if (auto v = r_.read_bool(m, "builtin_weights", "model")) model.builtin_weights = *v;
  if (auto v = r_.read_int(m, "vocab_size", "model", 1, kMaxVocab)) {
    model.vocab_size = static_cast<int>(*v);
  } else if (!SpecReader::child(m, "vocab_size").IsDefined() && model.builtin_weights) {
    r_.problem(m, "model.vocab_size", "is required when model.builtin_weights is true");
  }
  if (auto v = r_.read_bool(m, "tie_word_embeddings", "model")) model.tie_word_embeddings = *v;
  if (auto v = r_.read_choice(m, "dtype", "model", kModelDTypes)) model.dtype = *parse_dtype(*v);
  if (auto v = r_.read_number(m, "rope_theta", "model", 0, 1e12, true)) {
    model.rope_theta = static_cast<float>(*v);
  }
  if (auto v = r_.read_number(m, "rms_norm_eps", "model", 0, 1, true)) {
    model.rms_norm_eps = static_cast<float>(*v);
  }
  if (auto v = r_.read_int(m, "max_position_embeddings", "model", 1, kMaxPositions)) {
    model.max_position_embeddings = *v;
  }
  if (auto v = r_.read_choice(m, "mlp", "model", kMlpKinds)) defaults_.mlp = parse_mlp(*v);

  const YAML::Node attention = SpecReader::child(m, "attention");
  if (r_.expect_map(attention, "model.attention")) {
    r_.check_keys(attention, "model.attention",
                  {"type", "backend", "sliding_window", "sliding_window_pattern",
                   "logits_soft_cap", "alibi"});
    const LayerOverride d = parse_layer_fields(attention, "model.attention");
    defaults_.type = d.type;
    defaults_.backend = d.backend;
    defaults_.sliding_window = d.sliding_window;
    defaults_.logits_soft_cap = d.logits_soft_cap;
    defaults_.alibi = d.alibi;
    const YAML::Node pattern = SpecReader::child(attention, "sliding_window_pattern");
    if (pattern.IsDefined()) {
      const std::string path = "model.attention.sliding_window_pattern";
      r_.remember(path, pattern);
      if (!pattern.IsSequence() || pattern.size() == 0) {
        r_.problem(pattern, path, "expected a non-empty list of windows (0 = full attention), "
                                  "applied to the layers in turn");
      } else {
        for (std::size_t i = 0; i < pattern.size(); ++i) {
          auto w = r_.as_int(pattern[i], path + "[" + std::to_string(i) + "]", 0, kMaxInt);
          window_pattern_.push_back(w ? static_cast<int>(*w) : 0);
        }
        if (d.sliding_window) {
          r_.problem(pattern, path, "set sliding_window or sliding_window_pattern, not both");
        }
      }
    }
  }

  const YAML::Node mla = SpecReader::child(m, "mla");
  if (r_.expect_map(mla, "model.mla")) {
    r_.check_keys(mla, "model.mla",
                  {"kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                   "v_head_dim"});
    MlaSpec spec;
    auto need = [&](std::string_view key) -> int {
      auto v = r_.read_int(mla, key, "model.mla", 1, 4096);
      if (!v) {
        if (!SpecReader::child(mla, key).IsDefined()) r_.missing(mla, join_path("model.mla", key));
        model_ok_ = false;
        return 0;
      }
      return static_cast<int>(*v);
    };
    spec.kv_lora_rank = need("kv_lora_rank");
    spec.qk_nope_head_dim = need("qk_nope_head_dim");
    spec.qk_rope_head_dim = need("qk_rope_head_dim");
    spec.v_head_dim = need("v_head_dim");
    if (auto v = r_.read_int(mla, "q_lora_rank", "model.mla", 0, kMaxWidth)) {
      spec.q_lora_rank = static_cast<int>(*v);
    }
    model.mla = spec;
  }

  const YAML::Node layers = SpecReader::child(m, "layers");
  if (layers.IsDefined()) parse_layer_overrides(layers);
}

LayerOverride SpecParser::parse_layer_fields(const YAML::Node& map, const std::string& path) {
  LayerOverride o;
  if (auto v = r_.read_choice(map, "type", path, kAttentionTypes)) {
    o.type = parse_attention_type(*v);
  }
  if (auto v = r_.read_string(map, "backend", path)) {
    o.backend = *v;
    const BackendRegistry& registry = BackendRegistry::global();
    if (!registry.contains(*v)) {
      const std::vector<std::string> names = registry.names();
      std::string list;
      for (const std::string& n : names) (list += list.empty() ? "" : ", ") += n;
      std::string message = "unknown attention backend '" + *v + "'; registered: " + list;
      if (const std::string hint = spec_detail::closest_match(*v, names); !hint.empty()) {
        message += " (did you mean '" + hint + "'?)";
      }
      r_.problem(SpecReader::child(map, "backend"), join_path(path, "backend"), message);
      o.backend.reset();
      model_ok_ = false;
    }
  }
  if (auto v = r_.read_int(map, "sliding_window", path, 0, kMaxInt)) {
    o.sliding_window = static_cast<int>(*v);
  }
  if (auto v = r_.read_number(map, "logits_soft_cap", path, 0, 1e6)) {
    o.logits_soft_cap = static_cast<float>(*v);
  }
  if (auto v = r_.read_bool(map, "alibi", path)) o.alibi = *v;
  return o;
}

void SpecParser::parse_layer_overrides(const YAML::Node& list) {
  const std::string base = "model.layers";
  r_.remember(base, list);
  if (!list.IsSequence()) {
    r_.problem(list, base, "expected a list of per-layer overrides, each with 'layers'");
    return;
  }
  const int num_layers = spec_.model.num_layers;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string path = base + "[" + std::to_string(i) + "]";
    if (!r_.expect_map(item, path)) {
      if (!item.IsMap()) r_.problem(item, path, "expected a mapping with 'layers'");
      continue;
    }
    r_.check_keys(item, path,
                  {"layers", "type", "backend", "sliding_window", "logits_soft_cap", "alibi",
                   "kv_sharing_target", "mlp", "intermediate_size"});
    LayerOverride o = parse_layer_fields(item, path);
    if (auto v = r_.read_int(item, "kv_sharing_target", path, 0, 4095)) {
      o.kv_sharing_target = static_cast<int>(*v);
    }
    if (auto v = r_.read_choice(item, "mlp", path, kMlpKinds)) o.mlp = parse_mlp(*v);
    if (auto v = r_.read_int(item, "intermediate_size", path, 1, kMaxIntermediate)) {
      o.intermediate_size = static_cast<int>(*v);
    }
    // Which layers: a list of indices, or a range "first..last" (inclusive).
    std::vector<int> indices;
    const YAML::Node which = SpecReader::child(item, "layers");
    const std::string which_path = path + ".layers";
    const int max_index = num_layers > 0 ? num_layers - 1 : 4095;
    if (!which.IsDefined()) {
      r_.missing(item, which_path);
      continue;
    }
    r_.remember(which_path, which);
    if (which.IsSequence()) {
      for (std::size_t j = 0; j < which.size(); ++j) {
        auto v = r_.as_int(which[j], which_path + "[" + std::to_string(j) + "]", 0, max_index);
        if (v) indices.push_back(static_cast<int>(*v));
      }
    } else if (which.IsScalar()) {
      const std::string text = which.Scalar();
      const std::size_t dots = text.find("..");
      int first = -1, last = -1;
      try {
        std::size_t used = 0;
        if (dots == std::string::npos) {
          first = last = std::stoi(text, &used);
          if (used != text.size()) first = -1;
        } else {
          first = std::stoi(text.substr(0, dots), &used);
          if (used != dots) first = -1;
          const std::string tail = text.substr(dots + 2);
          last = std::stoi(tail, &used);
          if (used != tail.size()) first = -1;
        }
      } catch (const std::exception&) {
        first = -1;
      }
      if (first < 0 || last < first || last > max_index) {
        r_.problem(which, which_path,
                   "expected a layer index, a list of indices or a range 'first..last' within "
                   "[0, " + std::to_string(max_index) + "], got '" + text + "'");
      } else {
        for (int l = first; l <= last; ++l) indices.push_back(l);
      }
    } else {
      r_.problem(which, which_path, "expected a layer index, a list or a range 'first..last'");
    }
    overrides_.emplace_back(std::move(indices), std::move(o));
    override_paths_.push_back(path);
  }
}

void SpecParser::parse_cache(const YAML::Node& c) {
  r_.check_keys(c, "cache", {"block_size", "dtype", "memory_budget"});
  CacheSpec& cache = spec_.cache;
  if (auto v = r_.read_int(c, "block_size", "cache", 1, 4096)) {
    if ((*v & (*v - 1)) != 0) {
      r_.problem(SpecReader::child(c, "block_size"), "cache.block_size",
                 "must be a power of two, got " + std::to_string(*v));
    } else {
      cache.block_size = static_cast<int>(*v);
    }
  }
  if (auto v = r_.read_choice(c, "dtype", "cache", kCacheDTypes)) {
    if (*v != "auto") cache.dtype = parse_dtype(*v);
  }
  const YAML::Node budget = SpecReader::child(c, "memory_budget");
  if (budget.IsDefined()) {
    const std::string path = "cache.memory_budget";
    r_.remember(path, budget);
    const std::string text = budget.IsScalar() ? budget.Scalar() : std::string();
    double fraction = 0;
    bool is_number = false;
    try {
      std::size_t used = 0;
      fraction = std::stod(text, &used);
      is_number = used == text.size();
    } catch (const std::exception&) {
    }
    if (is_number && fraction > 0 && fraction <= 1) {
      cache.memory_budget.fraction = fraction;
    } else if (auto bytes = parse_byte_size(text); bytes && *bytes > 1) {
      cache.memory_budget.bytes = *bytes;
    } else {
      r_.problem(budget, path,
                 "expected a fraction of device memory in (0, 1] or a size such as 70GiB, got '" +
                     text + "'");
    }
  }
}

void SpecParser::parse_scheduler(const YAML::Node& s) {
  r_.check_keys(s, "scheduler", {"max_num_seqs", "max_num_batched_tokens", "max_model_len",
                                 "max_prefill_context_tokens"});
  SchedulerSpec& sched = spec_.scheduler;
  if (auto v = r_.read_int(s, "max_num_seqs", "scheduler", 1, 1 << 20)) {
    sched.max_num_seqs = static_cast<int>(*v);
  }
  if (auto v = r_.read_int(s, "max_num_batched_tokens", "scheduler", 1, 1 << 24)) {
    sched.max_num_batched_tokens = static_cast<int>(*v);
  }
  if (auto v = r_.read_int(s, "max_model_len", "scheduler", 1, kMaxPositions)) {
    sched.max_model_len = *v;
  }
  if (auto v = r_.read_int(s, "max_prefill_context_tokens", "scheduler", 0, kMaxPositions)) {
    sched.max_prefill_context_tokens = *v;
  }
}

void SpecParser::parse_cuda_graphs(const YAML::Node& g) {
  r_.check_keys(g, "cuda_graphs", {"mode", "capture_sizes", "max_capture_size", "layer_by_layer",
                                      "share_piecewise_executables"});
  CudaGraphSpec& graphs = spec_.cuda_graphs;
  if (auto v = r_.read_choice(g, "mode", "cuda_graphs", kGraphModes)) {
    graphs.mode = parse_graph_mode(*v).value_or(CudaGraphMode::kFullAndPiecewise);
  }
  if (auto v = r_.read_bool(g, "layer_by_layer", "cuda_graphs")) graphs.layer_by_layer = *v;
  if (auto v = r_.read_choice(g, "share_piecewise_executables", "cuda_graphs", kSharings)) {
    graphs.piecewise_sharing = *v == "across_layers"            ? PiecewiseSharing::kAcrossLayers
                               : (*v == "none" || *v == "false") ? PiecewiseSharing::kNone
                                                                 : PiecewiseSharing::kAcrossSizes;
  }
  if (auto v = r_.read_int(g, "max_capture_size", "cuda_graphs", 1, 1 << 24)) {
    max_capture_size_ = static_cast<int>(*v);
  }
  capture_sizes_node_ = SpecReader::child(g, "capture_sizes");
}

void SpecParser::resolve_capture_sizes() {
  CudaGraphSpec& graphs = spec_.cuda_graphs;
  const int max_tokens = spec_.scheduler.max_num_batched_tokens;
  const YAML::Node& node = capture_sizes_node_;
  const std::string path = "cuda_graphs.capture_sizes";
  if (node.IsDefined()) {
    r_.remember(path, node);
    if (!node.IsSequence()) {
      r_.problem(node, path, "expected a list of batch sizes (tokens per step)");
      return;
    }
    if (max_capture_size_) {
      problem("cuda_graphs.max_capture_size", "set capture_sizes or max_capture_size, not both");
    }
    graphs.capture_sizes_explicit = true;
    std::vector<int> sizes;
    for (std::size_t i = 0; i < node.size(); ++i) {
      const std::string item = path + "[" + std::to_string(i) + "]";
      auto v = r_.as_int(node[i], item, 0, 1 << 24);
      if (!v) continue;
      const int size = static_cast<int>(*v);
      if (size == 0) {
        r_.problem(node[i], item, "capture sizes must be positive, got 0");
        continue;
      }
      if (size > max_tokens) {
        r_.problem(node[i], item,
                   "capture size " + std::to_string(size) +
                       " is above scheduler.max_num_batched_tokens " + std::to_string(max_tokens));
        continue;
      }
      if (std::find(sizes.begin(), sizes.end(), size) != sizes.end()) {
        r_.problem(node[i], item, "capture size " + std::to_string(size) + " is duplicated");
        continue;
      }
      if (!sizes.empty() && size < sizes.back()) {
        r_.problem(node[i], item,
                   "capture sizes must be sorted ascending: " + std::to_string(size) +
                       " comes after " + std::to_string(sizes.back()));
        continue;
      }
      sizes.push_back(size);
    }
    graphs.capture_sizes = std::move(sizes);
  } else {
    int max_size = std::min(2 * spec_.scheduler.max_num_seqs, 512);
    if (max_capture_size_) {
      if (*max_capture_size_ > max_tokens) {
        problem("cuda_graphs.max_capture_size",
                "is " + std::to_string(*max_capture_size_) +
                    ", above scheduler.max_num_batched_tokens " + std::to_string(max_tokens));
      }
      max_size = *max_capture_size_;
    }
    graphs.capture_sizes = default_capture_sizes(std::min(max_size, max_tokens));
  }
  if (graphs.mode == CudaGraphMode::kNone) graphs.capture_sizes.clear();
  graphs.max_capture_size = graphs.capture_sizes.empty() ? 0 : graphs.capture_sizes.back();
}

void SpecParser::parse_dcp(const YAML::Node& d) {
  r_.check_keys(d, "dcp", {"world_size", "interleave_size"});
  if (auto v = r_.read_int(d, "world_size", "dcp", 1, 1024)) {
    spec_.dcp.world_size = static_cast<int>(*v);
  }
  if (auto v = r_.read_int(d, "interleave_size", "dcp", 1, 1 << 20)) {
    spec_.dcp.interleave_size = static_cast<int>(*v);
  }
}

void SpecParser::check_dcp() {
  const DcpSpec& dcp = spec_.dcp;
  if (dcp.world_size > 1 && spec_.model.num_heads > 0 &&
      spec_.model.num_heads % dcp.world_size != 0) {
    problem("dcp.world_size",
            "must divide model.num_heads " + std::to_string(spec_.model.num_heads) +
                " (the merged output is scattered back over heads), got " +
                std::to_string(dcp.world_size));
  }
  if (spec_.cache.block_size % dcp.interleave_size != 0) {
    problem("dcp.interleave_size",
            "must divide cache.block_size " + std::to_string(spec_.cache.block_size) +
                " (a block holds whole interleave runs), got " +
                std::to_string(dcp.interleave_size));
  }
}

void SpecParser::check_layers() {
  ModelSpec& model = spec_.model;
  const int n = model.num_layers;
  model.num_kv_heads = kv_heads_given_.value_or(model.num_heads);
  if (model.is_mla()) model.num_kv_heads = 1;  // one shared latent "head"
  if (!model.is_mla() && model.num_heads % model.num_kv_heads != 0) {
    model_ok_ = false;
    problem("model.num_kv_heads", "model.num_heads " + std::to_string(model.num_heads) +
                                      " is not divisible by num_kv_heads " +
                                      std::to_string(model.num_kv_heads));
  }
  if (head_size_given_) {
    model.head_size = *head_size_given_;
  } else if (model.is_mla()) {
    model.head_size = model.mla->qk_nope_head_dim + model.mla->qk_rope_head_dim;
  } else if (model.hidden_size % model.num_heads != 0) {
    problem("model.head_size", "is not given and model.hidden_size " +
                                   std::to_string(model.hidden_size) +
                                   " is not divisible by num_heads " +
                                   std::to_string(model.num_heads));
    return;
  } else {
    model.head_size = model.hidden_size / model.num_heads;
  }

  // Resolve every layer: model-wide defaults, the window pattern, then overrides in order.
  model.layers.assign(n, LayerSpec{});
  std::vector<std::string> layer_path(n, "model.attention");
  for (int l = 0; l < n; ++l) {
    LayerSpec& layer = model.layers[l];
    layer.backend = defaults_.backend.value_or(model.is_mla() ? "reference_mla" : "reference");
    layer.attention_type = defaults_.type.value_or(AttentionType::kDecoder);
    layer.sliding_window = defaults_.sliding_window.value_or(0);
    if (!window_pattern_.empty()) layer.sliding_window = window_pattern_[l % window_pattern_.size()];
    layer.logits_soft_cap = defaults_.logits_soft_cap.value_or(0.0f);
    layer.alibi = defaults_.alibi.value_or(false);
    layer.mlp = defaults_.mlp.value_or(MlpKind::kGatedSilu);
    layer.intermediate_size = model.intermediate_size;
  }
  for (std::size_t i = 0; i < overrides_.size(); ++i) {
    const auto& [indices, o] = overrides_[i];
    for (const int l : indices) {
      if (l < 0 || l >= n) continue;
      LayerSpec& layer = model.layers[l];
      layer_path[l] = override_paths_[i];
      if (o.type) layer.attention_type = *o.type;
      if (o.backend) layer.backend = *o.backend;
      if (o.sliding_window) layer.sliding_window = *o.sliding_window;
      if (o.logits_soft_cap) layer.logits_soft_cap = *o.logits_soft_cap;
      if (o.alibi) layer.alibi = *o.alibi;
      if (o.kv_sharing_target) layer.kv_sharing_target = *o.kv_sharing_target;
      if (o.mlp) layer.mlp = *o.mlp;
      if (o.intermediate_size) layer.intermediate_size = *o.intermediate_size;
    }
  }

  if (!model_ok_) return;
  const DType cache_dtype = spec_.kv_cache_dtype();
  const BackendRegistry& registry = BackendRegistry::global();
  bool reported_intermediate = false;
  for (int l = 0; l < n; ++l) {
    const LayerSpec& layer = model.layers[l];
    const std::string& path = layer_path[l];
    const std::string who = "layer " + std::to_string(l);
    if (layer.mlp == MlpKind::kGatedSilu && layer.intermediate_size <= 0 && !reported_intermediate) {
      problem("model.intermediate_size",
              "is required: " + who + " has a gated_silu MLP (set mlp: none to plan without one)");
      reported_intermediate = true;
    }
    if (!registry.contains(layer.backend)) continue;
    const AttentionBackend& backend = registry.get(layer.backend);
    const std::string backend_path = join_path(path, "backend");
    if (backend.is_mla() != model.is_mla()) {
      layer_problem(backend_path, l, "backend '" + layer.backend + "' is " +
                                (backend.is_mla() ? "an MLA backend but the model has no mla "
                                                    "section"
                                                  : "not an MLA backend but the model uses MLA"));
      continue;
    }
    if (!backend.supports_kv_cache_dtype(cache_dtype)) {
      layer_problem("cache.dtype", l, "backend '" + layer.backend + "' cannot keep a " +
                                 std::string(name_of(cache_dtype)) + " KV cache");
      continue;
    }
    const int head = model.is_mla() ? model.mla->kv_lora_rank + model.mla->qk_rope_head_dim
                                    : model.head_size;
    if (!backend.supports_head_size(head)) {
      std::string list;
      for (int s : backend.supported_head_sizes()) (list += list.empty() ? "" : ", ") += std::to_string(s);
      layer_problem(model.is_mla() ? "model.mla.kv_lora_rank" : "model.head_size", l,
                    "backend '" + layer.backend + "' cannot run " +
                  (model.is_mla() ? "latent size (kv_lora_rank + qk_rope_head_dim) "
                                  : "head size ") +
                  std::to_string(head) + "; it supports " + list);
      continue;
    }
    if (layer.kv_sharing_target >= 0) {
      const int t = layer.kv_sharing_target;
      const std::string sharing_path = join_path(path, "kv_sharing_target");
      if (t >= l) {
        problem(sharing_path, who + " shares the KV cache of layer " + std::to_string(t) +
                                  ", which is not an earlier layer");
        continue;
      }
      const LayerSpec& target = model.layers[t];
      if (target.kv_sharing_target >= 0) {
        problem(sharing_path, who + " shares the KV cache of layer " + std::to_string(t) +
                                  ", which itself shares layer " +
                                  std::to_string(target.kv_sharing_target) + "; name that one");
        continue;
      }
      if (target.backend != layer.backend || !uses_kv_cache(target.attention_type)) {
        problem(sharing_path, who + " shares the KV cache of layer " + std::to_string(t) +
                                  ", which has no cache in backend '" + layer.backend + "'");
        continue;
      }
    }
    if (model.is_mla()) continue;  // MLA impls need weights to be built; checked above
    const AttentionParams params = attention_params(spec_, l);
    try {
      (void)backend.make_impl(params, DcpGroup{spec_.dcp.world_size, 0});
    } catch (const Error& e) {
      layer_problem(path, l, "backend '" + layer.backend + "' refuses this layer: " + e.message());
    }
  }
  flush_layer_problems();
}

}  // namespace

EngineSpec parse_spec(std::string_view yaml, std::string_view source_name) {
  EngineSpec spec;
  spec.source = std::string(source_name);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::ParserException& e) {
    FF_THROW(ErrorCode::kInvalidArgument, spec.source, ":", e.mark.line + 1, ":",
             e.mark.column + 1, ": YAML syntax error: ", e.msg);
  }
  SpecParser parser(spec, spec.source);
  parser.parse(root);
  const std::vector<std::string>& problems = parser.problems();
  if (!problems.empty()) {
    std::string text = "spec " + spec.source + " has " + std::to_string(problems.size()) +
                       (problems.size() == 1 ? " problem:" : " problems:");
    for (const std::string& p : problems) text += "\n  " + p;
    FF_THROW(ErrorCode::kInvalidArgument, text);
  }
  return spec;
}

EngineSpec load_spec(const std::string& path) {
  std::ifstream in(path);
  FF_CHECK(in.good(), ErrorCode::kNotFound, "cannot read spec file '", path, "'");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_spec(text.str(), path);
}

}  // namespace freezeframe
