// The model section of a spec: sizes, numbers, the attention settings of every layer, MLA
// dimensions and per-layer overrides (read here, applied in spec_layers.cpp).

#include <charconv>
#include <string>
#include <vector>

#include "freezeframe/base/printable.h"
#include "spec/spec_parser.h"

namespace freezeframe::spec_detail {
namespace {

const std::vector<std::string> kAttentionTypes = {"decoder", "encoder", "encoder_only",
                                                  "encoder_decoder"};
const std::vector<std::string> kMlpKinds = {"gated_silu", "none", "moe"};
const std::vector<std::string> kModelDTypes = {"bf16",     "f16",     "f32",
                                               "bfloat16", "float16", "float32"};
const std::vector<std::string> kResidualDTypes = {"auto", "f32", "float32"};
const std::vector<std::string> kQuantizations = {"none", "fp8"};

MlpKind parse_mlp(const std::string& s) {
  if (s == "moe") return MlpKind::kMoe;
  return s == "none" ? MlpKind::kNone : MlpKind::kGatedSilu;
}

/// A whole decimal int, nothing else (no sign, no spaces).
bool parse_index(std::string_view text, int& out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

void SpecParser::parse_model(const YAML::Node& m) {
  r_.check_keys(m, "model",
                {"name",
                 "checkpoint",
                 "checkpoint_fetch",
                 "num_layers",
                 "hidden_size",
                 "num_heads",
                 "num_kv_heads",
                 "head_size",
                 "intermediate_size",
                 "vocab_size",
                 "tie_word_embeddings",
                 "dtype",
                 "residual_dtype",
                 "rope_theta",
                 "rms_norm_eps",
                 "max_position_embeddings",
                 "builtin_weights",
                 "quantization",
                 "mlp",
                 "attention",
                 "mla",
                 "moe",
                 "layers"});
  ModelSpec& model = spec_.model;
  read_checkpoint(m);
  const bool from_file = checkpoint_node_.IsDefined();
  if (auto v = r_.read_string(m, "name", "model")) {
    model.name = *v;
  } else if (model.checkpoint) {
    model.name = model.checkpoint->name;
  }
  // A size the spec gives must agree with the checkpoint's; one it leaves out comes from it.
  // Without a checkpoint the required ones are required of the spec (with one that could not
  // be read, their absence is no further problem).
  auto size = [&](std::string_view key, std::int64_t min, std::int64_t max,
                  bool required) -> std::optional<int> {
    if (SpecReader::child(m, key).IsDefined()) {
      auto v = r_.read_int(m, key, "model", min, max);
      if (!v) {
        model_ok_ = false;
        return std::nullopt;
      }
      agree(key, static_cast<double>(*v));
      return static_cast<int>(*v);
    }
    if (auto c = from_checkpoint(key)) return static_cast<int>(*c);
    if (required && !from_file) {
      r_.missing(m, join_path("model", key));
      model_ok_ = false;
    }
    return std::nullopt;
  };
  model.num_layers = size("num_layers", 1, kMaxLayers, true).value_or(0);
  model.hidden_size = size("hidden_size", 1, kMaxWidth, true).value_or(0);
  model.num_heads = size("num_heads", 1, 4096, true).value_or(0);
  kv_heads_given_ = size("num_kv_heads", 1, 4096, false);
  head_size_given_ = size("head_size", 1, 4096, false);
  if (auto v = r_.read_int(m, "intermediate_size", "model", 1, kMaxIntermediate)) {
    model.intermediate_size = static_cast<int>(*v);
    agree("intermediate_size", static_cast<double>(*v));
  } else if (!SpecReader::child(m, "intermediate_size").IsDefined()) {
    if (auto c = from_checkpoint("intermediate_size"))
      model.intermediate_size = static_cast<int>(*c);
  }
  if (auto v = r_.read_bool(m, "builtin_weights", "model")) model.builtin_weights = *v;
  // The checkpoint's own weights need a checkpoint: planning none would leave the weights out.
  if (!model.builtin_weights && !from_file) {
    r_.problem(SpecReader::child(m, "builtin_weights"), "model.builtin_weights",
               "false asks for a checkpoint's weights, and the spec names no model.checkpoint; "
               "name one, or leave builtin_weights true for random weights");
  }
  if (auto v = r_.read_int(m, "vocab_size", "model", 1, kMaxVocab)) {
    model.vocab_size = static_cast<int>(*v);
    agree("vocab_size", static_cast<double>(*v));
  } else if (!SpecReader::child(m, "vocab_size").IsDefined()) {
    if (auto c = from_checkpoint("vocab_size")) {
      model.vocab_size = static_cast<int>(*c);
    } else if (model.builtin_weights && !from_file) {
      r_.problem(m, "model.vocab_size", "is required when model.builtin_weights is true");
    }
  }
  if (auto v = r_.read_bool(m, "tie_word_embeddings", "model")) {
    model.tie_word_embeddings = *v;
    agree("tie_word_embeddings", *v ? 1 : 0);
  } else if (!SpecReader::child(m, "tie_word_embeddings").IsDefined()) {
    if (auto c = from_checkpoint("tie_word_embeddings")) model.tie_word_embeddings = *c != 0;
  }
  // The spec's dtype wins: running a checkpoint in another dtype is a deployment's choice.
  if (auto v = r_.read_choice(m, "dtype", "model", kModelDTypes)) {
    model.dtype = *parse_dtype(*v);
  } else if (!SpecReader::child(m, "dtype").IsDefined() && model.checkpoint &&
             model.checkpoint->dtype) {
    model.dtype = *model.checkpoint->dtype;
  }
  if (auto v = r_.read_choice(m, "residual_dtype", "model", kResidualDTypes)) {
    if (*v != "auto") model.residual = DType::kF32;
  }
  if (auto v = r_.read_choice(m, "quantization", "model", kQuantizations)) {
    model.fp8_linear = *v == "fp8";
  }
  // Numbers kept as floats are compared as the spec keeps them.
  auto number = [&](std::string_view key, double max, float& out) {
    if (auto v = r_.read_float(m, key, "model", 0, max, true)) {
      out = static_cast<float>(*v);
      agree(key, out);
    } else if (!SpecReader::child(m, key).IsDefined()) {
      if (auto c = from_checkpoint(key)) out = static_cast<float>(*c);
    }
  };
  number("rope_theta", 1e12, model.rope_theta);
  number("rms_norm_eps", 1, model.rms_norm_eps);
  if (auto v = r_.read_int(m, "max_position_embeddings", "model", 1, kMaxPositions)) {
    if (*v < kMinModelLen) {
      r_.problem(SpecReader::child(m, "max_position_embeddings"), "model.max_position_embeddings",
                 kMinModelLenReason + std::to_string(*v));
    } else {
      model.max_position_embeddings = *v;
      agree("max_position_embeddings", static_cast<double>(*v));
    }
  } else if (!SpecReader::child(m, "max_position_embeddings").IsDefined()) {
    if (auto c = from_checkpoint("max_position_embeddings")) {
      model.max_position_embeddings = static_cast<std::int64_t>(*c);
    }
  }
  if (auto v = r_.read_choice(m, "mlp", "model", kMlpKinds)) defaults_.mlp = parse_mlp(*v);

  const YAML::Node attention = SpecReader::child(m, "attention");
  if (r_.expect_map(attention, "model.attention")) parse_attention(attention);
  agree_on_windows();
  const YAML::Node mla = SpecReader::child(m, "mla");
  if (r_.expect_map(mla, "model.mla")) parse_mla(mla);
  const YAML::Node moe = SpecReader::child(m, "moe");
  if (r_.expect_map(moe, "model.moe")) parse_moe(moe);
  agree_on_mla_and_moe();
  const YAML::Node layers = SpecReader::child(m, "layers");
  if (layers.IsDefined()) parse_layer_overrides(layers);
}

void SpecParser::parse_moe(const YAML::Node& moe) {
  r_.check_keys(moe, "model.moe",
                {"num_experts", "experts_per_token", "intermediate_size", "num_shared_experts"});
  r_.remember("model.moe", moe);
  MoeSpec spec;
  auto need = [&](std::string_view key, std::int64_t max) -> int {
    auto v = r_.read_int(moe, key, "model.moe", 1, max);
    if (!v) {
      if (!SpecReader::child(moe, key).IsDefined()) r_.missing(moe, join_path("model.moe", key));
      model_ok_ = false;
      return 0;
    }
    return static_cast<int>(*v);
  };
  spec.num_experts = need("num_experts", 4096);
  spec.experts_per_token = need("experts_per_token", 4096);
  spec.intermediate_size = need("intermediate_size", kMaxIntermediate);
  if (auto v = r_.read_int(moe, "num_shared_experts", "model.moe", 0, 4096)) {
    spec.num_shared_experts = static_cast<int>(*v);
  }
  if (spec.num_experts > 0 && spec.experts_per_token > spec.num_experts) {
    r_.problem(SpecReader::child(moe, "experts_per_token"), "model.moe.experts_per_token",
               "is " + std::to_string(spec.experts_per_token) + ", more than the " +
                   std::to_string(spec.num_experts) + " experts (num_experts)");
    model_ok_ = false;
  }
  spec_.model.moe = spec;
}

void SpecParser::parse_attention(const YAML::Node& attention) {
  r_.check_keys(
      attention, "model.attention",
      {"type", "backend", "sliding_window", "sliding_window_pattern", "logits_soft_cap", "alibi"});
  const LayerOverride d = parse_layer_fields(attention, "model.attention");
  defaults_.type = d.type;
  defaults_.backend = d.backend;
  defaults_.sliding_window = d.sliding_window;
  defaults_.logits_soft_cap = d.logits_soft_cap;
  defaults_.alibi = d.alibi;
  const YAML::Node pattern = SpecReader::child(attention, "sliding_window_pattern");
  if (!pattern.IsDefined()) return;
  const std::string path = "model.attention.sliding_window_pattern";
  r_.remember(path, pattern);
  if (!pattern.IsSequence() || pattern.size() == 0) {
    r_.problem(pattern, path,
               "expected a non-empty list of windows (0 = full attention), "
               "applied to the layers in turn");
    return;
  }
  if (pattern.size() > static_cast<std::size_t>(kMaxLayers)) {
    r_.problem(pattern, path,
               "has " + std::to_string(pattern.size()) + " entries, more than the " +
                   std::to_string(kMaxLayers) + " layers a model may have");
    return;
  }
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    auto w = r_.as_int(pattern[i], path + "[" + std::to_string(i) + "]", 0, kMaxInt);
    window_pattern_.push_back(w ? static_cast<int>(*w) : 0);
  }
  if (d.sliding_window) {
    r_.problem(pattern, path, "set sliding_window or sliding_window_pattern, not both");
  }
}

void SpecParser::parse_mla(const YAML::Node& mla) {
  r_.check_keys(
      mla, "model.mla",
      {"kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"});
  r_.remember("model.mla", mla);
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
  spec_.model.mla = spec;
}

LayerOverride SpecParser::parse_layer_fields(const YAML::Node& map, const std::string& path) {
  LayerOverride o;
  if (auto v = r_.read_choice(map, "type", path, kAttentionTypes)) {
    o.type = parse_attention_type(*v);
  }
  if (auto v = r_.read_string(map, "backend", path)) {
    o.backend = *v;
    if (!registry_.contains(*v)) {
      const std::vector<std::string> names = registry_.names();
      std::string list;
      for (const std::string& n : names) (list += list.empty() ? "" : ", ") += n;
      std::string message = "unknown attention backend " + quote(*v) + "; registered: " + list;
      if (const std::string hint = closest_match(*v, names); !hint.empty()) {
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
  if (auto v = r_.read_float(map, "logits_soft_cap", path, 0, 1e6)) {
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
  if (list.size() > kMaxOverrides) {
    r_.problem(list, base,
               "has " + std::to_string(list.size()) + " overrides, more than the " +
                   std::to_string(kMaxOverrides) + " a spec may have");
    return;
  }
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
    if (auto v = r_.read_int(item, "kv_sharing_target", path, 0, kMaxLayers - 1)) {
      o.kv_sharing_target = static_cast<int>(*v);
    }
    if (auto v = r_.read_choice(item, "mlp", path, kMlpKinds)) o.mlp = parse_mlp(*v);
    if (auto v = r_.read_int(item, "intermediate_size", path, 1, kMaxIntermediate)) {
      o.intermediate_size = static_cast<int>(*v);
    }
    const YAML::Node which = SpecReader::child(item, "layers");
    if (!which.IsDefined()) {
      r_.missing(item, path + ".layers");
      continue;
    }
    overrides_.emplace_back(parse_layer_indices(which, path + ".layers"), std::move(o));
    override_paths_.push_back(path);
  }
}

std::vector<int> SpecParser::parse_layer_indices(const YAML::Node& which, const std::string& path) {
  // Which layers: an index, a list of indices, or a range "first..last" (inclusive).
  const int num_layers = spec_.model.num_layers;
  const int max_index = num_layers > 0 ? num_layers - 1 : static_cast<int>(kMaxLayers) - 1;
  std::vector<int> indices;
  r_.remember(path, which);
  if (which.IsSequence()) {
    if (which.size() > static_cast<std::size_t>(kMaxLayers)) {
      r_.problem(which, path,
                 "lists " + std::to_string(which.size()) + " layers, more than the " +
                     std::to_string(kMaxLayers) + " a model may have");
      return indices;
    }
    for (std::size_t j = 0; j < which.size(); ++j) {
      auto v = r_.as_int(which[j], path + "[" + std::to_string(j) + "]", 0, max_index);
      if (v) indices.push_back(static_cast<int>(*v));
    }
  } else if (which.IsScalar()) {
    const std::string& text = which.Scalar();
    const std::size_t dots = text.find("..");
    int first = -1, last = -1;
    const bool ok = dots == std::string::npos
                        ? parse_index(text, first) && parse_index(text, last)
                        : parse_index(std::string_view(text).substr(0, dots), first) &&
                              parse_index(std::string_view(text).substr(dots + 2), last);
    if (!ok || last < first || last > max_index) {
      r_.problem(which, path,
                 "expected a layer index, a list of indices or a range 'first..last' within "
                 "[0, " +
                     std::to_string(max_index) + "], got " + quote(text));
    } else {
      for (int l = first; l <= last; ++l) indices.push_back(l);
    }
  } else {
    r_.problem(which, path, "expected a layer index, a list or a range 'first..last'");
  }
  return indices;
}

}  // namespace freezeframe::spec_detail
