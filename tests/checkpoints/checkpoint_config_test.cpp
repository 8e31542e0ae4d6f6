// engine/: a checkpoint's model config, from the published config.json of Llama-3.1-8B,
// Mistral-7B-v0.1 and Qwen2-0.5B, from GGUF metadata (fixtures written by
// scripts/fixtures/make_checkpoint_fixtures.py, and the real SmolLM2 where it has been
// fetched), with bad RoPE factors and stop tokens refused; the other refusals are in
// checkpoint_config_refusals_test.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoints/checkpoint_config_support.h"
#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/checkpoints/gguf_file.h"
#include "support/scratch_files.h"
#include "support/smollm2.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
using config_testing::kFixtures;
using config_testing::llama_config;
using config_testing::MetadataOnlyGguf;
using config_testing::refusal;
using config_testing::small_llama_gguf;
using config_testing::write_text;
using testing::scratch;
using testing::scratch_dir;

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

}  // namespace
}  // namespace freezeframe
