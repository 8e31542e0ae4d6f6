// A Hugging Face config.json read into a CheckpointConfig. The JSON is parsed by yaml-cpp (JSON
// is YAML's flow style), which keeps every value's line and column and tells quoted strings
// from numbers; each problem names the file, the line and the field. Defaults are those of the
// transformers config classes; fields these families do not have are ignored.

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

#include "checkpoint_config_reader.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/json_value.h"
#include "freezeframe/base/printable.h"

namespace freezeframe::checkpoint_detail {
namespace {

/// Typed reads of the config's fields; each mistake becomes one problem and reading goes on.
class JsonFields {
 public:
  JsonFields(std::string file, CheckpointConfig& config, std::vector<std::string>& problems)
      : file_(std::move(file)), config_(config), problems_(problems) {}

  [[nodiscard]] std::string where(const YAML::Node& node) const {
    const YAML::Mark mark = node.Mark();
    if (mark.is_null()) return printable(file_, 200);
    return printable(file_, 200) + ":" + std::to_string(mark.line + 1) + ":" +
           std::to_string(mark.column + 1);
  }
  void problem(const YAML::Node& at, std::string_view field, std::string_view message) {
    problems_.push_back(problem_text(where(at), field, message));
  }
  /// Records where the checkpoint states a ModelSpec field.
  void origin(std::string_view spec_field, const YAML::Node& at, std::string_view field) {
    config_.origins[std::string(spec_field)] = where(at) + ": " + std::string(field);
  }

  /// map[key], first occurrence; undefined when absent or null (null means "not set").
  [[nodiscard]] static YAML::Node get(const YAML::Node& map, std::string_view key) {
    if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) {
        return it->second.IsNull() ? YAML::Node(YAML::NodeType::Undefined) : it->second;
      }
    }
    return YAML::Node(YAML::NodeType::Undefined);
  }

  /// What a value is, for "expected X, got Y".
  [[nodiscard]] static std::string kind_of(const YAML::Node& node) {
    if (node.IsSequence()) return "a list";
    if (node.IsMap()) return "an object";
    if (node.Tag() == "!") return "the string " + quote(node.Scalar());
    return quote(node.Scalar());
  }
  /// A plain (unquoted) scalar: a JSON number, true or false.
  [[nodiscard]] static bool is_plain(const YAML::Node& node) {
    return node.IsScalar() && node.Tag() != "!";
  }

  void missing(const YAML::Node& map, std::string_view field) {
    problem(map, field, "is required but missing");
  }

  std::optional<std::int64_t> integer(const YAML::Node& map, std::string_view key,
                                      std::string_view field, bool required, std::int64_t min = 1,
                                      std::int64_t max = kMaxSize) {
    const YAML::Node node = get(map, key);
    if (!node.IsDefined()) {
      if (required) missing(map, field);
      return std::nullopt;
    }
    return integer_value(node, field, min, max);
  }

  /// The integer `node` holds, in [min, max].
  std::optional<std::int64_t> integer_value(const YAML::Node& node, std::string_view field,
                                            std::int64_t min, std::int64_t max) {
    std::int64_t value = 0;
    const std::string& text = node.Scalar();
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (!is_plain(node) || text.empty() || end != text.data() + text.size()) {
      problem(node, field, "expected an integer, got " + kind_of(node));
      return std::nullopt;
    }
    if (ec != std::errc() || value < min || value > max) {
      problem(node, field,
              "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                  quote(text));
      return std::nullopt;
    }
    return value;
  }

  /// A finite number greater than 0.
  std::optional<double> positive(const YAML::Node& map, std::string_view key,
                                 std::string_view field, bool required) {
    const YAML::Node node = get(map, key);
    if (!node.IsDefined()) {
      if (required) missing(map, field);
      return std::nullopt;
    }
    double value = 0;
    const std::string& text = node.Scalar();
    // Digits only: from_chars would also take "inf" and "nan", which JSON does not have.
    const bool digits = text.find_first_not_of("0123456789.eE+-") == std::string::npos;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (!is_plain(node) || text.empty() || !digits || end != text.data() + text.size()) {
      problem(node, field, "expected a number, got " + kind_of(node));
      return std::nullopt;
    }
    // Kept as a 32-bit float: a value that would become 0, a denormal or infinity there is
    // refused rather than changed.
    if (ec != std::errc() || !std::isfinite(value) || value < std::numeric_limits<float>::min() ||
        value > std::numeric_limits<float>::max()) {
      problem(node, field,
              "must be a positive number that a 32-bit float holds as a normal value, got " +
                  quote(text));
      return std::nullopt;
    }
    return value;
  }

  std::optional<bool> boolean(const YAML::Node& map, std::string_view key, std::string_view field) {
    const YAML::Node node = get(map, key);
    if (!node.IsDefined()) return std::nullopt;
    if (is_plain(node) && (node.Scalar() == "true" || node.Scalar() == "false")) {
      return node.Scalar() == "true";
    }
    problem(node, field, "expected true or false, got " + kind_of(node));
    return std::nullopt;
  }

  std::optional<std::string> string(const YAML::Node& map, std::string_view key,
                                    std::string_view field) {
    const YAML::Node node = get(map, key);
    if (!node.IsDefined()) return std::nullopt;
    if (node.IsScalar() && node.Tag() == "!") return node.Scalar();
    problem(node, field, "expected a string, got " + kind_of(node));
    return std::nullopt;
  }

 private:
  std::string file_;
  CheckpointConfig& config_;
  std::vector<std::string>& problems_;
};

/// The architecture: architectures[0], else model_type (configs written by a config class
/// alone have no architectures).
std::optional<ModelFamily> read_family(JsonFields& j, const YAML::Node& root, CheckpointConfig& c) {
  const YAML::Node list = JsonFields::get(root, "architectures");
  YAML::Node at = list;
  if (list.IsDefined()) {
    if (!list.IsSequence() || list.size() == 0 || !list[0].IsScalar() || list[0].Tag() != "!") {
      j.problem(list, "architectures",
                "expected a list of architecture names, got " + JsonFields::kind_of(list));
      return std::nullopt;
    }
    at.reset(list[0]);  // not "=", which would assign through to the list
    c.architecture = list[0].Scalar();
  } else if (auto type = j.string(root, "model_type", "model_type")) {
    at.reset(JsonFields::get(root, "model_type"));
    c.architecture = *type;
  } else {
    if (!JsonFields::get(root, "model_type").IsDefined()) {
      j.problem(root, "architectures", "is required but missing (and there is no model_type)");
    }
    return std::nullopt;
  }
  const std::optional<ModelFamily> family = hf_family(c.architecture);
  if (!family) {
    j.problem(at, list.IsDefined() ? "architectures" : "model_type",
              "architecture " + quote(c.architecture) + " in " + printable(c.config_file, 200) +
                  " is not supported; supported: " +
                  supported_architectures(CheckpointFormat::kHuggingFace));
  }
  return family;
}

/// rope_scaling (or rope_parameters, as transformers 5 writes it): none or Llama 3's.
void read_rope_scaling(JsonFields& j, const YAML::Node& map, std::string_view field,
                       CheckpointConfig& c) {
  const std::string base(field);
  if (!map.IsMap()) {
    j.problem(map, field, "expected an object, got " + JsonFields::kind_of(map));
    return;
  }
  // Older configs call rope_type "type".
  const bool named_type = JsonFields::get(map, "rope_type").IsDefined();
  const std::string type_key = named_type ? "rope_type" : "type";
  const std::optional<std::string> type = j.string(map, type_key, base + "." + type_key);
  if (!type) {
    if (!JsonFields::get(map, type_key).IsDefined()) j.missing(map, base + ".rope_type");
    return;
  }
  if (*type == "default") return;
  if (*type != "llama3") {
    j.problem(JsonFields::get(map, type_key), base + "." + type_key,
              "RoPE scaling " + quote(*type) + " is not supported; supported: default, llama3");
    return;
  }
  Llama3RopeScaling s;
  const auto factor = j.positive(map, "factor", base + ".factor", true);
  const auto low = j.positive(map, "low_freq_factor", base + ".low_freq_factor", true);
  const auto high = j.positive(map, "high_freq_factor", base + ".high_freq_factor", true);
  const auto original = j.integer(map, "original_max_position_embeddings",
                                  base + ".original_max_position_embeddings", true);
  if (!factor || !low || !high || !original) return;
  // The interpolation between the two wavelengths divides by their difference.
  if (!(*high > *low)) {
    j.problem(
        JsonFields::get(map, "high_freq_factor"), base + ".high_freq_factor",
        "must be greater than low_freq_factor " + JsonFields::get(map, "low_freq_factor").Scalar());
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
void read_sliding_window(JsonFields& j, const YAML::Node& root, CheckpointConfig& c) {
  if (c.family == ModelFamily::kLlama) return;
  if (c.family == ModelFamily::kQwen2 &&
      !j.boolean(root, "use_sliding_window", "use_sliding_window").value_or(false)) {
    return;
  }
  const auto window = j.integer(root, "sliding_window", "sliding_window", false, 0);
  if (!window || *window == 0) return;
  int first = 0;
  if (c.family == ModelFamily::kQwen2) {
    // transformers' default when the config does not say.
    first = static_cast<int>(
        j.integer(root, "max_window_layers", "max_window_layers", false, 0).value_or(28));
  }
  j.origin("sliding_window", JsonFields::get(root, "sliding_window"), "sliding_window");
  if (c.num_layers <= 0) return;
  c.sliding_windows.assign(static_cast<std::size_t>(c.num_layers), 0);
  for (int l = std::min(first, c.num_layers); l < c.num_layers; ++l) {
    c.sliding_windows[l] = static_cast<int>(*window);
  }
  if (first >= c.num_layers) c.sliding_windows.clear();
}

/// eos_token_id: one id or a list of them (Llama 3.1 Instruct ends at any of three), each a
/// token of the vocabulary.
void read_eos(JsonFields& j, const YAML::Node& root, CheckpointConfig& c) {
  const YAML::Node node = JsonFields::get(root, "eos_token_id");
  if (!node.IsDefined()) return;
  const std::int64_t last = c.vocab_size > 0 ? c.vocab_size - 1 : kMaxSize;
  const auto take = [&](const YAML::Node& id) {
    if (auto v = j.integer_value(id, "eos_token_id", 0, last)) {
      c.eos_token_ids.push_back(static_cast<std::int32_t>(*v));
    }
  };
  if (node.IsSequence()) {
    for (std::size_t i = 0; i < node.size(); ++i) take(node[i]);
  } else {
    take(node);
  }
}

/// The line where `json` first nests deeper than kMaxJsonDepth arrays and objects, if it does.
/// Checked before yaml-cpp parses it: its own guard stops at 500 levels with "bad file", and a
/// config nests a few levels.
std::optional<std::size_t> too_deep_at(std::string_view json) {
  int depth = 0;
  std::size_t line = 1;
  bool in_string = false, escaped = false;
  for (const char c : json) {
    if (c == '\n') ++line;
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) return line;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return std::nullopt;
}

/// The JSON object `file` holds (a config.json or generation_config.json, `what` in messages),
/// or nothing with a problem appended.
std::optional<YAML::Node> read_json_object(const std::string& file, const char* what, JsonFields& j,
                                           std::vector<std::string>& problems) {
  const std::string text = read_input_file(file, what, kMaxCheckpointConfigBytes);
  // Only an object is a config; checked first, so text that is not JSON at all (a GGUF file's
  // neighbour, a YAML document) is refused as such rather than parsed.
  const std::size_t bom = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  const std::size_t first = text.find_first_not_of(" \t\r\n", bom);
  if (first == std::string::npos || text[first] != '{') {
    problems.push_back(problem_text(
        printable(file, 200), "",
        std::string("a ") + what + " is a JSON object ({...}), got " +
            (first == std::string::npos ? std::string("an empty file")
                                        : quote(std::string_view(text).substr(first, 20)))));
    return std::nullopt;
  }
  if (const auto line = too_deep_at(text)) {
    problems.push_back(printable(file, 200) + ": nesting deeper than " +
                       std::to_string(kMaxJsonDepth) + " levels at line " + std::to_string(*line));
    return std::nullopt;
  }
  YAML::Node root(YAML::NodeType::Undefined);
  try {
    root.reset(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    problems.push_back(printable(file, 200) + ":" + std::to_string(e.mark.line + 1) + ":" +
                       std::to_string(e.mark.column + 1) +
                       ": JSON syntax error: " + printable(e.msg));
    return std::nullopt;
  }
  if (!root.IsMap()) {
    problems.push_back(
        problem_text(j.where(root), "", std::string("a ") + what + " is a JSON object"));
    return std::nullopt;
  }
  return root;
}

}  // namespace

void read_hf_config(const std::string& file, CheckpointConfig& c,
                    std::vector<std::string>& problems) {
  JsonFields j(file, c, problems);
  const std::optional<YAML::Node> object = read_json_object(file, "checkpoint config", j, problems);
  if (!object) return;
  const YAML::Node& root = *object;

  const std::optional<ModelFamily> family = read_family(j, root, c);
  if (!family) return;
  c.family = *family;

  // A ModelSpec field from a config key, recording where the config states it.
  const auto size = [&](std::string_view spec_field, std::string_view key, bool required,
                        int& out) {
    if (auto v = j.integer(root, key, key, required)) {
      out = static_cast<int>(*v);
      j.origin(spec_field, JsonFields::get(root, key), key);
    }
  };
  size("num_layers", "num_hidden_layers", true, c.num_layers);
  size("hidden_size", "hidden_size", true, c.hidden_size);
  size("num_heads", "num_attention_heads", true, c.num_heads);
  size("num_kv_heads", "num_key_value_heads", false, c.num_kv_heads);
  size("head_size", "head_dim", false, c.head_size);
  size("intermediate_size", "intermediate_size", true, c.intermediate_size);
  size("vocab_size", "vocab_size", true, c.vocab_size);
  if (auto v = j.integer(root, "max_position_embeddings", "max_position_embeddings", true)) {
    c.max_position_embeddings = *v;
    j.origin("max_position_embeddings", JsonFields::get(root, "max_position_embeddings"),
             "max_position_embeddings");
  }
  if (auto v = j.positive(root, "rms_norm_eps", "rms_norm_eps", true)) {
    c.rms_norm_eps = static_cast<float>(*v);
    j.origin("rms_norm_eps", JsonFields::get(root, "rms_norm_eps"), "rms_norm_eps");
  }
  const YAML::Node rope_parameters = JsonFields::get(root, "rope_parameters");
  if (auto v = j.positive(root, "rope_theta", "rope_theta", false)) {
    c.rope_theta = static_cast<float>(*v);
    j.origin("rope_theta", JsonFields::get(root, "rope_theta"), "rope_theta");
  } else if (auto p =
                 j.positive(rope_parameters, "rope_theta", "rope_parameters.rope_theta", false)) {
    c.rope_theta = static_cast<float>(*p);
    j.origin("rope_theta", JsonFields::get(rope_parameters, "rope_theta"),
             "rope_parameters.rope_theta");
  }
  if (auto v = j.boolean(root, "tie_word_embeddings", "tie_word_embeddings")) {
    c.tie_word_embeddings = *v;
    j.origin("tie_word_embeddings", JsonFields::get(root, "tie_word_embeddings"),
             "tie_word_embeddings");
  }
  // transformers 5 writes "dtype", earlier versions "torch_dtype".
  const char* dtype_key = JsonFields::get(root, "dtype").IsDefined() ? "dtype" : "torch_dtype";
  if (auto v = j.string(root, dtype_key, dtype_key)) {
    if (*v == "bfloat16" || *v == "float16" || *v == "float32") {
      c.dtype = parse_dtype(*v);
    } else {
      j.problem(JsonFields::get(root, dtype_key), dtype_key,
                "expected bfloat16, float16 or float32, got " + quote(*v));
    }
  }
  if (auto v = j.string(root, "hidden_act", "hidden_act"); v && *v != "silu") {
    j.problem(JsonFields::get(root, "hidden_act"), "hidden_act",
              "the MLP is gated SiLU in the model program; got " + quote(*v));
  }
  if (c.family == ModelFamily::kLlama) {
    // Llama's attention_bias also biases the output projection, which the program lacks.
    for (const char* key : {"attention_bias", "mlp_bias"}) {
      if (j.boolean(root, key, key).value_or(false)) {
        j.problem(JsonFields::get(root, key), key,
                  "true is not supported: the model program has no such bias");
      }
    }
  }
  c.qkv_bias = c.family == ModelFamily::kQwen2;
  if (const YAML::Node scaling = JsonFields::get(root, "rope_scaling"); scaling.IsDefined()) {
    read_rope_scaling(j, scaling, "rope_scaling", c);
  } else if (rope_parameters.IsDefined()) {
    read_rope_scaling(j, rope_parameters, "rope_parameters", c);
  }

  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.head_size == 0 && c.num_heads > 0 && c.hidden_size > 0) {
    if (c.hidden_size % c.num_heads != 0) {
      j.problem(JsonFields::get(root, "hidden_size"), "head_dim",
                "is not given and hidden_size " + std::to_string(c.hidden_size) +
                    " is not divisible by num_attention_heads " + std::to_string(c.num_heads));
    } else {
      c.head_size = c.hidden_size / c.num_heads;
    }
  }
  read_sliding_window(j, root, c);
  read_eos(j, root, c);
}

void read_hf_generation_config(const std::string& file, CheckpointConfig& c,
                               std::vector<std::string>& problems) {
  JsonFields j(file, c, problems);
  const std::optional<YAML::Node> object = read_json_object(file, "generation config", j, problems);
  if (!object) return;
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
