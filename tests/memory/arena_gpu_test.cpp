// memory/: the Arena's one device allocation, on a GPU.

#include <gtest/gtest.h>

#include "freezeframe/base/error.h"
#include "freezeframe/memory/arena.h"
#include "freezeframe/memory/memory_plan.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

MemoryPlan small_plan() {
  MemoryPlan plan(4096);
  plan.add_region("a", RegionKind::kWeights, 100);       // [0, 100)
  plan.add_region("b", RegionKind::kActivations, 1000);  // [256, 1256)
  plan.add_placement("b", {"b.x", 512, 256});
  return plan;
}

TEST(Arena, OneDeviceAllocation) {
  FF_REQUIRE_GPU();
  const MemoryPlan plan = small_plan();
  const Arena arena = Arena::allocate(plan);
  EXPECT_TRUE(arena.device().kind == DeviceKind::kCuda);
  EXPECT_EQ(arena.bytes(), plan.used_bytes());
  EXPECT_TRUE(arena.view("b", DType::kF32, {250}).is_cuda());
  MemoryPlan too_big(100);
  too_big.add_region("x", RegionKind::kWeights, 200);
  EXPECT_THROW((void)Arena::allocate(too_big), Error) << "checked before allocating";
}

}  // namespace
}  // namespace freezeframe
