// model.checkpoint: the model section's sizes from a checkpoint's config (config.json or GGUF
// metadata). A field the spec also gives must agree with the checkpoint; a disagreement names
// both places. The checkpoint's values are held to the same bounds as the spec's own.

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "freezeframe/base/printable.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "spec/spec_parser.h"

namespace freezeframe::spec_detail {
namespace {

enum class Kind { kInt, kFloat, kBool };

struct Field {
  std::string_view name;  // the ModelSpec field, as in the spec
  Kind kind;
  double min;
  double max;
};

// The bounds of the spec's own fields (spec_model.cpp).
constexpr Field kFields[] = {
    {"num_layers", Kind::kInt, 1, double(kMaxLayers)},
    {"hidden_size", Kind::kInt, 1, double(kMaxWidth)},
    {"num_heads", Kind::kInt, 1, 4096},
    {"num_kv_heads", Kind::kInt, 1, 4096},
    {"head_size", Kind::kInt, 1, 4096},
    {"intermediate_size", Kind::kInt, 1, double(kMaxIntermediate)},
    {"vocab_size", Kind::kInt, 1, double(kMaxVocab)},
    {"max_position_embeddings", Kind::kInt, double(kMinModelLen), double(kMaxPositions)},
    {"rope_theta", Kind::kFloat, 0, 1e12},
    {"rms_norm_eps", Kind::kFloat, 0, 1},
    {"tie_word_embeddings", Kind::kBool, 0, 1},
};

const Field* find_field(std::string_view name) {
  for (const Field& f : kFields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string shown(Kind kind, double value) {
  if (kind == Kind::kBool) return value != 0 ? "true" : "false";
  std::ostringstream out;
  if (kind == Kind::kInt) {
    out << static_cast<std::int64_t>(value);
  } else {
    out << static_cast<float>(value);  // as the spec keeps it
  }
  return out.str();
}

double value_of(const CheckpointConfig& c, std::string_view field) {
  if (field == "num_layers") return c.num_layers;
  if (field == "hidden_size") return c.hidden_size;
  if (field == "num_heads") return c.num_heads;
  if (field == "num_kv_heads") return c.num_kv_heads;
  if (field == "head_size") return c.head_size;
  if (field == "intermediate_size") return c.intermediate_size;
  if (field == "vocab_size") return c.vocab_size;
  if (field == "max_position_embeddings") return static_cast<double>(c.max_position_embeddings);
  if (field == "rope_theta") return c.rope_theta;
  if (field == "rms_norm_eps") return c.rms_norm_eps;
  return c.tie_word_embeddings ? 1 : 0;
}

/// "disagrees with the checkpoint's sliding window of 4096 tokens (from layer 24 on)", or
/// "disagrees with the checkpoint, which has no sliding window".
std::string window_disagreement(const std::vector<int>& windows) {
  const auto first = std::find_if(windows.begin(), windows.end(), [](int w) { return w > 0; });
  if (first == windows.end()) return "disagrees with the checkpoint, which has no sliding window";
  std::string text =
      "disagrees with the checkpoint's sliding window of " + std::to_string(*first) + " tokens";
  if (first != windows.begin()) {
    text += " from layer " + std::to_string(first - windows.begin()) + " on";
  }
  return text;
}

}  // namespace

void SpecParser::read_checkpoint(const YAML::Node& m) {
  const YAML::Node node = SpecReader::child(m, "checkpoint");
  if (!node.IsDefined()) {
    const YAML::Node fetch = SpecReader::child(m, "checkpoint_fetch");
    if (fetch.IsDefined()) {
      r_.problem(fetch, "model.checkpoint_fetch",
                 "says how to fetch model.checkpoint, which the spec does not name");
    }
    return;
  }
  checkpoint_node_.reset(node);
  const std::optional<std::string> given = r_.read_string(m, "checkpoint", "model");
  if (!given) {
    model_ok_ = false;
    return;
  }
  // Relative to the spec's folder, so a spec and its checkpoint move together.
  namespace fs = std::filesystem;
  fs::path path(*given);
  if (path.is_relative() && given->find('\0') == std::string::npos) {
    path = (fs::path(spec_.source).parent_path() / path).lexically_normal();
  }
  std::vector<std::string> problems;
  std::optional<CheckpointConfig> config = read_checkpoint_config(path.string(), problems);
  // A checkpoint not there yet: the spec may say how to fetch it.
  std::string fetch;
  if (const std::optional<std::string> how = r_.read_string(m, "checkpoint_fetch", "model")) {
    std::error_code ec;
    if (!fs::exists(path, ec)) fetch = " (fetch it first: " + printable(*how, 200) + ")";
  }
  for (const std::string& p : problems) r_.checkpoint_problem(node, p + fetch);
  if (!config) {
    model_ok_ = false;
    return;
  }
  for (const Field& f : kFields) {
    const double value = value_of(*config, f.name);
    const bool inside =
        f.kind == Kind::kFloat ? value > f.min && value <= f.max : value >= f.min && value <= f.max;
    if (!inside) {
      const auto origin = config->origins.find(f.name);
      std::string range = f.kind == Kind::kFloat ? "(" : "[";
      range.append(shown(f.kind, f.min)).append(", ").append(shown(f.kind, f.max)).append("]");
      r_.checkpoint_problem(
          node,
          (origin != config->origins.end() ? origin->second : printable(config->config_file, 200)) +
              ": " + shown(f.kind, value) + " is outside " + range + ", the range of model." +
              std::string(f.name));
      model_ok_ = false;
      continue;
    }
    checkpoint_values_[std::string(f.name)] = value;
  }
  for (const int w : config->sliding_windows) {
    if (w > kMaxInt) {
      r_.checkpoint_problem(node, config->origins["sliding_window"] + ": " + std::to_string(w) +
                                      " is more than the " + std::to_string(kMaxInt) +
                                      " tokens model.attention.sliding_window may be");
      model_ok_ = false;
      break;
    }
  }
  spec_.model.checkpoint = std::move(config);
}

std::optional<double> SpecParser::from_checkpoint(std::string_view field) {
  const auto it = checkpoint_values_.find(field);
  if (it == checkpoint_values_.end()) return std::nullopt;
  // Later problems about the field (a backend refusing the head size) point at the checkpoint.
  r_.remember(join_path("model", field), checkpoint_node_);
  return it->second;
}

void SpecParser::agree(std::string_view field, double value) {
  const auto it = checkpoint_values_.find(field);
  if (it == checkpoint_values_.end() || it->second == value) return;
  const CheckpointConfig& c = *spec_.model.checkpoint;
  const Kind kind = find_field(field)->kind;
  const auto origin = c.origins.find(field);
  problem(join_path("model", field),
          shown(kind, value) + " disagrees with the checkpoint's " + shown(kind, it->second) +
              " (" + (origin != c.origins.end() ? origin->second : printable(c.config_file, 200)) +
              ")");
  model_ok_ = false;
}

void SpecParser::agree_on_windows() {
  if (!spec_.model.checkpoint || spec_.model.num_layers <= 0) return;
  const CheckpointConfig& c = *spec_.model.checkpoint;
  std::vector<int> windows = c.sliding_windows;
  windows.resize(static_cast<std::size_t>(spec_.model.num_layers), 0);
  const auto origin = c.origins.find("sliding_window");
  const std::string where =
      origin != c.origins.end() ? origin->second : printable(c.config_file, 200);
  if (defaults_.sliding_window) {
    const int given = *defaults_.sliding_window;
    if (std::any_of(windows.begin(), windows.end(), [&](int w) { return w != given; })) {
      problem("model.attention.sliding_window",
              std::to_string(given) + " " + window_disagreement(windows) + " (" + where + ")");
      model_ok_ = false;
    }
    return;
  }
  if (!window_pattern_.empty()) {
    for (std::size_t l = 0; l < windows.size(); ++l) {
      if (window_pattern_[l % window_pattern_.size()] != windows[l]) {
        problem("model.attention.sliding_window_pattern",
                "layer " + std::to_string(l) + "'s window " +
                    std::to_string(window_pattern_[l % window_pattern_.size()]) + " " +
                    window_disagreement(windows) + " (" + where + ")");
        model_ok_ = false;
        return;
      }
    }
    return;
  }
  if (std::all_of(windows.begin(), windows.end(), [&](int w) { return w == windows.front(); })) {
    if (windows.front() > 0) defaults_.sliding_window = windows.front();
  } else {
    window_pattern_ = std::move(windows);
  }
  // A backend that refuses the window then points at the checkpoint, where the spec has no
  // attention section of its own.
  if (!c.sliding_windows.empty() && spec_.locations.count("model.attention") == 0) {
    r_.remember("model.attention", checkpoint_node_);
  }
}

namespace {

/// Each field of a section the spec and the checkpoint both give: (name, spec's, checkpoint's).
struct SectionField {
  std::string_view name;
  int spec, checkpoint;
};

}  // namespace

void SpecParser::agree_on_mla_and_moe() {
  if (!spec_.model.checkpoint) return;
  const CheckpointConfig& c = *spec_.model.checkpoint;
  ModelSpec& model = spec_.model;
  // A spec's section checked field by field against the checkpoint's; true when the spec has
  // none and the checkpoint's is to be taken.
  auto agree_section = [&](std::string_view section, bool spec_has, bool checkpoint_has,
                           std::string_view what, std::initializer_list<SectionField> fields) {
    if (spec_has && !checkpoint_has) {
      problem(join_path("model", section), "the checkpoint's architecture " +
                                               quote(c.architecture) + " has no " +
                                               std::string(what));
      model_ok_ = false;
      return false;
    }
    if (!spec_has || !checkpoint_has) return checkpoint_has;
    for (const SectionField& f : fields) {
      if (f.spec == f.checkpoint) continue;
      const std::string field = std::string(section) + "." + std::string(f.name);
      const auto origin = c.origins.find(field);
      const std::string where =
          " disagrees with the checkpoint's " + std::to_string(f.checkpoint) + " (" +
          (origin != c.origins.end() ? origin->second : printable(c.config_file, 200)) + ")";
      // A field the section leaves out is named at the section, with the default it took.
      if (spec_.locations.count(join_path("model", field)) != 0) {
        problem(join_path("model", field), std::to_string(f.spec) + where);
      } else {
        problem(join_path("model", section),
                std::string(f.name) + " " + std::to_string(f.spec) + " (not given)" + where);
      }
      model_ok_ = false;
    }
    return false;
  };
  const MlaSpec given_mla = model.mla.value_or(MlaSpec{});
  const CheckpointMla mla = c.mla.value_or(CheckpointMla{});
  if (agree_section("mla", model.mla.has_value(), c.mla.has_value(), "multi-head latent attention",
                    {{"kv_lora_rank", given_mla.kv_lora_rank, mla.kv_lora_rank},
                     {"q_lora_rank", given_mla.q_lora_rank, mla.q_lora_rank},
                     {"qk_nope_head_dim", given_mla.qk_nope_head_dim, mla.qk_nope_head_dim},
                     {"qk_rope_head_dim", given_mla.qk_rope_head_dim, mla.qk_rope_head_dim},
                     {"v_head_dim", given_mla.v_head_dim, mla.v_head_dim}})) {
    model.mla = MlaSpec{mla.kv_lora_rank, mla.q_lora_rank, mla.qk_nope_head_dim,
                        mla.qk_rope_head_dim, mla.v_head_dim};
    r_.remember("model.mla", checkpoint_node_);
  }
  const MoeSpec given_moe = model.moe.value_or(MoeSpec{});
  const CheckpointMoe moe = c.moe.value_or(CheckpointMoe{});
  if (agree_section(
          "moe", model.moe.has_value(), c.moe.has_value(), "mixture of experts",
          {{"num_experts", given_moe.num_experts, moe.num_experts},
           {"experts_per_token", given_moe.experts_per_token, moe.experts_per_token},
           {"intermediate_size", given_moe.intermediate_size, moe.intermediate_size},
           {"num_shared_experts", given_moe.num_shared_experts, moe.num_shared_experts}})) {
    model.moe = MoeSpec{moe.num_experts, moe.experts_per_token, moe.intermediate_size,
                        moe.num_shared_experts};
    r_.remember("model.moe", checkpoint_node_);
  }
  // The router's rules are the checkpoint's whether the spec gives the sizes or not.
  if (model.moe && c.moe) {
    model.moe->routed_scaling_factor = static_cast<float>(moe.routed_scaling_factor);
    model.moe->num_groups = moe.num_groups;
    model.moe->top_groups = moe.top_groups;
  }
}

MlpKind SpecParser::checkpoint_mlp(int l) const {
  const auto& c = spec_.model.checkpoint;
  return c && c->moe && c->moe->is_moe_layer(l) ? MlpKind::kMoe : MlpKind::kGatedSilu;
}

}  // namespace freezeframe::spec_detail
