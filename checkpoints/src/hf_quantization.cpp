// config.json's quantization_config read into an Fp8Scheme: compressed-tensors' float-quantized
// fp8 and the "fp8" method, each field checked; every other method or scheme is refused by
// name, so a checkpoint whose weights would be misread is never loaded.

#include <optional>
#include <string>
#include <string_view>

#include "checkpoint_config_reader.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/checkpoints/fp8_scheme.h"
#include "json_fields.h"

namespace freezeframe {

std::string_view to_string(Fp8Scheme::WeightScales scales) {
  switch (scales) {
    case Fp8Scheme::WeightScales::kTensor: return "a scale per tensor";
    case Fp8Scheme::WeightScales::kChannel: return "a scale per output channel";
    case Fp8Scheme::WeightScales::kBlock: return "a scale per block";
  }
  return "?";
}

std::string_view to_string(Fp8Scheme::Activations activations) {
  switch (activations) {
    case Fp8Scheme::Activations::kNone: return "activations unquantised";
    case Fp8Scheme::Activations::kDynamicPerToken:
      return "activations quantised per token at run time";
    case Fp8Scheme::Activations::kDynamicPerTokenGroup:
      return "activations quantised per token and group of columns at run time";
    case Fp8Scheme::Activations::kDynamicPerTensor:
      return "activations quantised per tensor at run time";
    case Fp8Scheme::Activations::kStaticPerTensor:
      return "activations quantised with the checkpoint's input scales";
  }
  return "?";
}

std::string describe(const Fp8Scheme& scheme) {
  std::string text = "fp8 e4m3 weights, " + std::string(to_string(scheme.weight_scales));
  if (scheme.weight_scales == Fp8Scheme::WeightScales::kBlock) {
    text += " of " + std::to_string(scheme.block_rows) + " x " + std::to_string(scheme.block_cols);
  }
  text += ", " + std::string(to_string(scheme.activations));
  if (scheme.kv_cache_scales) text += ", KV cache scales";
  return text + " (" + scheme.method + ")";
}

namespace checkpoint_detail {
namespace {

using Scheme = Fp8Scheme;

/// A string field that must be one of `allowed` when present; nullopt (with a problem for a
/// value outside the list) otherwise.
std::optional<std::string> one_of(JsonFields& j, const JsonValue* map, std::string_view key,
                                  const std::string& field,
                                  std::initializer_list<std::string_view> allowed,
                                  std::string_view why = {}) {
  const std::optional<std::string> v = j.string(map, key, field);
  if (!v) return std::nullopt;
  for (std::string_view a : allowed) {
    if (*v == a) return v;
  }
  std::string list;
  for (std::string_view a : allowed) (list += list.empty() ? "" : ", ") += a;
  j.problem(JsonFields::get(map, key), field,
            quote(*v) + " is not supported" + (why.empty() ? "" : std::string(" (") += why) +
                (why.empty() ? "" : ")") + "; supported: " + list);
  return std::nullopt;
}

/// A list of strings (targets, ignore).
std::vector<std::string> strings(JsonFields& j, const JsonValue* map, std::string_view key,
                                 const std::string& field) {
  std::vector<std::string> out;
  const JsonValue* node = JsonFields::get(map, key);
  if (node == nullptr) return out;
  if (node->kind != JsonValue::Kind::kArray) {
    j.problem(node, field, "expected a list of strings, got " + j.kind_of(*node));
    return out;
  }
  for (const JsonValue& item : node->items) {
    if (item.kind != JsonValue::Kind::kString) {
      j.problem(&item, field, "expected a list of strings; this item is " + j.kind_of(item));
      continue;
    }
    out.push_back(item.string);
  }
  return out;
}

/// The [rows, cols] of a block: two positive integers.
bool block_shape(JsonFields& j, const JsonValue* map, std::string_view key,
                 const std::string& field, Scheme& s) {
  const JsonValue* node = JsonFields::get(map, key);
  if (node == nullptr) {
    j.missing(map, field);
    return false;
  }
  if (node->kind != JsonValue::Kind::kArray || node->items.size() != 2) {
    j.problem(node, field, "expected [rows, columns], got " + j.kind_of(*node));
    return false;
  }
  const auto rows = j.integer_value(node->items[0], field, 1, kMaxSize);
  const auto cols = j.integer_value(node->items[1], field, 1, kMaxSize);
  if (!rows || !cols) return false;
  s.block_rows = *rows;
  s.block_cols = *cols;
  return true;
}

/// The fields every compressed-tensors fp8 argument set shares: 8-bit floats, symmetric.
bool fp8_arguments(JsonFields& j, const JsonValue& args, const std::string& base) {
  if (args.kind != JsonValue::Kind::kObject) {
    j.problem(&args, base, "expected an object, got " + j.kind_of(args));
    return false;
  }
  bool ok = true;
  // compressed-tensors' defaults: 8 bits, type "int", symmetric.
  if (auto bits = j.integer(&args, "num_bits", base + ".num_bits", false, 1, 64);
      bits && *bits != 8) {
    j.problem(JsonFields::get(&args, "num_bits"), base + ".num_bits",
              std::to_string(*bits) + "-bit values are not supported; fp8 is 8");
    ok = false;
  }
  const JsonValue* type = JsonFields::get(&args, "type");
  if (type == nullptr) {
    j.problem(&args, base + ".type", "is missing, which means int; only float (fp8) is supported");
    ok = false;
  } else if (!one_of(j, &args, "type", base + ".type", {"float"}, "integer quantisation")) {
    ok = false;
  }
  if (!j.boolean(&args, "symmetric", base + ".symmetric").value_or(true)) {
    j.problem(JsonFields::get(&args, "symmetric"), base + ".symmetric",
              "false is not supported: fp8 scales have no zero point");
    ok = false;
  }
  return ok;
}

/// A group's weights: static, per tensor, channel or block.
bool ct_weights(JsonFields& j, const JsonValue* group, const std::string& base, Scheme& s) {
  const JsonValue* w = JsonFields::get(group, "weights");
  const std::string field = base + ".weights";
  if (w == nullptr) {
    j.missing(group, field);
    return false;
  }
  if (!fp8_arguments(j, *w, field)) return false;
  if (j.boolean(w, "dynamic", field + ".dynamic").value_or(false)) {
    j.problem(JsonFields::get(w, "dynamic"), field + ".dynamic",
              "true is not supported: weights are quantised in the file");
    return false;
  }
  const auto strategy =
      one_of(j, w, "strategy", field + ".strategy", {"tensor", "channel", "block"});
  if (!strategy) {
    if (JsonFields::get(w, "strategy") == nullptr)
      s.weight_scales = Scheme::WeightScales::kTensor;
    else
      return false;
  } else if (*strategy == "channel") {
    s.weight_scales = Scheme::WeightScales::kChannel;
  } else if (*strategy == "block") {
    s.weight_scales = Scheme::WeightScales::kBlock;
    if (!block_shape(j, w, "block_structure", field + ".block_structure", s)) return false;
  } else {
    s.weight_scales = Scheme::WeightScales::kTensor;
  }
  return true;
}

/// A group's input activations: none (weight-only), per token or per tensor.
bool ct_activations(JsonFields& j, const JsonValue* group, const std::string& base, Scheme& s) {
  const JsonValue* a = JsonFields::get(group, "input_activations");
  const std::string field = base + ".input_activations";
  s.activations = Scheme::Activations::kNone;
  if (a == nullptr) return true;
  if (!fp8_arguments(j, *a, field)) return false;
  const JsonValue* dynamic = JsonFields::get(a, "dynamic");
  if (dynamic != nullptr && dynamic->kind != JsonValue::Kind::kBool) {
    j.problem(dynamic, field + ".dynamic",
              j.kind_of(*dynamic) + " is not supported; supported: true, false");
    return false;
  }
  const bool is_dynamic = dynamic != nullptr && dynamic->boolean;
  const auto strategy = one_of(j, a, "strategy", field + ".strategy", {"token", "tensor"});
  if (!strategy) {
    if (JsonFields::get(a, "strategy") != nullptr) return false;
    j.missing(a, field + ".strategy");
    return false;
  }
  if (*strategy == "token") {
    if (!is_dynamic) {
      j.problem(a, field + ".dynamic",
                "a per-token scale is computed at run time: dynamic must be true");
      return false;
    }
    s.activations = Scheme::Activations::kDynamicPerToken;
  } else {
    s.activations =
        is_dynamic ? Scheme::Activations::kDynamicPerTensor : Scheme::Activations::kStaticPerTensor;
  }
  return true;
}

void read_compressed_tensors(JsonFields& j, const JsonValue& q, Scheme& s, bool& ok) {
  const std::string base = "quantization_config";
  const std::optional<std::string> format =
      one_of(j, &q, "format", base + ".format", {"float-quantized"});
  if (!format && JsonFields::get(&q, "format") != nullptr) ok = false;
  if (!one_of(j, &q, "quantization_status", base + ".quantization_status", {"compressed", "frozen"},
              "not a finished checkpoint") &&
      JsonFields::get(&q, "quantization_status") != nullptr) {
    ok = false;
  }
  const JsonValue* groups = JsonFields::get(&q, "config_groups");
  if (groups == nullptr || groups->kind != JsonValue::Kind::kObject || groups->members.empty()) {
    if (groups == nullptr)
      j.missing(&q, base + ".config_groups");
    else
      j.problem(groups, base + ".config_groups", "expected an object of at least one group");
    ok = false;
    return;
  }
  std::optional<Scheme> first;
  std::string first_name;
  for (const auto& [name, group] : groups->members) {
    const std::string field = base + ".config_groups." + printable(name, 60);
    if (group.kind != JsonValue::Kind::kObject) {
      j.problem(&group, field, "expected an object, got " + j.kind_of(group));
      ok = false;
      continue;
    }
    if (JsonFields::get(&group, "targets") == nullptr) j.missing(&group, field + ".targets");
    (void)strings(j, &group, "targets", field + ".targets");
    const bool group_format = JsonFields::get(&group, "format") != nullptr;
    if (group_format && !one_of(j, &group, "format", field + ".format", {"float-quantized"})) {
      ok = false;
      continue;
    }
    if (!group_format && !format) {
      j.problem(&group, field + ".format",
                "is missing here and in quantization_config; float-quantized is supported");
      ok = false;
      continue;
    }
    if (const JsonValue* out = JsonFields::get(&group, "output_activations")) {
      j.problem(out, field + ".output_activations", "quantised outputs are not supported");
      ok = false;
      continue;
    }
    Scheme g = s;
    if (!ct_weights(j, &group, field, g) || !ct_activations(j, &group, field, g)) {
      ok = false;
      continue;
    }
    if (!first) {
      first = g;
      first_name = name;
    } else if (g.weight_scales != first->weight_scales || g.block_rows != first->block_rows ||
               g.block_cols != first->block_cols || g.activations != first->activations) {
      j.problem(&group, field,
                "quantises differently from group " + quote(first_name) +
                    "; one scheme for every quantised layer is supported");
      ok = false;
    }
  }
  if (first) {
    s.weight_scales = first->weight_scales;
    s.block_rows = first->block_rows;
    s.block_cols = first->block_cols;
    s.activations = first->activations;
  }
  s.ignore = strings(j, &q, "ignore", base + ".ignore");
  if (const JsonValue* kv = JsonFields::get(&q, "kv_cache_scheme")) {
    const std::string field = base + ".kv_cache_scheme";
    if (!fp8_arguments(j, *kv, field)) {
      ok = false;
      return;
    }
    if (!one_of(j, kv, "strategy", field + ".strategy", {"tensor"}) ||
        j.boolean(kv, "dynamic", field + ".dynamic").value_or(false)) {
      if (JsonFields::get(kv, "strategy") == nullptr)
        j.missing(kv, field + ".strategy");
      else if (j.boolean(kv, "dynamic", field + ".dynamic").value_or(false))
        j.problem(JsonFields::get(kv, "dynamic"), field + ".dynamic",
                  "true is not supported: the scales are the checkpoint's");
      ok = false;
      return;
    }
    s.kv_cache_scales = true;
  }
}

void read_fp8_method(JsonFields& j, const JsonValue& q, Scheme& s, bool& ok) {
  const std::string base = "quantization_config";
  if (JsonFields::get(&q, "fmt") != nullptr && !one_of(j, &q, "fmt", base + ".fmt", {"e4m3"})) {
    ok = false;
  }
  const JsonValue* block = JsonFields::get(&q, "weight_block_size");
  if (block != nullptr) {
    // transformers' fine-grained fp8: 128 × 128 weight blocks whose scales it names
    // weight_scale_inv (multipliers all the same), activations quantised per token and block
    // of columns at run time.
    s.weight_scales = Scheme::WeightScales::kBlock;
    s.scale_suffix = "weight_scale_inv";
    if (!block_shape(j, &q, "weight_block_size", base + ".weight_block_size", s)) ok = false;
  }
  const std::optional<std::string> scheme =
      one_of(j, &q, "activation_scheme", base + ".activation_scheme", {"dynamic", "static"});
  if (!scheme && JsonFields::get(&q, "activation_scheme") != nullptr) ok = false;
  const bool dynamic = scheme.value_or("dynamic") == "dynamic";
  if (block != nullptr) {
    if (!dynamic) {
      j.problem(JsonFields::get(&q, "activation_scheme"), base + ".activation_scheme",
                "static activation scales with weight blocks are not supported");
      ok = false;
    }
    s.activations = Scheme::Activations::kDynamicPerTokenGroup;
  } else {
    s.activations =
        dynamic ? Scheme::Activations::kDynamicPerTensor : Scheme::Activations::kStaticPerTensor;
  }
  for (const char* key : {"modules_to_not_convert", "ignored_layers"}) {
    for (std::string& m : strings(j, &q, key, base + "." + key)) s.ignore.push_back(std::move(m));
  }
}

}  // namespace

void read_quantization(JsonFields& j, const JsonValue& root, CheckpointConfig& c) {
  const JsonValue* q = JsonFields::get(&root, "quantization_config");
  if (q == nullptr) return;
  if (q->kind != JsonValue::Kind::kObject) {
    j.problem(q, "quantization_config", "expected an object, got " + j.kind_of(*q));
    return;
  }
  const std::optional<std::string> method = one_of(
      j, q, "quant_method", "quantization_config.quant_method", {"compressed-tensors", "fp8"});
  if (!method) {
    if (JsonFields::get(q, "quant_method") == nullptr) {
      j.missing(q, "quantization_config.quant_method");
    }
    return;
  }
  Scheme s;
  s.method = *method;
  s.origin = j.where(q) + ": quantization_config";
  bool ok = true;
  if (*method == "compressed-tensors") {
    read_compressed_tensors(j, *q, s, ok);
  } else {
    read_fp8_method(j, *q, s, ok);
  }
  if (ok) c.fp8 = std::move(s);
}

}  // namespace checkpoint_detail
}  // namespace freezeframe
