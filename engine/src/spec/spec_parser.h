#pragma once
// SpecParser: the sections of a spec read into an EngineSpec, then the defaults that depend on
// other fields and the checks that need several fields or the backend registry. Private to the
// engine; its parts live in spec.cpp (the whole spec), spec_model.cpp (the model section and
// per-layer overrides), spec_checkpoint.cpp (model.checkpoint: the model's sizes from a
// checkpoint, and the spec's own checked against them), spec_sections.cpp (cache, scheduler,
// cuda_graphs), spec_parallel.cpp (tp and dcp, checked against the model) and spec_layers.cpp
// (every layer resolved and checked against its backend).

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "freezeframe/backends/registry.h"
#include "freezeframe/engine/spec/spec.h"
#include "spec/spec_reader.h"

namespace freezeframe::spec_detail {

inline constexpr std::int64_t kMaxInt = 1 << 30;
// Upper bounds well above any real model that keep every byte count of the plan inside int64
// (e.g. layers · intermediate · hidden · 12 bytes < 2^63) and block tables inside int.
inline constexpr std::int64_t kMaxLayers = 4096;
inline constexpr std::int64_t kMaxWidth = 1 << 18;         // hidden_size
inline constexpr std::int64_t kMaxIntermediate = 1 << 22;  // intermediate_size
inline constexpr std::int64_t kMaxVocab = 1 << 24;
inline constexpr std::int64_t kMaxPositions = 1 << 28;  // max_position_embeddings, max_model_len
inline constexpr std::int64_t kMaxBatchedTokens = 1 << 24;
inline constexpr std::int64_t kMaxWorldSize = 1024;  // tp.world_size, dcp.world_size
// A sequence holds at least a prompt token and a generated one.
inline constexpr std::int64_t kMinModelLen = 2;
inline constexpr const char* kMinModelLenReason =
    "must be at least 2 (a sequence holds at least one prompt token and one generated token), "
    "got ";
// Lists longer than anything meaningful are refused before their items are read, so a spec
// cannot make the reader spend time or memory in proportion to a list it will refuse anyway.
inline constexpr std::size_t kMaxCaptureSizes = 1024;
inline constexpr std::int64_t kMaxCaptureSize = 8192;  // the default ladder to it has 531 sizes
inline constexpr std::size_t kMaxOverrides = 4096;     // model.layers entries

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
  SpecParser(EngineSpec& spec, std::string file, const BackendRegistry& registry,
             bool written = false)
      : spec_(spec), r_(spec, std::move(file), written), registry_(registry) {}

  /// Reads the root of the spec's one document.
  void parse(const YAML::Node& root);
  /// The first problems found (at most SpecReader::kMaxKeptProblems), and how many there are.
  [[nodiscard]] const std::vector<std::string>& problems() const { return r_.problems(); }
  [[nodiscard]] std::size_t problem_count() const { return r_.problem_count(); }

 private:
  // spec_model.cpp
  void parse_model(const YAML::Node& m);
  void parse_attention(const YAML::Node& attention);
  void parse_mla(const YAML::Node& mla);
  void parse_moe(const YAML::Node& moe);
  LayerOverride parse_layer_fields(const YAML::Node& map, const std::string& path);
  void parse_layer_overrides(const YAML::Node& list);
  std::vector<int> parse_layer_indices(const YAML::Node& which, const std::string& path);
  // spec_checkpoint.cpp
  void read_checkpoint(const YAML::Node& m);
  /// The checkpoint's value of model.<field>, where a checkpoint was read and states it; the
  /// field's location becomes the checkpoint line's.
  std::optional<double> from_checkpoint(std::string_view field);
  /// A model field the spec gives itself: a problem naming both places when the checkpoint
  /// states another value.
  void agree(std::string_view field, double value);
  void agree_on_windows();
  /// model.mla and model.moe from a checkpoint that has them (DeepSeek-V2), or each of their
  /// fields checked against it where the spec gives them too; either refused where the
  /// checkpoint has none.
  void agree_on_mla_and_moe();
  /// Layer `l`'s MLP as the checkpoint has it: moe from its first MoE layer on, else gated.
  [[nodiscard]] MlpKind checkpoint_mlp(int l) const;
  // spec_sections.cpp
  void parse_cache(const YAML::Node& c);
  void parse_scheduler(const YAML::Node& s);
  void parse_cuda_graphs(const YAML::Node& g);
  void resolve_scheduler();
  void resolve_capture_sizes();
  // spec_parallel.cpp
  void parse_tp(const YAML::Node& t);
  void parse_dcp(const YAML::Node& d);
  void check_tp();
  void check_dcp();
  // spec_layers.cpp
  void check_layers();
  void check_layer(int l, const std::string& path);
  /// Layer l's backend when the spec names none: the fast one where it runs the layer, else
  /// the reference one (MLA: the reference MLA backend).
  [[nodiscard]] std::string default_backend(int l) const;
  void flush_layer_problems();

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

  EngineSpec& spec_;
  SpecReader r_;
  const BackendRegistry& registry_;
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
  YAML::Node checkpoint_node_{YAML::NodeType::Undefined};         // model.checkpoint, when given
  std::map<std::string, double, std::less<>> checkpoint_values_;  // model field → its value
  std::optional<int> kv_heads_given_;
  std::map<std::pair<std::string, std::string>, std::vector<int>> layer_problems_;
  std::vector<std::pair<std::string, std::string>> layer_problem_order_;
};

}  // namespace freezeframe::spec_detail
