// The engine's NVTX ranges (docs/DESIGN.md, "NVTX"), recorded by the injection library in
// tests/support/nvtx_recorder.cpp: plan, capture, step, metadata upload, replay, and the
// attention forwards that run eagerly; with layer_by_layer, one replay range per layer.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/engine_test_util.h"
#include "freezeframe/engine/runtime/engine.h"
#include "support/gpu.h"
#include "support/nvtx_events.h"

namespace freezeframe {
namespace {

std::vector<std::string> recorded_events() {
  return testing::recorded_nvtx_events(FREEZEFRAME_NVTX_RECORDER);
}

/// The pushes in the `freezeframe` domain from index `from` on, without the prefix.
std::vector<std::string> pushes_since(std::size_t from) {
  const std::vector<std::string> events = recorded_events();
  std::vector<std::string> pushes;
  const std::string prefix = "push freezeframe ";
  for (std::size_t i = from; i < events.size(); ++i) {
    if (events[i].rfind(prefix, 0) == 0) pushes.push_back(events[i].substr(prefix.size()));
  }
  return pushes;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(EngineNvtx, RangesOfPlanCaptureStepReplayAndAttention) {
  FF_REQUIRE_GPU();
  // Before the process's first NVTX call, when the runtime looks for an injection library.
  ASSERT_EQ(setenv("NVTX_INJECTION64_PATH", FREEZEFRAME_NVTX_RECORDER, 1), 0);
  Engine engine(parse_spec(testing::tiny_spec("paged_decode",
                                              "  mode: full_and_piecewise\n"
                                              "  capture_sizes: [1, 2, 4, 8]\n")));
  const std::vector<std::string> built = pushes_since(0);
  ASSERT_FALSE(built.empty()) << "the recorder was not loaded from " << FREEZEFRAME_NVTX_RECORDER;
  EXPECT_EQ(built.front(), "plan");
  EXPECT_TRUE(contains(built, "capture[size=8,mode=full]"));
  EXPECT_TRUE(contains(built, "capture[size=1,mode=piecewise]"));

  std::mt19937 rng(1);
  const int blocks = engine.limits().num_blocks;
  const testing::TestBatch decode(testing::random_shape(3, 0, 1, 100, rng), 16, blocks, rng);
  std::size_t mark = recorded_events().size();
  (void)engine.step(decode.batch());
  EXPECT_EQ(pushes_since(mark),
            (std::vector<std::string>{"step[tokens=3,reqs=3]", "metadata_upload",
                                      "replay[size=4,mode=full]"}));

  const testing::TestBatch mixed(testing::random_shape(2, 1, 3, 100, rng), 16, blocks, rng);
  mark = recorded_events().size();
  (void)engine.step(mixed.batch());
  const std::vector<std::string> pieces = pushes_since(mark);
  int tokens = 0;
  for (const StepRequest& r : mixed.batch().requests) tokens += r.query_len;
  const std::string step = "step[tokens=" + std::to_string(tokens) + ",reqs=3]";
  // The step runs padded to the smallest captured size that holds it.
  int size = 1;
  while (size < tokens) size *= 2;
  const std::string piece = "replay[size=" + std::to_string(size) + ",mode=piecewise,piece=";
  ASSERT_GE(pieces.size(), 7u);
  EXPECT_EQ(pieces[0], step);
  EXPECT_EQ(pieces[1], "metadata_upload");
  EXPECT_EQ(pieces[2], piece + "0]");
  // The spec names the backend by its alias; the range by its own name.
  EXPECT_EQ(pieces[3], "attention[layer=0,backend=paged]");
  EXPECT_EQ(pieces[4], piece + "1]");
  EXPECT_EQ(pieces[5], "attention[layer=1,backend=paged]");
  EXPECT_EQ(pieces[6], piece + "2]");

  // Eagerly, every attention forward is a range of its own.
  mark = recorded_events().size();
  (void)engine.step(decode.batch(), {.eager = true});
  const std::vector<std::string> eager = pushes_since(mark);
  EXPECT_TRUE(contains(eager, "attention[layer=1,backend=paged]"));
  EXPECT_FALSE(contains(eager, "replay[size=4,mode=full]"));

  // Layer by layer: one full graph per layer, each replayed in its own range.
  Engine layered(parse_spec(testing::tiny_spec("paged_decode",
                                               "  mode: full_and_piecewise\n"
                                               "  capture_sizes: [4]\n"
                                               "  layer_by_layer: true\n")));
  mark = recorded_events().size();
  (void)layered.step(decode.batch());
  EXPECT_EQ(pushes_since(mark),
            (std::vector<std::string>{
                "step[tokens=3,reqs=3]", "metadata_upload",
                "replay[size=4,mode=full,layer=embedding]", "replay[size=4,mode=full,layer=0]",
                "replay[size=4,mode=full,layer=1]", "replay[size=4,mode=full,layer=lm_head]"}));
  layered.synchronize();
  engine.synchronize();
}

}  // namespace
}  // namespace freezeframe
