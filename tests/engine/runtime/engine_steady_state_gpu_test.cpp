// After construction the engine allocates nothing: thousands of steps of random shapes (graphs
// of both kinds, and eager steps above the largest capture size) leave the allocation counters
// and the device's free memory where they were.
//
// The process loads kernels eagerly (CUDA_MODULE_LOADING=EAGER, set before CUDA starts):
// otherwise the driver loads a kernel's code on its first launch, and an eager step of a new
// shape may make cuBLAS pick a kernel not launched before; that is the driver's code memory,
// not memory the engine allocates, but it would show in the free-memory count. The count is
// the device's: run this test with no other process using the GPU (scripts/gpu-test runs it
// alone).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "engine/runtime/engine_test_util.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/spec/spec.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

using testing::random_shape;
using testing::TestBatch;
using testing::tiny_spec;

TEST(Engine, SteadyStateAllocatesNothing) {
  FF_REQUIRE_GPU();
  Engine engine(parse_spec(tiny_spec("paged_decode", "  max_capture_size: 64\n")));
  std::mt19937 rng(21);
  // One step of each kind first, so lazily loaded kernels are resident before measuring.
  for (const int prefills : {0, 1}) {
    const TestBatch warm(random_shape(60, prefills, 90, 300, rng), 16, engine.limits().num_blocks,
                         rng);
    (void)engine.step(warm.batch());
  }
  engine.synchronize();
  std::size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  const AllocationCounters before = allocation_counters();
  int modes[3] = {0, 0, 0};
  std::size_t free_seen = free_before;
  for (int i = 0; i < 3000; ++i) {
    const int decodes = std::uniform_int_distribution<int>(0, 31)(rng);
    const int prefills = decodes == 0 ? 1 : std::uniform_int_distribution<int>(0, 1)(rng);
    const TestBatch batch(random_shape(decodes, prefills, 120, 300, rng), 16,
                          engine.limits().num_blocks, rng);
    const StepResult r = engine.step(batch.batch());
    ++modes[static_cast<int>(r.mode)];
    // Each step that takes device memory, named (an allocation happens as the call is made,
    // so no synchronisation is needed to see it).
    std::size_t free_now = 0, stack = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_now, &total), cudaSuccess);
    ASSERT_EQ(cudaDeviceGetLimit(&stack, cudaLimitStackSize), cudaSuccess);
    EXPECT_EQ(free_now, free_seen)
        << "step " << i << " (" << to_string(r.mode) << ", " << r.descriptor.num_tokens
        << " tokens, " << decodes << " decodes, " << prefills << " prefills) took "
        << static_cast<long long>(free_seen - free_now)
        << " bytes; the per-thread stack limit is now " << stack;
    free_seen = free_now;
  }
  engine.synchronize();
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  const AllocationCounters after = allocation_counters();
  EXPECT_EQ(after.device_allocations, before.device_allocations);
  EXPECT_EQ(after.pinned_allocations, before.pinned_allocations);
  EXPECT_EQ(free_after, free_before);
  EXPECT_GT(modes[static_cast<int>(RuntimeMode::kEager)], 0);
  EXPECT_GT(modes[static_cast<int>(RuntimeMode::kPiecewise)], 0);
  EXPECT_GT(modes[static_cast<int>(RuntimeMode::kFull)], 0);
}

}  // namespace
}  // namespace freezeframe

int main(int argc, char** argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);  // before the first CUDA call
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
