// tools/: freezeframe generate on SmolLM2, where it has been fetched, on a GPU: greedy twice
// to the same text, and sampled with a seed twice to the same text.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "freezeframe/core/device.h"
#include "support/gpu.h"
#include "support/smollm2.h"
#include "tools/generate_cli.h"

namespace freezeframe {
namespace {

TEST(GenerateCli, SmolLM2GreedyIsTheSameTextTwice) {
  FF_REQUIRE_GPU();
  const std::string model = testing::smollm2_path(kSource);
  if (!fs::exists(model)) GTEST_SKIP() << "no " << model << " (scripts/fetch-smollm2 fetches it)";
  const std::string args =
      quoted(model) + " --prompt 'What is the capital of France?' --temperature 0 --max-tokens 24";
  const ToolRun a = generate(args), b = generate(args);
  EXPECT_EQ(a.rc, 0) << a.err;
  EXPECT_HAS(a.err, "(chat)");
  EXPECT_HAS(a.err, "tokens/s after it");
  EXPECT_FALSE(a.out.empty());
  EXPECT_EQ(a.out, b.out);
  // Sampled with a seed: the same seed, the same text.
  const std::string sampled =
      quoted(model) + " --prompt 'Tell me a story.' --seed 7 --max-tokens 24";
  EXPECT_EQ(generate(sampled).out, generate(sampled).out);
}

}  // namespace
}  // namespace freezeframe
