// tools/: freezeframe generate on the command line. Mistakes in its arguments are usage errors
// (exit 2) and a checkpoint, tokenizer or prompt it cannot use an error (exit 1) naming the
// file, all before any GPU is asked for; without a GPU it says so (exit 1), with one it
// generates a tiny Llama with its own weights (SmolLM2: generate_cli_gpu_test).

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "freezeframe/core/device.h"
#include "tools/generate_cli.h"

namespace freezeframe {
namespace {

TEST(GenerateCli, ArgumentMistakesAreUsageErrors) {
  const std::string ckpt = quoted(tiny_checkpoint());
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
  r = generate(quoted(weights.string()) + " --prompt hi");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_HAS(r.err, (weights / "tokenizer.json").string());
  // A tokenizer of another model: its ids run past the model's vocabulary of 16.
  r = generate(quoted(tiny_checkpoint()) + " --prompt 'a longer text than sixteen tokens'");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_HAS(r.err, "outside the model's vocabulary of 16 tokens");
  EXPECT_HAS(r.err, "the tokenizer is not the model's");
}

// "<s>" is the tiny tokenizer's id 1, inside the tiny Llama's vocabulary: everything but the
// GPU is there.
TEST(GenerateCli, RunsOnTheGpuOrSaysThereIsNone) {
  const ToolRun r =
      generate(quoted(tiny_checkpoint()) + " --prompt '<s>' --chat off --max-tokens 5");
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

}  // namespace
}  // namespace freezeframe
