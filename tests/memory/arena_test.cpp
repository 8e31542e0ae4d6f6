// memory/: MemoryPlan regions and the Arena's checks. The checks run over host memory the test
// owns (Arena::borrow), so they run without a GPU (the one-allocation path: arena_gpu_test).

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "freezeframe/base/error.h"
#include "freezeframe/memory/arena.h"
#include "freezeframe/memory/memory_plan.h"

namespace freezeframe {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using HostBlock = std::unique_ptr<std::byte, FreeDeleter>;

HostBlock host_block(std::size_t bytes) {
  return HostBlock(static_cast<std::byte*>(std::aligned_alloc(256, bytes)));
}

MemoryPlan small_plan() {
  MemoryPlan plan(4096);
  plan.add_region("a", RegionKind::kWeights, 100);       // [0, 100)
  plan.add_region("b", RegionKind::kActivations, 1000);  // [256, 1256)
  plan.add_placement("b", {"b.x", 512, 256});
  return plan;
}

TEST(MemoryPlan, RegionsAreAlignedAndNamed) {
  const MemoryPlan plan = small_plan();
  ASSERT_EQ(plan.regions().size(), 2u);
  EXPECT_EQ(plan.region("b").offset, 256);
  EXPECT_EQ(plan.used_bytes(), 1256);
  EXPECT_EQ(plan.region("b").placements[0].offset, 256 + 512) << "placements are arena offsets";
  EXPECT_EQ(plan.find("c"), nullptr);
  EXPECT_THROW((void)plan.region("c"), Error);
  EXPECT_NO_THROW(plan.check_fits());
}

TEST(MemoryPlan, MistakesAreRefused) {
  MemoryPlan plan = small_plan();
  EXPECT_THROW(plan.add_region("a", RegionKind::kWeights, 1), Error) << "repeated name";
  EXPECT_THROW(plan.add_region("n", RegionKind::kWeights, -1), Error);
  EXPECT_THROW(plan.add_placement("b", {"too far", 900, 200}), Error);
  plan.add_region("big", RegionKind::kKvCache, 4000);
  try {
    plan.check_fits();
    FAIL() << "a region past the capacity was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("region 'big'"), std::string::npos) << e.what();
  }
}

TEST(Arena, ViewsInsideTheirRegionsAreHandedOut) {
  const MemoryPlan plan = small_plan();
  HostBlock memory = host_block(4096);
  const Arena arena = Arena::borrow(plan, memory.get(), 4096, Device::cpu());
  const TensorView v = arena.view("b", DType::kF32, {250});
  EXPECT_EQ(v.data(), memory.get() + 256);
  EXPECT_EQ(arena.view("b", DType::kF32, {2, 10}, 920).data(), memory.get() + 256 + 920);
  const TensorView x =
      arena.placement_view("b", "b.x", DType::kBF16, std::vector<std::int64_t>{128});
  EXPECT_EQ(x.data(), memory.get() + 768);
  EXPECT_EQ(arena.data("a"), memory.get());
}

TEST(Arena, ViewsPastTheirRegionAreRefused) {
  const MemoryPlan plan = small_plan();
  HostBlock memory = host_block(4096);
  const Arena arena = Arena::borrow(plan, memory.get(), 4096, Device::cpu());
  try {
    (void)arena.view("a", DType::kF32, {26});  // 104 bytes in a 100-byte region
    FAIL() << "an overlong view was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("past the end of region 'a'"), std::string::npos);
  }
  EXPECT_THROW((void)arena.view("b", DType::kF32, {10}, 996), Error) << "offset + span too far";
  EXPECT_THROW((void)arena.view("b", DType::kF32, {1}, 2), Error) << "misaligned offset";
  EXPECT_THROW((void)arena.view("b", DType::kF32, {1}, -4), Error);
  const std::int64_t shape[] = {4, 4}, strides[] = {100, 1};  // reaches 301 floats
  EXPECT_THROW((void)arena.strided_view("b", DType::kF32, shape, strides), Error);
  EXPECT_THROW((void)arena.placement_view("b", "b.x", DType::kF32, std::vector<std::int64_t>{65}),
               Error);
  EXPECT_THROW((void)arena.placement_view("b", "nope", DType::kF32, std::vector<std::int64_t>{1}),
               Error);
  EXPECT_THROW((void)arena.view("zzz", DType::kF32, {1}), Error);
}

TEST(Arena, TooSmallOrMisalignedMemoryIsRefused) {
  const MemoryPlan plan = small_plan();
  HostBlock memory = host_block(4096);
  try {
    (void)Arena::borrow(plan, memory.get(), 1000, Device::cpu());
    FAIL() << "region b does not fit 1000 bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("region 'b'"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)Arena::borrow(plan, memory.get() + 8, 4000, Device::cpu()), Error);
}

}  // namespace
}  // namespace freezeframe
