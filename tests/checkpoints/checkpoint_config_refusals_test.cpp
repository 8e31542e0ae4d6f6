// checkpoints/: checkpoint configs refused, each naming the file and the field: cut-short
// GGUFs, unknown architectures, missing fields, wrong types, text that is not a JSON object or
// nests too deeply, files that cannot be read; problems collected without throwing; random
// corruptions read or refused.

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "checkpoints/checkpoint_config_support.h"
#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "support/scratch_files.h"

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
                   "Qwen2ForCausalLM, DeepseekV2ForCausalLM"),
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
      {"{\"a\": 1", ":1:8: syntax error while parsing object - unexpected end of input"},
      {"{\"a\": [1, 2}", ":1:12: syntax error while parsing array"},
      {"{\"a\": 1} # c", ":1:10: syntax error"},
      {"{a: 1}", ":1:2: syntax error while parsing object key"},
      {"{\"a\": 1,}", ":1:9: syntax error while parsing object key"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string path = write_text("not_object.json", c.text);
    const std::string m = refusal(path);
    EXPECT_NE(m.find(path + ":"), std::string::npos) << m;
    EXPECT_NE(m.find(c.expect), std::string::npos) << m;
  }
}

// A repeated key keeps its last value, as Python's json and so transformers read it; where the
// config states the field points at that value.
TEST(CheckpointConfig, ARepeatedKeyKeepsItsLastValue) {
  const std::string path = write_text("repeated.json", llama_config("num_hidden_layers",
                                                                    "\"num_hidden_layers\": 4,\n  "
                                                                    "\"num_hidden_layers\": 2,"));
  const CheckpointConfig c = read_checkpoint_config(path);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.origins.at("num_layers"), path + ":18:24: num_hidden_layers");
}

TEST(CheckpointConfig, DeepNestingIsToldAsSuch) {
  const std::string deep =
      std::string("{\"a\":\n").append(50000, '[').append(50000, ']').append("}");
  const std::string path = write_text("deep.json", deep);
  const std::string m = refusal(path);
  EXPECT_NE(m.find(path + ":2:64: nested deeper than 64"), std::string::npos) << m;
  EXPECT_EQ(m.find("bad file"), std::string::npos) << m;
  // Brackets inside strings are text, not nesting.
  const std::string text = write_text(
      "brackets.json", std::string("{\"architectures\": [\"").append(100, '[').append("\"]}"));
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
  const std::string big = write_text("big.json", std::string("{").append(5 << 20, ' ').append("}"));
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
  for (const char* name : {"llama-3.1-8b", "mistral-7b-v0.1", "qwen2-0.5b", "deepseek-v2-lite"}) {
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
