// A GGUF file's metadata read into a CheckpointConfig: the keys llama.cpp writes for the
// architecture ("<arch>.block_count", ...), the vocabulary from <arch>.vocab_size or the
// tokenizer's token list, and from the tensors it holds whether the LM head is tied (no
// output.weight) and the factors RoPE frequencies are divided by (rope_freqs.weight).

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint_config_reader.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/checkpoints/gguf_file.h"

namespace freezeframe::checkpoint_detail {
namespace {

/// GGML file types of unquantised checkpoints (llama.cpp's LLAMA_FTYPE_ALL_F32, MOSTLY_F16,
/// MOSTLY_BF16); a quantised one has no single dtype.
std::optional<DType> file_type_dtype(std::int64_t file_type) {
  switch (file_type) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 32: return DType::kBF16;
    default: return std::nullopt;
  }
}

std::string_view kind_name(const GgufValue& v) {
  switch (v.kind) {
    case GgufValue::Kind::kInt: return "an integer";
    case GgufValue::Kind::kFloat: return "a float";
    case GgufValue::Kind::kBool: return "a bool";
    case GgufValue::Kind::kString: return "a string";
    case GgufValue::Kind::kArray: return "an array";
  }
  return "a value";
}

/// Typed reads of metadata keys; each mistake becomes one problem naming the file and key.
class GgufFields {
 public:
  GgufFields(const GgufFile& file, CheckpointConfig& config, std::vector<std::string>& problems)
      : file_(file), name_(printable(file.path(), 200)), config_(config), problems_(problems) {}

  /// A problem of the metadata key `key`: "file: metadata 'key': message".
  void problem(std::string_view key, std::string_view message) {
    problems_.push_back(problem_text(name_, metadata(key), message));
  }
  /// A problem of the tensor `name`: "file: tensor 'name': message".
  void tensor_problem(std::string_view name, std::string_view message) {
    problems_.push_back(problem_text(name_, "tensor '" + printable(name) + "'", message));
  }
  void origin(std::string_view spec_field, std::string_view key) {
    config_.origins[std::string(spec_field)] = name_ + ": " + metadata(key);
  }

  std::optional<std::int64_t> integer(const std::string& key, bool required, std::int64_t min = 1,
                                      std::int64_t max = kMaxSize) {
    const GgufValue* v = file_.find(key);
    if (v == nullptr) {
      if (required) problem(key, "is required but missing");
      return std::nullopt;
    }
    if (v->kind != GgufValue::Kind::kInt) {
      problem(key, "expected an integer, got " + std::string(kind_name(*v)));
      return std::nullopt;
    }
    if (v->int_value < min || v->int_value > max) {
      problem(key, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                       std::to_string(v->int_value));
      return std::nullopt;
    }
    return v->int_value;
  }

  /// A positive number kept as a normal 32-bit float (an integer is taken too).
  std::optional<float> positive(const std::string& key, bool required) {
    const GgufValue* v = file_.find(key);
    if (v == nullptr) {
      if (required) problem(key, "is required but missing");
      return std::nullopt;
    }
    if (v->kind != GgufValue::Kind::kFloat && v->kind != GgufValue::Kind::kInt) {
      problem(key, "expected a number, got " + std::string(kind_name(*v)));
      return std::nullopt;
    }
    const double value = v->kind == GgufValue::Kind::kFloat ? v->float_value : v->int_value;
    if (!(value >= std::numeric_limits<float>::min() &&
          value <= std::numeric_limits<float>::max())) {
      problem(key, "must be a positive number that a 32-bit float holds as a normal value, got " +
                       std::to_string(value));
      return std::nullopt;
    }
    return static_cast<float>(value);
  }

  std::optional<std::string> string(const std::string& key, bool required) {
    const GgufValue* v = file_.find(key);
    if (v == nullptr) {
      if (required) problem(key, "is required but missing");
      return std::nullopt;
    }
    if (v->kind != GgufValue::Kind::kString) {
      problem(key, "expected a string, got " + std::string(kind_name(*v)));
      return std::nullopt;
    }
    return v->string_value;
  }

 private:
  static std::string metadata(std::string_view key) { return "metadata '" + printable(key) + "'"; }

  const GgufFile& file_;
  std::string name_;
  CheckpointConfig& config_;
  std::vector<std::string>& problems_;
};

/// rope_freqs.weight, where the file holds it: the factor each rotary pair's frequency is
/// divided by (llama.cpp's form of Llama 3's scaling), one per pair of a head.
void read_rope_freq_factors(const GgufFile& file, GgufFields& g, CheckpointConfig& c) {
  const GgufTensor* tensor = file.find_tensor("rope_freqs.weight");
  if (tensor == nullptr) return;
  c.rope_freq_factors_tensor = tensor->name;
  if (c.head_size <= 0) return;  // a problem of its own
  const std::int64_t pairs = c.head_size / 2;
  if (tensor->dims != std::vector<std::int64_t>{pairs}) {
    std::string shape;
    for (const std::int64_t d : tensor->shape())
      (shape += shape.empty() ? "" : ", ") += std::to_string(d);
    g.tensor_problem(tensor->name, "has shape [" + shape + "], not [" + std::to_string(pairs) +
                                       "]: one factor per rotary pair of a head of " +
                                       std::to_string(c.head_size));
    return;
  }
  std::vector<float> factors(static_cast<std::size_t>(pairs));
  try {
    file.read_f32(*tensor, factors);
  } catch (const Error& e) {
    g.tensor_problem(tensor->name, e.message());
    return;
  }
  for (std::size_t i = 0; i < factors.size(); ++i) {
    if (!(std::isfinite(factors[i]) && factors[i] > 0.0f)) {
      g.tensor_problem(tensor->name, "factor " + std::to_string(i) + " is " +
                                         std::to_string(factors[i]) +
                                         "; a frequency factor must be finite and > 0");
      return;
    }
  }
  c.rope_freq_factors = std::move(factors);
}

}  // namespace

void read_gguf_config(const std::string& path, CheckpointConfig& c,
                      std::vector<std::string>& problems) {
  const GgufFile file = GgufFile::open(path);
  GgufFields g(file, c, problems);
  const std::optional<std::string> arch = g.string("general.architecture", true);
  if (!arch) return;
  c.architecture = *arch;
  const std::optional<ModelFamily> family = gguf_family(*arch);
  if (!family) {
    g.problem("general.architecture", "architecture " + quote(*arch) + " in " +
                                          printable(path, 200) + " is not supported; supported: " +
                                          supported_architectures(CheckpointFormat::kGguf));
    return;
  }
  c.family = *family;
  if (auto name = g.string("general.name", false)) c.name = printable(*name);

  const std::string p = *arch + ".";
  const auto size = [&](std::string_view spec_field, const std::string& key, bool required,
                        int& out) {
    if (auto v = g.integer(key, required)) {
      out = static_cast<int>(*v);
      g.origin(spec_field, key);
    }
  };
  size("num_layers", p + "block_count", true, c.num_layers);
  size("hidden_size", p + "embedding_length", true, c.hidden_size);
  size("num_heads", p + "attention.head_count", true, c.num_heads);
  size("num_kv_heads", p + "attention.head_count_kv", false, c.num_kv_heads);
  size("head_size", p + "attention.key_length", false, c.head_size);
  size("intermediate_size", p + "feed_forward_length", true, c.intermediate_size);
  if (auto v = g.integer(p + "context_length", true)) {
    c.max_position_embeddings = *v;
    g.origin("max_position_embeddings", p + "context_length");
  }
  if (auto v = g.positive(p + "attention.layer_norm_rms_epsilon", true)) {
    c.rms_norm_eps = *v;
    g.origin("rms_norm_eps", p + "attention.layer_norm_rms_epsilon");
  }
  if (auto v = g.positive(p + "rope.freq_base", false)) {
    c.rope_theta = *v;
    g.origin("rope_theta", p + "rope.freq_base");
  }

  // The vocabulary: stated, or the tokenizer's list of tokens.
  if (file.find(p + "vocab_size") != nullptr) {
    size("vocab_size", p + "vocab_size", true, c.vocab_size);
  } else if (const GgufValue* tokens = file.find("tokenizer.ggml.tokens")) {
    if (tokens->kind != GgufValue::Kind::kArray || tokens->strings.empty()) {
      g.problem("tokenizer.ggml.tokens", "expected a non-empty array of strings");
    } else if (tokens->strings.size() > static_cast<std::size_t>(kMaxSize)) {
      g.problem("tokenizer.ggml.tokens", "holds more tokens than a 32-bit size");
    } else {
      c.vocab_size = static_cast<int>(tokens->strings.size());
      g.origin("vocab_size", "tokenizer.ggml.tokens");
    }
  } else {
    g.problem(p + "vocab_size", "is required but missing (and there is no tokenizer.ggml.tokens)");
  }

  if (c.num_kv_heads == 0) c.num_kv_heads = c.num_heads;
  if (c.head_size == 0 && c.num_heads > 0 && c.hidden_size > 0) {
    if (c.hidden_size % c.num_heads != 0) {
      g.problem(p + "attention.key_length",
                "is not given and " + p + "embedding_length " + std::to_string(c.hidden_size) +
                    " is not divisible by " + p + "attention.head_count " +
                    std::to_string(c.num_heads));
    } else {
      c.head_size = c.hidden_size / c.num_heads;
    }
  }
  // One head size for keys and values, all of it rotated: what the model program runs.
  if (auto v = g.integer(p + "attention.value_length", false);
      v && c.head_size > 0 && *v != c.head_size) {
    g.problem(p + "attention.value_length",
              std::to_string(*v) + " differs from the key head size " +
                  std::to_string(c.head_size) + "; the model program has one head size");
  }
  if (auto v = g.integer(p + "rope.dimension_count", false);
      v && c.head_size > 0 && *v != c.head_size) {
    g.problem(p + "rope.dimension_count", std::to_string(*v) + " differs from the head size " +
                                              std::to_string(c.head_size) +
                                              "; the model program rotates whole heads");
  }
  if (auto v = g.string(p + "rope.scaling.type", false); v && *v != "none") {
    g.problem(p + "rope.scaling.type",
              "RoPE scaling " + quote(*v) +
                  " is not supported; supported: none (Llama 3's comes as rope_freqs.weight)");
  }
  read_rope_freq_factors(file, g, c);
  if (auto w = g.integer(p + "attention.sliding_window", false, 0);
      w && *w > 0 && c.num_layers > 0) {
    c.sliding_windows.assign(static_cast<std::size_t>(c.num_layers), static_cast<int>(*w));
    g.origin("sliding_window", p + "attention.sliding_window");
  }
  if (auto v = g.integer("general.file_type", false, 0)) c.dtype = file_type_dtype(*v);
  // The end of a generation: end of sequence, and llama.cpp's end of turn where it differs.
  const std::int64_t last_token = c.vocab_size > 0 ? c.vocab_size - 1 : kMaxSize;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    if (auto id = g.integer(key, false, 0, last_token)) {
      const auto token = static_cast<std::int32_t>(*id);
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), token) ==
          c.eos_token_ids.end()) {
        c.eos_token_ids.push_back(token);
      }
    }
  }

  c.tie_word_embeddings = file.find_tensor("output.weight") == nullptr;
  c.origins["tie_word_embeddings"] =
      printable(path, 200) +
      (c.tie_word_embeddings ? ": no output.weight tensor" : ": an output.weight tensor");
  c.qkv_bias = c.family == ModelFamily::kQwen2;

  // The embedding's shape, where the file holds it, must match the sizes read.
  if (const GgufTensor* embd = file.find_tensor("token_embd.weight");
      embd != nullptr && c.vocab_size > 0 && c.hidden_size > 0 &&
      embd->shape() != std::vector<std::int64_t>{c.vocab_size, c.hidden_size}) {
    std::string shape;
    for (const std::int64_t d : embd->shape())
      (shape += shape.empty() ? "" : ", ") += std::to_string(d);
    g.tensor_problem("token_embd.weight",
                     "has shape [" + shape + "], not [vocab " + std::to_string(c.vocab_size) +
                         ", hidden " + std::to_string(c.hidden_size) + "] as the metadata says");
  }
}

}  // namespace freezeframe::checkpoint_detail
