// tools/: freezeframe generate on the command line. Mistakes in its arguments are usage errors
// (exit 2) and a checkpoint, tokenizer or prompt it cannot use an error (exit 1) naming the
// file, all before any GPU is asked for; without a GPU it says so (exit 1), with one it
// generates: a tiny Llama with its own weights, and SmolLM2 where it has been fetched, greedy
// twice to the same text.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "freezeframe/core/device.h"
#include "support/scratch_files.h"
#include "support/smollm2.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = FREEZEFRAME_SOURCE_DIR;

struct ToolRun {
  int rc = -1;
  std::string out, err;
};

/// The tool with `args` (quoted by the caller), its stdout, stderr and exit code.
ToolRun generate(const std::string& args) {
  ToolRun r;
  const fs::path err = testing::scratch_dir() / "generate.err";
  const std::string command =
      std::string("'") + FREEZEFRAME_TOOL + "' generate " + args + " 2>'" + err.string() + "'";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  const std::vector<char> bytes = testing::read_bytes(err);
  r.err.assign(bytes.begin(), bytes.end());
  return r;
}

#define EXPECT_HAS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "no '" << (part) << "' in:\n" << (text)

/// A Hugging Face checkpoint folder: the tiny Llama's config and weights (vocabulary 16) with
/// the tiny tokenizer (whose first ids are its special tokens).
std::string tiny_checkpoint() {
  const fs::path dir = testing::scratch_dir() / "tiny_checkpoint";
  fs::create_directories(dir);
  for (const auto& e :
       fs::directory_iterator(kSource / "tests/fixtures/checkpoints/weights/llama")) {
    fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(kSource / "tests/fixtures/tokenizer/tiny" / name, dir / name,
                  fs::copy_options::overwrite_existing);
  }
  return dir.string();
}

TEST(GenerateCli, ArgumentMistakesAreUsageErrors) {
  const std::string ckpt = "'" + tiny_checkpoint() + "'";
  const struct {
    std::string args, message;
  } cases[] = {
      {"--prompt hi", "no checkpoint given"},
      {ckpt, "--prompt TEXT is required"},
      {ckpt + " --prompt", "--prompt needs a value"},
      {ckpt + " " + ckpt + " --prompt hi", "one checkpoint at a time"},
      {ckpt + " --prompt hi --temperature -1", "--temperature: '-1' is not a number from 0"},
      {ckpt + " --prompt hi --temperature nan", "--temperature: 'nan' is not a number"},
      {ckpt + " --prompt hi --top-k -2", "--top-k: '-2' is not a whole number from 0"},
      {ckpt + " --prompt hi --top-p 0", "--top-p: '0' is not a number in (0, 1]"},
      {ckpt + " --prompt hi --top-p 1.5", "--top-p: '1.5' is not a number in (0, 1]"},
      {ckpt + " --prompt hi --max-tokens 0", "--max-tokens: '0' is not a whole number from 1"},
      {ckpt + " --prompt hi --seed -1", "--seed: '-1' is not a whole number from 0"},
      {ckpt + " --prompt hi --chat maybe", "--chat: 'maybe' is not on or off"},
      {ckpt + " --prompt hi --device-memory lots", "--device-memory: 'lots' is not a size"},
      {ckpt + " --prompt hi --no-such-flag", "unknown option '--no-such-flag'"},
  };
  for (const auto& c : cases) {
    const ToolRun r = generate(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.err;
    EXPECT_HAS(r.err, c.message);
    EXPECT_HAS(r.err, "usage: freezeframe generate");
  }
  const ToolRun help = generate("--help");
  EXPECT_EQ(help.rc, 0);
  EXPECT_HAS(help.out, "usage: freezeframe generate CHECKPOINT --prompt TEXT");
}

TEST(GenerateCli, WhatItCannotUseIsRefusedNamingTheFileBeforeAnyGpu) {
  ToolRun r = generate("missing.gguf --prompt hi");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_HAS(r.err, "freezeframe generate: not found: cannot read checkpoint 'missing.gguf'");
  EXPECT_EQ(r.err.find(".cpp"), std::string::npos) << "no source location without --verbose";
  // A checkpoint folder without its tokenizer.json.
  const fs::path weights = kSource / "tests/fixtures/checkpoints/weights/llama";
  r = generate("'" + weights.string() + "' --prompt hi");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_HAS(r.err, (weights / "tokenizer.json").string());
  // A tokenizer of another model: its ids run past the model's vocabulary of 16.
  r = generate("'" + tiny_checkpoint() + "' --prompt 'a longer text than sixteen tokens'");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_HAS(r.err, "outside the model's vocabulary of 16 tokens");
  EXPECT_HAS(r.err, "the tokenizer is not the model's");
}

// "<s>" is the tiny tokenizer's id 1, inside the tiny Llama's vocabulary: everything but the
// GPU is there.
TEST(GenerateCli, RunsOnTheGpuOrSaysThereIsNone) {
  const ToolRun r =
      generate("'" + tiny_checkpoint() + "' --prompt '<s>' --chat off --max-tokens 5");
  if (!has_gpu()) {
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_HAS(r.err, "freezeframe generate: unsupported: no GPU to run the model on: ");
    EXPECT_EQ(r.out, "") << "nothing generated";
    return;
  }
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_HAS(r.err, "time to first token");
  // Five tokens, or fewer when one is the tokenizer's </s> (id 2), a stop token.
  EXPECT_HAS(r.err, " tokens (ended by ");
}

TEST(GenerateCli, SmolLM2GreedyIsTheSameTextTwice) {
  const std::string model = testing::smollm2_path(kSource);
  if (!fs::exists(model)) GTEST_SKIP() << "no " << model << " (scripts/fetch-smollm2 fetches it)";
  if (!has_gpu()) GTEST_SKIP() << "needs a CUDA GPU: " << gpu_status();
  const std::string args =
      "'" + model + "' --prompt 'What is the capital of France?' --temperature 0 --max-tokens 24";
  const ToolRun a = generate(args), b = generate(args);
  EXPECT_EQ(a.rc, 0) << a.err;
  EXPECT_HAS(a.err, "(chat)");
  EXPECT_HAS(a.err, "tokens/s after it");
  EXPECT_FALSE(a.out.empty());
  EXPECT_EQ(a.out, b.out);
  // Sampled with a seed: the same seed, the same text.
  const std::string sampled =
      "'" + model + "' --prompt 'Tell me a story.' --seed 7 --max-tokens 24";
  EXPECT_EQ(generate(sampled).out, generate(sampled).out);
}

}  // namespace
}  // namespace freezeframe
