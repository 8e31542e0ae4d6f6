// A Hugging Face config.json read into a CheckpointConfig. The JSON is parsed as JSON (see
// json_value.h): a repeated key keeps its last value, as Python's json and so transformers do,
// and each problem names the file, the line, the column and the field. Defaults are those of
// the transformers config classes; fields these families do not have are ignored. DeepSeek-V2's
// own fields are read by hf_deepseek.cpp.

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

#include "checkpoint_config_reader.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/json_value.h"
#include "freezeframe/base/printable.h"
#include "json_fields.h"

namespace freezeframe::checkpoint_detail {
namespace {

/// The architecture: architectures[0], else model_type (configs written by a config class
/// alone have no architectures).
std::optional<ModelFamily> read_family(JsonFields& j, const JsonValue& root, CheckpointConfig& c) {
  const JsonValue* list = JsonFields::get(&root, "architectures");
  const JsonValue* at = list;
  if (list != nullptr) {
    if (list->kind != JsonValue::Kind::kArray || list->items.empty() ||
        list->items[0].kind != JsonValue::Kind::kString) {
      j.problem(list, "architectures",
                "expected a list of architecture names, got " + j.kind_of(*list));
      return std::nullopt;
    }
    at = &list->items[0];
    c.architecture = at->string;
  } else if (auto type = j.string(&root, "model_type", "model_type")) {
    at = JsonFields::get(&root, "model_type");
    c.architecture = *type;
  } else {
    if (JsonFields::get(&root, "model_type") == nullptr) {
      j.problem(&root, "architectures", "is required but missing (and there is no model_type)");
    }
    return std::nullopt;
  }
  const std::optional<ModelFamily> family = hf_family(c.architecture);
  if (!family) {
    j.problem(at, list != nullptr ? "architectures" : "model_type",
              "architecture " + quote(c.architecture) + " in " + printable(c.config_file, 200) +
                  " is not supported; supported: " +
                  supported_architectures(CheckpointFormat::kHuggingFace));
  }
  return family;
}

/// rope_scaling (or rope_parameters, as transformers 5 writes it): none or Llama 3's.
void read_rope_scaling(JsonFields& j, const JsonValue& map, std::string_view field,
                       CheckpointConfig& c) {
  const std::string base(field);
  if (map.kind != JsonValue::Kind::kObject) {
    j.problem(&map, field, "expected an object, got " + j.kind_of(map));
    return;
  }
  // Older configs call rope_type "type".
  const bool named_type = JsonFields::get(&map, "rope_type") != nullptr;
  const std::string type_key = named_type ? "rope_type" : "type";
  const std::optional<std::string> type = j.string(&map, type_key, base + "." + type_key);
  if (!type) {
    if (JsonFields::get(&map, type_key) == nullptr) j.missing(&map, base + ".rope_type");
    return;
  }
  if (*type == "default") return;
  // YaRN only where the model program applies it: DeepSeek-V2's latent attention.
  const bool deepseek = c.family == ModelFamily::kDeepseekV2;
  if (deepseek && *type == "yarn") return read_yarn_scaling(j, map, base, c);
  if (*type != "llama3" || deepseek) {
    j.problem(JsonFields::get(&map, type_key), base + "." + type_key,
              "RoPE scaling " + quote(*type) + " is not supported; supported: " +
                  (deepseek ? "default, yarn" : "default, llama3"));
    return;
  }
  Llama3RopeScaling s;
  const auto factor = j.positive(&map, "factor", base + ".factor", true);
  const auto low = j.positive(&map, "low_freq_factor", base + ".low_freq_factor", true);
  const auto high = j.positive(&map, "high_freq_factor", base + ".high_freq_factor", true);
  const auto original = j.integer(&map, "original_max_position_embeddings",
                                  base + ".original_max_position_embeddings", true);
  if (!factor || !low || !high || !original) return;
  // The interpolation between the two wavelengths divides by their difference.
  if (!(*high > *low)) {
    j.problem(JsonFields::get(&map, "high_freq_factor"), base + ".high_freq_factor",
              "must be greater than low_freq_factor " +
                  std::string(j.number_text(*JsonFields::get(&map, "low_freq_factor"))));
    return;
  }
  s.factor = *factor;
  s.low_freq_factor = *low;
  s.high_freq_factor = *high;
  s.original_max_position_embeddings = *original;
  c.rope_scaling = s;
}

/// The window of each layer: Mistral's covers every layer, Qwen2's (when use_sliding_window)
/// the layers from max_window_layers on, as the transformers classes apply them.
void read_sliding_window(JsonFields& j, const JsonValue& root, CheckpointConfig& c) {
  if (c.family == ModelFamily::kLlama) return;
  if (c.family == ModelFamily::kQwen2 &&
      !j.boolean(&root, "use_sliding_window", "use_sliding_window").value_or(false)) {
    return;
  }
  const auto window = j.integer(&root, "sliding_window", "sliding_window", false, 0);
  if (!window || *window == 0) return;
  int first = 0;
  if (c.family == ModelFamily::kQwen2) {
    // transformers' default when the config does not say.
    first = static_cast<int>(
        j.integer(&root, "max_window_layers", "max_window_layers", false, 0).value_or(28));
  }
  j.origin("sliding_window", JsonFields::get(&root, "sliding_window"), "sliding_window");
  if (c.num_layers <= 0) return;
  c.sliding_windows.assign(static_cast<std::size_t>(c.num_layers), 0);
  for (int l = std::min(first, c.num_layers); l < c.num_layers; ++l) {
    c.sliding_windows[l] = static_cast<int>(*window);
  }
  if (first >= c.num_layers) c.sliding_windows.clear();
}

/// eos_token_id: one id or a list of them (Llama 3.1 Instruct ends at any of three), each a
/// token of the vocabulary.
void read_eos(JsonFields& j, const JsonValue& root, CheckpointConfig& c) {
  const JsonValue* node = JsonFields::get(&root, "eos_token_id");
  if (node == nullptr) return;
  const std::int64_t last = c.vocab_size > 0 ? c.vocab_size - 1 : kMaxSize;
  const auto take = [&](const JsonValue& id) {
    if (auto v = j.integer_value(id, "eos_token_id", 0, last)) {
      c.eos_token_ids.push_back(static_cast<std::int32_t>(*v));
    }
  };
  if (node->kind == JsonValue::Kind::kArray) {
    for (const JsonValue& id : node->items) take(id);
  } else {
    take(*node);
  }
}

/// The JSON object `text` (the file `file`, a config.json or generation_config.json, `what`
/// in messages) holds, or nothing with a problem appended.
std::optional<JsonValue> read_json_object(const std::string& file, std::string_view text,
                                          const char* what, std::vector<std::string>& problems) {
  // Only an object is a config; checked first, so text that is not JSON at all (a GGUF file's
  // neighbour, a YAML document) is refused as such rather than parsed.
  const std::size_t bom = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  const std::size_t first = text.find_first_not_of(" \t\r\n", bom);
  if (first == std::string::npos || text[first] != '{') {
    problems.push_back(
        problem_text(printable(file, 200), "",
                     std::string("a ") + what + " is a JSON object ({...}), got " +
                         (first == std::string::npos ? std::string("an empty file")
                                                     : quote(text.substr(first, 20)))));
    return std::nullopt;
  }
  try {
    return parse_json(text, printable(file, 200));
  } catch (const Error& e) {
    problems.push_back(e.message());
    return std::nullopt;
  }
}

}  // namespace

void read_hf_config(const std::string& file, CheckpointConfig& c,
                    std::vector<std::string>& problems) {
  const std::string text = read_input_file(file, "checkpoint config", kMaxCheckpointConfigBytes);
  const std::optional<JsonValue> object =
      read_json_object(file, text, "checkpoint config", problems);
  if (!object) return;
  const JsonValue& root = *object;
  JsonFields j(file, text, c, problems);

  const std::optional<ModelFamily> family = read_family(j, root, c);
  if (!family) return;
  c.family = *family;

  // A ModelSpec field from a config key, recording where the config states it.
  const auto size = [&](std::string_view spec_field, std::string_view key, bool required,
                        int& out) {
    if (auto v = j.integer(&root, key, key, required)) {
      out = static_cast<int>(*v);
      j.origin(spec_field, JsonFields::get(&root, key), key);
    }
  };
  size("num_layers", "num_hidden_layers", true, c.num_layers);
  size("hidden_size", "hidden_size", true, c.hidden_size);
  size("num_heads", "num_attention_heads", true, c.num_heads);
  size("num_kv_heads", "num_key_value_heads", false, c.num_kv_heads);
  // DeepSeek-V2's head_dim is its rotary part; its head size comes from the MLA sizes.
  if (c.family != ModelFamily::kDeepseekV2) size("head_size", "head_dim", false, c.head_size);
  size("intermediate_size", "intermediate_size", true, c.intermediate_size);
  size("vocab_size", "vocab_size", true, c.vocab_size);
  if (auto v = j.integer(&root, "max_position_embeddings", "max_position_embeddings", true)) {
    c.max_position_embeddings = *v;
    j.origin("max_position_embeddings", JsonFields::get(&root, "max_position_embeddings"),
             "max_position_embeddings");
  }
  if (auto v = j.positive(&root, "rms_norm_eps", "rms_norm_eps", true)) {
    c.rms_norm_eps = static_cast<float>(*v);
    j.origin("rms_norm_eps", JsonFields::get(&root, "rms_norm_eps"), "rms_norm_eps");
  }
  const JsonValue* rope_parameters = JsonFields::get(&root, "rope_parameters");
  if (auto v = j.positive(&root, "rope_theta", "rope_theta", false)) {
    c.rope_theta = static_cast<float>(*v);
    j.origin("rope_theta", JsonFields::get(&root, "rope_theta"), "rope_theta");
  } else if (auto p =
                 j.positive(rope_parameters, "rope_theta", "rope_parameters.rope_theta", false)) {
    c.rope_theta = static_cast<float>(*p);
    j.origin("rope_theta", JsonFields::get(rope_parameters, "rope_theta"),
             "rope_parameters.rope_theta");
  }
  if (auto v = j.boolean(&root, "tie_word_embeddings", "tie_word_embeddings")) {
    c.tie_word_embeddings = *v;
    j.origin("tie_word_embeddings", JsonFields::get(&root, "tie_word_embeddings"),
             "tie_word_embeddings");
  }
  // transformers 5 writes "dtype", earlier versions "torch_dtype".
  const char* dtype_key = JsonFields::get(&root, "dtype") != nullptr ? "dtype" : "torch_dtype";
  if (auto v = j.string(&root, dtype_key, dtype_key)) {
    if (*v == "bfloat16" || *v == "float16" || *v == "float32") {
      c.dtype = parse_dtype(*v);
    } else {
      j.problem(JsonFields::get(&root, dtype_key), dtype_key,
                "expected bfloat16, float16 or float32, got " + quote(*v));
    }
  }
  if (auto v = j.string(&root, "hidden_act", "hidden_act"); v && *v != "silu") {
    j.problem(JsonFields::get(&root, "hidden_act"), "hidden_act",
              "the MLP is gated SiLU in the model program; got " + quote(*v));
  }
  if (c.family == ModelFamily::kLlama) {
    // Llama's attention_bias also biases the output projection, which the program lacks.
    for (const char* key : {"attention_bias", "mlp_bias"}) {
      if (j.boolean(&root, key, key).value_or(false)) {
        j.problem(JsonFields::get(&root, key), key,
                  "true is not supported: the model program has no such bias");
      }
    }
  }
  c.qkv_bias = c.family == ModelFamily::kQwen2;
  if (c.family == ModelFamily::kDeepseekV2) read_deepseek_v2(j, root, c);
  if (const JsonValue* scaling = JsonFields::get(&root, "rope_scaling")) {
    read_rope_scaling(j, *scaling, "rope_scaling", c);
  } else if (rope_parameters != nullptr) {
    read_rope_scaling(j, *rope_parameters, "rope_parameters", c);
  }

  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.head_size == 0 && c.num_heads > 0 && c.hidden_size > 0) {
    if (c.hidden_size % c.num_heads != 0) {
      j.problem(JsonFields::get(&root, "hidden_size"), "head_dim",
                "is not given and hidden_size " + std::to_string(c.hidden_size) +
                    " is not divisible by num_attention_heads " + std::to_string(c.num_heads));
    } else {
      c.head_size = c.hidden_size / c.num_heads;
    }
  }
  read_sliding_window(j, root, c);
  read_eos(j, root, c);
  read_quantization(j, root, c);
}

void read_hf_generation_config(const std::string& file, CheckpointConfig& c,
                               std::vector<std::string>& problems) {
  const std::string text = read_input_file(file, "generation config", kMaxCheckpointConfigBytes);
  const std::optional<JsonValue> object =
      read_json_object(file, text, "generation config", problems);
  if (!object) return;
  JsonFields j(file, text, c, problems);
  // Its eos_token_id joins config.json's (instruction models often end turns at a token the
  // base config does not list).
  std::vector<std::int32_t> base = std::move(c.eos_token_ids);
  c.eos_token_ids.clear();
  read_eos(j, *object, c);
  for (const std::int32_t id : c.eos_token_ids) {
    if (std::find(base.begin(), base.end(), id) == base.end()) base.push_back(id);
  }
  c.eos_token_ids = std::move(base);
}

}  // namespace freezeframe::checkpoint_detail
