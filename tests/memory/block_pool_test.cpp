// memory/: the KV block pool.

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "freezeframe/base/error.h"
#include "freezeframe/memory/block_pool.h"

namespace freezeframe {
namespace {

TEST(BlockPool, HandsOutEveryBlockOnceAndTakesThemBack) {
  BlockPool pool(10);
  std::vector<std::int32_t> a, b;
  pool.allocate(4, a);
  pool.allocate(6, b);
  EXPECT_EQ(a, (std::vector<std::int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pool.num_free(), 0);
  std::set<std::int32_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 10u) << "no block handed out twice";
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_TRUE(pool.is_free(2));
  std::vector<std::int32_t> c;
  pool.allocate(4, c);
  std::sort(c.begin(), c.end());
  EXPECT_EQ(c, (std::vector<std::int32_t>{0, 1, 2, 3})) << "freed blocks are reused";
}

TEST(BlockPool, AHugePoolCostsOnlyWhatItHandsOut) {
  // The largest pool 32-bit ids allow: building it allocates nothing per block.
  BlockPool pool(0x7fffffff);
  std::vector<std::int32_t> table;
  pool.allocate(3, table);
  EXPECT_EQ(table, (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.num_free(), 0x7fffffff - 3);
  EXPECT_TRUE(pool.is_free(0x7ffffffe));
  EXPECT_FALSE(pool.is_free(1));
  pool.release(table);
  EXPECT_EQ(pool.num_free(), 0x7fffffff);
}

TEST(BlockPool, ExhaustionTakesNothing) {
  BlockPool pool(5);
  std::vector<std::int32_t> table;
  pool.allocate(3, table);
  try {
    pool.allocate(3, table);
    FAIL() << "allocated more blocks than are free";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(e.message().find("2 free blocks of 5; 3 were asked for"), std::string::npos)
        << e.message();
  }
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(BlockPool, BadReleasesChangeNothing) {
  BlockPool pool(6);
  std::vector<std::int32_t> table;
  pool.allocate(3, table);
  const std::vector<std::int32_t> twice = {table[0], table[0]};
  EXPECT_THROW(pool.release(twice), Error);
  const std::vector<std::int32_t> outside = {table[1], 6};
  EXPECT_THROW(pool.release(outside), Error);
  const std::vector<std::int32_t> already_free = {table[2], 5};
  EXPECT_THROW(pool.release(already_free), Error);
  EXPECT_EQ(pool.num_free(), 3) << "a rejected release returns nothing";
  pool.release(table);
  EXPECT_EQ(pool.num_free(), 6);
}

TEST(BlockPool, RandomChurnKeepsTheBooks) {
  std::mt19937 rng(4);
  BlockPool pool(200);
  std::vector<std::vector<std::int32_t>> owners;
  for (int step = 0; step < 5000; ++step) {
    if (!owners.empty() && (rng() % 3 == 0 || pool.num_free() < 8)) {
      const std::size_t i = rng() % owners.size();
      pool.release(owners[i]);
      owners.erase(owners.begin() + static_cast<long>(i));
    } else {
      owners.emplace_back();
      pool.allocate(static_cast<std::int32_t>(1 + rng() % 8), owners.back());
    }
    std::size_t held = 0;
    for (const auto& o : owners) held += o.size();
    ASSERT_EQ(held + static_cast<std::size_t>(pool.num_free()), 200u) << "step " << step;
  }
  EXPECT_EQ(blocks_for(33, 16), 3);
  EXPECT_EQ(blocks_for(32, 16), 2);
  EXPECT_EQ(blocks_for(0, 16), 0);
}

}  // namespace
}  // namespace freezeframe
