// engine/: a checkpoint's model config, from the published config.json of Llama-3.1-8B,
// Mistral-7B-v0.1 and Qwen2-0.5B, from GGUF metadata (fixtures written by
// scripts/fixtures/make_checkpoint_fixtures.py, and the real SmolLM2 where it has been
// fetched), and every refusal naming the file and the field.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/checkpoints/gguf_file.h"
#include "support/scratch_files.h"
#include "support/smollm2.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(FREEZEFRAME_SOURCE_DIR) / "tests" / "fixtures" / "checkpoints";

using testing::scratch;
using testing::scratch_dir;

std::string write_text(const std::string& name, const std::string& text) {
  return scratch(std::vector<char>(text.begin(), text.end()), name);
}

/// The message read_checkpoint_config throws for `path` (empty when it reads).
std::string refusal(const std::string& path, ErrorCode expected = ErrorCode::kInvalidArgument) {
  try {
    (void)read_checkpoint_config(path);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.message();
    return e.message();
  }
  ADD_FAILURE() << path << " was read";
  return "";
}

/// A config.json that Llama reads, with `replace` swapped in for the line holding its key.
std::string llama_config(const std::string& key = "", const std::string& line = "") {
  std::ifstream in(kFixtures / "llama-3.1-8b" / "config.json");
  std::string text, row;
  while (std::getline(in, row)) {
    if (!key.empty() && row.find("\"" + key + "\":") != std::string::npos) {
      if (!line.empty()) text += "  " + line + "\n";
      continue;
    }
    text += row + "\n";
  }
  return text;
}

/// A GGUF v3 file holding only metadata: u32 values, f32 values and strings.
class MetadataOnlyGguf {
 public:
  MetadataOnlyGguf& u32(const std::string& key, std::uint32_t v) { return add(key, 4, &v, 4); }
  MetadataOnlyGguf& f32(const std::string& key, float v) { return add(key, 6, &v, 4); }
  MetadataOnlyGguf& str(const std::string& key, const std::string& v) {
    std::vector<char> value(8);
    const std::uint64_t n = v.size();
    std::memcpy(value.data(), &n, 8);
    value.insert(value.end(), v.begin(), v.end());
    return add(key, 8, value.data(), value.size());
  }
  std::string write(const std::string& name) const {
    std::vector<char> out = {'G', 'G', 'U', 'F'};
    append(out, std::uint32_t{3});
    append(out, std::uint64_t{0});
    append(out, count_);
    out.insert(out.end(), kvs_.begin(), kvs_.end());
    while (out.size() % 32 != 0) out.push_back(0);
    return scratch(out, name);
  }

 private:
  template <typename T>
  static void append(std::vector<char>& out, T v) {
    const char* p = reinterpret_cast<const char*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  MetadataOnlyGguf& add(const std::string& key, std::uint32_t type, const void* value,
                        std::size_t bytes) {
    append(kvs_, std::uint64_t{key.size()});
    kvs_.insert(kvs_.end(), key.begin(), key.end());
    append(kvs_, type);
    const char* p = static_cast<const char*>(value);
    kvs_.insert(kvs_.end(), p, p + bytes);
    ++count_;
    return *this;
  }
  std::vector<char> kvs_;
  std::uint64_t count_ = 0;
};

/// The metadata of a small llama model, every required key present.
MetadataOnlyGguf small_llama_gguf() {
  MetadataOnlyGguf g;
  g.str("general.architecture", "llama")
      .u32("llama.block_count", 4)
      .u32("llama.context_length", 2048)
      .u32("llama.embedding_length", 256)
      .u32("llama.feed_forward_length", 512)
      .u32("llama.attention.head_count", 8)
      .f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .u32("llama.vocab_size", 1000);
  return g;
}

TEST(CheckpointConfig, ReadsLlama31WithItsRopeScaling) {
  const CheckpointConfig c = read_checkpoint_config((kFixtures / "llama-3.1-8b").string());
  EXPECT_EQ(c.format, CheckpointFormat::kHuggingFace);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(c.name, "llama-3.1-8b");
  EXPECT_EQ(c.config_file, (kFixtures / "llama-3.1-8b" / "config.json").string());
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_size, 128);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_TRUE(c.sliding_windows.empty());
  EXPECT_FALSE(c.qkv_bias);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->factor, 8.0);
  EXPECT_EQ(c.rope_scaling->low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling->high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_EQ(c.origins.at("num_layers"), c.config_file + ":17:24: num_hidden_layers");
  EXPECT_EQ(c.origins.count("head_size"), 0u) << "hidden / heads, not stated";
}

TEST(CheckpointConfig, ReadsMistralsWindowIntoEveryLayer) {
  const CheckpointConfig c =
      read_checkpoint_config((kFixtures / "mistral-7b-v0.1" / "config.json").string());
  EXPECT_EQ(c.family, ModelFamily::kMistral);
  EXPECT_EQ(c.name, "mistral-7b-v0.1");
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_size, 128);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.sliding_windows, std::vector<int>(32, 4096));
  EXPECT_FALSE(c.rope_scaling.has_value());
  EXPECT_FALSE(c.qkv_bias);

  // Mistral-7B-v0.2 and later have none: null is "not set".
  const std::string v02 =
      write_text("mistral_v02.json",
                 "{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 4096, "
                 "\"intermediate_size\": 14336, \"max_position_embeddings\": 32768, "
                 "\"num_attention_heads\": 32, \"num_hidden_layers\": 32, "
                 "\"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05, "
                 "\"rope_theta\": 1000000.0, \"sliding_window\": null, "
                 "\"vocab_size\": 32000, \"head_dim\": null}");
  const CheckpointConfig none = read_checkpoint_config(v02);
  EXPECT_TRUE(none.sliding_windows.empty());
  EXPECT_EQ(none.head_size, 128);
  EXPECT_EQ(none.name, "mistral_v02");
}

TEST(CheckpointConfig, ReadsQwen2TiedWithQkvBias) {
  const CheckpointConfig c = read_checkpoint_config((kFixtures / "qwen2-0.5b").string());
  EXPECT_EQ(c.family, ModelFamily::kQwen2);
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.num_heads, 14);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_size, 64);
  EXPECT_EQ(c.intermediate_size, 4864);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.rope_theta, 1e6f);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.sliding_windows.empty()) << "use_sliding_window is false";
}

TEST(CheckpointConfig, Qwen2WindowStartsAtMaxWindowLayers) {
  const std::string path = write_text(
      "qwen2_window.json",
      "{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 896, "
      "\"intermediate_size\": 4864, \"max_position_embeddings\": 32768, "
      "\"num_attention_heads\": 14, \"num_hidden_layers\": 4, \"num_key_value_heads\": 2, "
      "\"rms_norm_eps\": 1e-06, \"vocab_size\": 151936, \"use_sliding_window\": true, "
      "\"sliding_window\": 4096, \"max_window_layers\": 2}");
  EXPECT_EQ(read_checkpoint_config(path).sliding_windows, (std::vector<int>{0, 0, 4096, 4096}));
}

TEST(CheckpointConfig, ReadsWhatTransformers5Writes) {
  // No architectures (a config class alone), rope_parameters in place of rope_theta and
  // rope_scaling, dtype in place of torch_dtype.
  const std::string path = write_text(
      "v5.json",
      "{\"model_type\": \"llama\", \"hidden_size\": 256, \"head_dim\": 64, "
      "\"intermediate_size\": 512, \"max_position_embeddings\": 4096, "
      "\"num_attention_heads\": 2, \"num_hidden_layers\": 2, \"num_key_value_heads\": 1, "
      "\"rms_norm_eps\": 1e-06, \"vocab_size\": 1000, \"dtype\": \"float16\", "
      "\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", "
      "\"factor\": 32.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
      "\"original_max_position_embeddings\": 8192}}");
  const CheckpointConfig c = read_checkpoint_config(path);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.head_size, 64) << "head_dim, not hidden / heads";
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.dtype, DType::kF16);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->factor, 32.0);
  EXPECT_EQ(c.origins.at("rope_theta").rfind(path + ":1:", 0), 0u) << c.origins.at("rope_theta");
  EXPECT_NE(c.origins.at("rope_theta").find(": rope_parameters.rope_theta"), std::string::npos);
}

TEST(CheckpointConfig, ReadsGgufMetadata) {
  const CheckpointConfig llama = read_checkpoint_config((kFixtures / "tiny-llama.gguf").string());
  EXPECT_EQ(llama.format, CheckpointFormat::kGguf);
  EXPECT_EQ(llama.architecture, "llama");
  EXPECT_EQ(llama.name, "tiny llama");
  EXPECT_EQ(llama.num_layers, 2);
  EXPECT_EQ(llama.hidden_size, 128);
  EXPECT_EQ(llama.num_heads, 4);
  EXPECT_EQ(llama.num_kv_heads, 2);
  EXPECT_EQ(llama.head_size, 32);
  EXPECT_EQ(llama.intermediate_size, 128);
  EXPECT_EQ(llama.vocab_size, 32) << "from the token list";
  EXPECT_EQ(llama.max_position_embeddings, 256);
  EXPECT_EQ(llama.rope_theta, 500000.0f);
  EXPECT_EQ(llama.rms_norm_eps, 1e-5f);
  EXPECT_TRUE(llama.tie_word_embeddings) << "no output.weight";
  EXPECT_EQ(llama.dtype, DType::kF16);
  EXPECT_EQ(llama.rope_freq_factors_tensor, "rope_freqs.weight");
  EXPECT_EQ(llama.rope_freq_factors, std::vector<float>(16, 1.0f))
      << "one per pair of a head of 32";
  EXPECT_FALSE(llama.qkv_bias);
  EXPECT_EQ(llama.origins.at("vocab_size"), llama.path + ": metadata 'tokenizer.ggml.tokens'");
  EXPECT_EQ(llama.origins.at("num_layers"), llama.path + ": metadata 'llama.block_count'");

  const CheckpointConfig qwen = read_checkpoint_config((kFixtures / "tiny-qwen2.gguf").string());
  EXPECT_EQ(qwen.family, ModelFamily::kQwen2);
  EXPECT_EQ(qwen.num_layers, 3);
  EXPECT_EQ(qwen.hidden_size, 96);
  EXPECT_EQ(qwen.num_heads, 6);
  EXPECT_EQ(qwen.head_size, 32) << "attention.key_length, not hidden / heads";
  EXPECT_EQ(qwen.vocab_size, 48) << "qwen2.vocab_size";
  EXPECT_EQ(qwen.rms_norm_eps, 1e-6f);
  EXPECT_FALSE(qwen.tie_word_embeddings) << "an output.weight";
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_FALSE(qwen.dtype.has_value()) << "Q8_0: no single dtype";
  EXPECT_TRUE(qwen.rope_freq_factors_tensor.empty());
  EXPECT_TRUE(qwen.rope_freq_factors.empty());
}

TEST(CheckpointConfig, ReadsGgufRopeFactors) {
  // The tiny Llama 3 of the reference fixtures: Llama 3's scaling as llama.cpp stores it.
  const fs::path reference = kFixtures.parent_path() / "reference";
  const CheckpointConfig c = read_checkpoint_config((reference / "tiny-llama3.gguf").string());
  ASSERT_EQ(c.rope_freq_factors.size(), 32u);
  EXPECT_EQ(c.rope_freq_factors.front(), 1.0f) << "the shortest wavelength is kept";
  EXPECT_EQ(c.rope_freq_factors.back(), 8.0f) << "the longest is divided by the factor";
  EXPECT_FALSE(c.rope_scaling.has_value()) << "the factors are the scaling";
}

/// tiny-llama.gguf with `patch` applied to its bytes (`file` open on the original).
std::string patched_llama_gguf(
    const std::string& name,
    const std::function<void(const GgufFile&, std::vector<char>&)>& patch) {
  const fs::path original = kFixtures / "tiny-llama.gguf";
  std::vector<char> bytes = testing::read_bytes(original);
  patch(GgufFile::open(original.string()), bytes);
  return scratch(bytes, name);
}

TEST(CheckpointConfig, RefusesBadGgufRopeFactorsNamingTheTensor) {
  const std::string zero =
      patched_llama_gguf("zero-factor.gguf", [](const GgufFile& file, std::vector<char>& bytes) {
        const float value = 0.0f;
        std::memcpy(bytes.data() + file.tensor("rope_freqs.weight").offset + 3 * sizeof(float),
                    &value, sizeof value);
      });
  const std::string z = refusal(zero);
  EXPECT_NE(z.find(zero + ": tensor 'rope_freqs.weight': factor 3 is 0"), std::string::npos) << z;
  EXPECT_NE(z.find("must be finite and > 0"), std::string::npos) << z;

  // Its one dimension, stored after the name and the dimension count, halved.
  const std::string half =
      patched_llama_gguf("half-factors.gguf", [](const GgufFile&, std::vector<char>& bytes) {
        const std::string name = "rope_freqs.weight";
        const auto at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
        ASSERT_NE(at, bytes.end());
        const std::uint64_t pairs = 8;
        std::memcpy(&*at + name.size() + sizeof(std::uint32_t), &pairs, sizeof pairs);
      });
  const std::string h = refusal(half);
  EXPECT_NE(
      h.find(half + ": tensor 'rope_freqs.weight': has shape [8], not [16]: one factor per rotary "
                    "pair of a head of 32"),
      std::string::npos)
      << h;
}

TEST(CheckpointConfig, ReadsSmolLM2) {
  const std::string path = testing::smollm2_path(FREEZEFRAME_SOURCE_DIR);
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path << " (scripts/fetch-smollm2 fetches it)";
  const CheckpointConfig c = read_checkpoint_config(path);
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_size, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.dtype.has_value()) << "Q4_1";
}

// The tokens that end a generation: one id or a list in config.json; GGUF's end of sequence
// and end of turn.
TEST(CheckpointConfig, ReadsTheEndOfSequenceTokens) {
  using Ids = std::vector<std::int32_t>;
  EXPECT_EQ(read_checkpoint_config((kFixtures / "llama-3.1-8b").string()).eos_token_ids,
            Ids{128001});
  EXPECT_EQ(read_checkpoint_config((kFixtures / "mistral-7b-v0.1").string()).eos_token_ids, Ids{2});
  EXPECT_EQ(read_checkpoint_config((kFixtures / "qwen2-0.5b").string()).eos_token_ids, Ids{151643});
  const std::string listed = write_text(
      "eos_list.json", llama_config("eos_token_id", "\"eos_token_id\": [128001, 128008, 128009],"));
  EXPECT_EQ(read_checkpoint_config(listed).eos_token_ids, (Ids{128001, 128008, 128009}));
  const std::string none =
      write_text("eos_null.json", llama_config("eos_token_id", "\"eos_token_id\": null,"));
  EXPECT_TRUE(read_checkpoint_config(none).eos_token_ids.empty());
  const std::string outside = write_text(
      "eos_outside.json", llama_config("eos_token_id", "\"eos_token_id\": [2, 128256],"));
  const std::string m = refusal(outside);
  EXPECT_NE(m.find(outside + ":8:23: eos_token_id: must be in [0, 128255], got '128256'"),
            std::string::npos)
      << m;
  const std::string text =
      write_text("eos_text.json", llama_config("eos_token_id", "\"eos_token_id\": \"2\","));
  EXPECT_NE(refusal(text).find("eos_token_id: expected an integer, got the string '2'"),
            std::string::npos);

  const std::string gguf = small_llama_gguf()
                               .u32("tokenizer.ggml.eos_token_id", 2)
                               .u32("tokenizer.ggml.eot_token_id", 7)
                               .write("eos.gguf");
  EXPECT_EQ(read_checkpoint_config(gguf).eos_token_ids, (Ids{2, 7}));
  const std::string same = small_llama_gguf()
                               .u32("tokenizer.ggml.eos_token_id", 2)
                               .u32("tokenizer.ggml.eot_token_id", 2)
                               .write("eos_same.gguf");
  EXPECT_EQ(read_checkpoint_config(same).eos_token_ids, Ids{2});
  const std::string past =
      small_llama_gguf().u32("tokenizer.ggml.eos_token_id", 1000).write("eos_past.gguf");
  EXPECT_NE(refusal(past).find(
                past + ": metadata 'tokenizer.ggml.eos_token_id': must be in [0, 999], got 1000"),
            std::string::npos);
}

// A folder's generation_config.json adds its stop tokens to config.json's (Llama 3.1 Instruct
// lists its end-of-turn tokens there); a malformed one is refused by file, line and field.
TEST(CheckpointConfig, ReadsTheStopTokensOfTheGenerationConfig) {
  namespace fs = std::filesystem;
  using Ids = std::vector<std::int32_t>;
  const fs::path folder = scratch_dir() / "generation_config";
  fs::create_directories(folder);
  fs::copy_file(kFixtures / "llama-3.1-8b" / "config.json", folder / "config.json",
                fs::copy_options::overwrite_existing);
  const std::string generation = (folder / "generation_config.json").string();
  auto write = [&](const std::string& text) {
    std::ofstream(generation, std::ios::binary | std::ios::trunc) << text;
  };
  write("{\n  \"bos_token_id\": 128000,\n  \"eos_token_id\": [128001, 128008, 128009]\n}\n");
  EXPECT_EQ(read_checkpoint_config(folder.string()).eos_token_ids, (Ids{128001, 128008, 128009}));
  write("{\n  \"eos_token_id\": 128009\n}\n");
  EXPECT_EQ(read_checkpoint_config(folder.string()).eos_token_ids, (Ids{128001, 128009}));
  write("{\n  \"temperature\": 0.6\n}\n");
  EXPECT_EQ(read_checkpoint_config(folder.string()).eos_token_ids, Ids{128001});
  write("{\n  \"eos_token_id\": [128001, 200000]\n}\n");
  std::string m = refusal(folder.string());
  EXPECT_NE(m.find(generation + ":2:28: eos_token_id: must be in [0, 128255], got '200000'"),
            std::string::npos)
      << m;
  write("[1, 2]\n");
  m = refusal(folder.string());
  EXPECT_NE(m.find(generation + ": a generation config is a JSON object"), std::string::npos) << m;
}

// A file named .gguf that is empty or shorter than a GGUF header (an interrupted copy) is
// refused as a GGUF, not as a config.
TEST(CheckpointConfig, AnEmptyOrCutShortGgufIsNamedAsAGguf) {
  const std::string empty = write_text("empty.gguf", "");
  std::string m = refusal(empty);
  EXPECT_NE(m.find(empty + ": an empty file, shorter than a GGUF header (24 bytes)"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("JSON"), std::string::npos) << m;
  const std::string cut = write_text("cut.GGUF", "GGU");
  m = refusal(cut);
  EXPECT_NE(m.find(cut + ": 3 bytes, shorter than a GGUF header (24 bytes)"), std::string::npos)
      << m;
  // Named otherwise, an empty file is still told to be no config.
  m = refusal(write_text("config.json", ""));
  EXPECT_NE(m.find("a checkpoint config is a JSON object ({...}), got an empty file"),
            std::string::npos)
      << m;
}

TEST(CheckpointConfig, RefusesAnUnknownArchitectureByName) {
  const std::string json = write_text(
      "gpt2.json", "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"n_layer\": 12\n}\n");
  const std::string m = refusal(json);
  EXPECT_NE(m.find(json + ":2:21: architectures: architecture 'GPT2LMHeadModel' in " + json +
                   " is not supported; supported: LlamaForCausalLM, MistralForCausalLM, "
                   "Qwen2ForCausalLM"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("n_layer"), std::string::npos) << "nothing else is read: " << m;

  const std::string gguf =
      MetadataOnlyGguf().str("general.architecture", "gpt2").write("gpt2.gguf");
  const std::string g = refusal(gguf);
  EXPECT_NE(g.find(gguf + ": metadata 'general.architecture': architecture 'gpt2' in " + gguf +
                   " is not supported; supported: llama, qwen2"),
            std::string::npos)
      << g;
}

TEST(CheckpointConfig, RefusesMissingFieldsNamingFileAndField) {
  const std::string json = write_text("no_layers.json", llama_config("num_hidden_layers"));
  EXPECT_NE(refusal(json).find(json + ":1:1: num_hidden_layers: is required but missing"),
            std::string::npos);

  const std::string none = write_text("no_arch.json", "{\"hidden_size\": 4}");
  EXPECT_NE(refusal(none).find("architectures: is required but missing (and there is no "
                               "model_type)"),
            std::string::npos);

  MetadataOnlyGguf g;
  g.str("general.architecture", "llama").u32("llama.embedding_length", 64);
  const std::string gguf = g.write("missing.gguf");
  const std::string m = refusal(gguf);
  for (const char* key :
       {"llama.block_count", "llama.attention.head_count", "llama.feed_forward_length",
        "llama.context_length", "llama.attention.layer_norm_rms_epsilon"}) {
    EXPECT_NE(m.find(gguf + ": metadata '" + key + "': is required but missing"), std::string::npos)
        << key << " in " << m;
  }
  EXPECT_NE(m.find(gguf + ": metadata 'llama.vocab_size': is required but missing (and there is no "
                          "tokenizer.ggml.tokens)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(" problems:"), std::string::npos) << "all of them at once: " << m;
}

TEST(CheckpointConfig, RefusesWrongTypesNamingFileLineAndField) {
  const struct {
    const char* key;
    const char* line;
    const char* expect;
  } cases[] = {
      {"num_hidden_layers", "\"num_hidden_layers\": \"32\",",
       ":17:24: num_hidden_layers: expected an integer, got the string '32'"},
      {"num_hidden_layers", "\"num_hidden_layers\": 32.5,",
       ":17:24: num_hidden_layers: expected an integer, got '32.5'"},
      {"hidden_size", "\"hidden_size\": 0,", ":10:18: hidden_size: must be in [1, 2147483647]"},
      {"rms_norm_eps", "\"rms_norm_eps\": true,", ": rms_norm_eps: expected a number, got 'true'"},
      {"rms_norm_eps", "\"rms_norm_eps\": 1e-50,",
       ": rms_norm_eps: must be a positive number that a 32-bit float holds"},
      {"tie_word_embeddings", "\"tie_word_embeddings\": 0,",
       ": tie_word_embeddings: expected true or false, got '0'"},
      {"torch_dtype", "\"torch_dtype\": \"int8\",",
       ": torch_dtype: expected bfloat16, float16 or float32, got 'int8'"},
      {"torch_dtype", "\"torch_dtype\": 16,", ": torch_dtype: expected a string, got '16'"},
      {"hidden_act", "\"hidden_act\": \"gelu\",", ": hidden_act: the MLP is gated SiLU"},
      {"attention_bias", "\"attention_bias\": true,", ": attention_bias: true is not supported"},
      {"num_key_value_heads", "\"num_key_value_heads\": 5,",
       ": num_key_value_heads: 5 key/value heads do not divide the 32 query heads"},
      {"rope_scaling", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0},",
       ": rope_scaling.rope_type: RoPE scaling 'yarn' is not supported; supported: default, "
       "llama3"},
      {"rope_scaling", "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0},",
       ": rope_scaling.low_freq_factor: is required but missing"},
      {"rope_scaling", "\"rope_scaling\": [8],", ": rope_scaling: expected an object, got a list"},
      {"architectures", "\"architectures\": \"LlamaForCausalLM\",",
       ": architectures: expected a list of architecture names, got the string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.line);
    std::string text = llama_config(c.key, c.line);
    // A rope_scaling object spans lines; drop the rest of the original.
    if (std::string(c.key) == "rope_scaling") {
      const std::size_t from = text.find("    \"factor\": 8.0,\n    \"low");
      const std::size_t to = text.find("  },\n", from);
      if (from != std::string::npos) text.erase(from, to + 5 - from);
    }
    if (std::string(c.key) == "architectures") {
      const std::size_t from = text.find("    \"LlamaForCausalLM\"\n  ],\n");
      if (from != std::string::npos) text.erase(from, 28);
    }
    const std::string path = write_text("wrong.json", text);
    const std::string m = refusal(path);
    EXPECT_NE(m.find(path + ":"), std::string::npos) << m;
    EXPECT_NE(m.find(c.expect), std::string::npos) << m;
  }

  MetadataOnlyGguf g = small_llama_gguf();
  g.str("llama.attention.head_count_kv", "three");
  const std::string gguf = g.write("wrong.gguf");
  EXPECT_NE(refusal(gguf).find(
                gguf + ": metadata 'llama.attention.head_count_kv': expected an integer, got "
                       "a string"),
            std::string::npos);
}

TEST(CheckpointConfig, RefusesWhatIsNotAJsonObject) {
  const struct {
    const char* text;
    const char* expect;
  } cases[] = {
      {"[1, 2]", ": a checkpoint config is a JSON object ({...}), got '[1, 2]'"},
      {"", ": a checkpoint config is a JSON object ({...}), got an empty file"},
      {"model:\n  layers: 3\n", ": a checkpoint config is a JSON object ({...}), got 'model:"},
      {"{\"a\": 1", ":1:1: JSON syntax error: end of map flow not found"},
      {"{\"a\": [1, 2}", ": JSON syntax error"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string path = write_text("not_object.json", c.text);
    const std::string m = refusal(path);
    EXPECT_NE(m.find(path + ":"), std::string::npos) << m;
    EXPECT_NE(m.find(c.expect), std::string::npos) << m;
  }
}

TEST(CheckpointConfig, DeepNestingIsToldAsSuch) {
  const std::string deep = "{\"a\":\n" + std::string(50000, '[') + std::string(50000, ']') + "}";
  const std::string path = write_text("deep.json", deep);
  const std::string m = refusal(path);
  EXPECT_NE(m.find(path + ": nesting deeper than 64 levels at line 2"), std::string::npos) << m;
  EXPECT_EQ(m.find("bad file"), std::string::npos) << m;
  // Brackets inside strings are text, not nesting.
  const std::string text =
      write_text("brackets.json", "{\"architectures\": [\"" + std::string(100, '[') + "\"]}");
  EXPECT_EQ(refusal(text).find("nesting"), std::string::npos);
}

TEST(CheckpointConfig, RefusesWhatCannotBeRead) {
  const std::string absent = (scratch_dir() / "absent").string();
  const std::string gone = refusal(absent, ErrorCode::kNotFound);
  EXPECT_NE(gone.find("cannot read checkpoint '" + absent + "': No such file or directory"),
            std::string::npos)
      << gone;
  // A folder without config.json.
  const fs::path folder = scratch_dir() / "empty_folder";
  fs::create_directories(folder);
  EXPECT_NE(refusal(folder.string(), ErrorCode::kNotFound)
                .find("cannot read checkpoint config file '" + (folder / "config.json").string()),
            std::string::npos);
  // A device is not read (it would never end).
  EXPECT_NE(refusal("/dev/zero").find("is a character device, not a regular file"),
            std::string::npos);
  // A file larger than any config.
  const std::string big = write_text("big.json", "{" + std::string(5 << 20, ' ') + "}");
  const std::string large = refusal(big);
  EXPECT_NE(large.find("more than the 4.00 MiB a checkpoint config file may be"), std::string::npos)
      << large;
  // A truncated GGUF is refused by its reader, naming the file.
  const std::vector<char> truncated = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 1};
  const std::string gguf = scratch(truncated, "truncated.gguf");
  EXPECT_NE(refusal(gguf).find(gguf), std::string::npos);
  // A NUL would make the file system open another file.
  EXPECT_NE(refusal(std::string("a\0b", 3)).find("holds a NUL byte"), std::string::npos);
  EXPECT_NE(refusal("").find("the checkpoint path is empty"), std::string::npos);
}

TEST(CheckpointConfig, CollectsProblemsWithoutThrowing) {
  std::vector<std::string> problems;
  EXPECT_FALSE(
      read_checkpoint_config(write_text("two.json", "{\"model_type\": \"llama\"}"), problems)
          .has_value());
  EXPECT_GE(problems.size(), 6u);
  problems.clear();
  EXPECT_TRUE(read_checkpoint_config((kFixtures / "qwen2-0.5b").string(), problems).has_value());
  EXPECT_TRUE(problems.empty());
  problems.clear();
  EXPECT_FALSE(read_checkpoint_config("/nonexistent/x", problems).has_value());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("cannot read checkpoint '/nonexistent/x'"), std::string::npos);
}

// Random corruptions of the configs (bytes flipped, JSON and YAML tokens inserted, text cut)
// are read or refused: never another exception, and every problem names the file.
TEST(CheckpointConfig, CorruptConfigsAreReadOrRefused) {
  const char* tokens[] = {"{",        "}",    "[",  "]",     ",",           ":",   "\"",
                          "null",     "true", "-1", "1e999", "\"\\u0000\"", "&a",  "*a",
                          "!!binary", "\n",   "\t", "---",   "#",           "\xff"};
  std::mt19937 rng(11);
  int refused = 0, read = 0;
  for (const char* name : {"llama-3.1-8b", "mistral-7b-v0.1", "qwen2-0.5b"}) {
    const std::vector<char> bytes = testing::read_bytes(kFixtures / name / "config.json");
    for (int i = 0; i < 300; ++i) {
      std::vector<char> mutated = bytes;
      for (int k = 1 + int(rng() % 3); k > 0 && !mutated.empty(); --k) {
        const std::size_t at = rng() % mutated.size();
        switch (rng() % 4) {
          case 0: mutated[at] = char(rng()); break;
          case 1: mutated.erase(mutated.begin() + std::ptrdiff_t(at)); break;
          case 2: mutated.resize(at); break;
          default: {
            const std::string t = tokens[rng() % std::size(tokens)];
            mutated.insert(mutated.begin() + std::ptrdiff_t(at), t.begin(), t.end());
          }
        }
      }
      const std::string path = scratch(mutated, "corrupt.json");
      std::vector<std::string> problems;
      try {
        const bool ok = read_checkpoint_config(path, problems).has_value();
        ok ? ++read : ++refused;
        EXPECT_EQ(ok, problems.empty());
        for (const std::string& p : problems) {
          ASSERT_EQ(p.rfind(path, 0), 0u) << "a problem that does not name the file: " << p;
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << " case " << i << " threw " << e.what();
      }
    }
  }
  EXPECT_GT(refused, 100);
  EXPECT_GT(read, 10) << "some corruptions leave a readable config";
}

}  // namespace
}  // namespace freezeframe
