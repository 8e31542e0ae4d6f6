// NVTX ranges, checked through the recording injection library (tests/support/nvtx_recorder)
// that the NVTX runtime loads on the process's first NVTX call.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/spec/spec.h"
#include "support/nvtx_events.h"

namespace freezeframe {
namespace {

std::vector<std::string> recorded_events() {
  return testing::recorded_nvtx_events(FREEZEFRAME_NVTX_RECORDER);
}

TEST(NvtxRanges, PlanningEmitsThePlanRange) {
  // Must precede the process's first NVTX call, when the runtime looks for an injection.
  ASSERT_EQ(setenv("NVTX_INJECTION64_PATH", FREEZEFRAME_NVTX_RECORDER, 1), 0);
  const EngineSpec spec =
      load_spec(std::string(FREEZEFRAME_SOURCE_DIR) + "/configs/llama-3.1-8b.yaml");
  (void)plan_memory(spec, std::int64_t(141) << 30);
  const auto events = recorded_events();
  ASSERT_FALSE(events.empty()) << "the recorder was not loaded from " << FREEZEFRAME_NVTX_RECORDER;
  EXPECT_EQ(events, (std::vector<std::string>{"push freezeframe plan", "pop freezeframe"}));
}

}  // namespace
}  // namespace freezeframe
