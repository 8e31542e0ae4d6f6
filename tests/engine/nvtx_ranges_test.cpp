// NVTX ranges, checked through the recording injection library (tests/support/nvtx_recorder)
// that the NVTX runtime loads on the process's first NVTX call.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "freezeframe/engine/memory_planner.h"
#include "freezeframe/engine/spec.h"

namespace freezeframe {
namespace {

std::vector<std::string> recorded_events() {
  void* library = dlopen(FREEZEFRAME_NVTX_RECORDER, RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return {};
  using Count = std::size_t (*)();
  using Event = const char* (*)(std::size_t);
  auto count = reinterpret_cast<Count>(dlsym(library, "freezeframe_nvtx_event_count"));
  auto event = reinterpret_cast<Event>(dlsym(library, "freezeframe_nvtx_event"));
  std::vector<std::string> events;
  for (std::size_t i = 0; count != nullptr && event != nullptr && i < count(); ++i) events.emplace_back(event(i));
  dlclose(library);
  return events;
}

TEST(NvtxRanges, PlanningEmitsThePlanRange) {
  // Must precede the process's first NVTX call, when the runtime looks for an injection.
  ASSERT_EQ(setenv("NVTX_INJECTION64_PATH", FREEZEFRAME_NVTX_RECORDER, 1), 0);
  const EngineSpec spec = load_spec(std::string(FREEZEFRAME_SOURCE_DIR) + "/configs/llama-3.1-8b.yaml");
  (void)plan_memory(spec, std::int64_t(141) << 30);
  const auto events = recorded_events();
  ASSERT_FALSE(events.empty()) << "the recorder was not loaded from " << FREEZEFRAME_NVTX_RECORDER;
  EXPECT_EQ(events, (std::vector<std::string>{"push freezeframe plan", "pop freezeframe"}));
}

}  // namespace
}  // namespace freezeframe
