#include "freezeframe/memory/block_pool.h"

#include <algorithm>

#include "freezeframe/base/error.h"

namespace freezeframe {

BlockPool::BlockPool(std::int32_t num_blocks) : num_blocks_(num_blocks) {
  FF_CHECK(num_blocks >= 0, ErrorCode::kInvalidArgument, "a block pool cannot have ", num_blocks,
           " blocks");
}

bool BlockPool::is_free(std::int32_t block) const {
  FF_CHECK(block >= 0 && block < num_blocks_, ErrorCode::kInvalidArgument, "block ", block,
           " is outside the pool of ", num_blocks_);
  return block >= fresh_ || !in_use_[block];
}

void BlockPool::allocate(std::int32_t count, std::vector<std::int32_t>& table) {
  FF_CHECK(count >= 0, ErrorCode::kInvalidArgument, "cannot allocate ", count, " blocks");
  FF_CHECK(count <= num_free(), ErrorCode::kOutOfMemory, "the KV cache has ", num_free(),
           " free blocks of ", num_blocks_, "; ", count, " were asked for");
  // Released blocks first (most recent on top), then fresh ones in order: a fresh pool hands
  // out 0, 1, 2, ...
  for (std::int32_t i = 0; i < count; ++i) {
    std::int32_t block;
    if (!released_.empty()) {
      block = released_.back();
      released_.pop_back();
    } else {
      block = fresh_++;
      in_use_.push_back(false);
    }
    in_use_[block] = true;
    table.push_back(block);
  }
}

void BlockPool::release(std::span<const std::int32_t> blocks) {
  // Check everything first, so a bad list changes nothing.
  std::vector<std::int32_t> sorted(blocks.begin(), blocks.end());
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const std::int32_t block = sorted[i];
    FF_CHECK(block >= 0 && block < num_blocks_, ErrorCode::kInvalidArgument, "block ", block,
             " is outside the pool of ", num_blocks_);
    FF_CHECK(!is_free(block), ErrorCode::kInvalidArgument, "block ", block, " is already free");
    FF_CHECK(i == 0 || sorted[i - 1] != block, ErrorCode::kInvalidArgument, "block ", block,
             " is listed twice");
  }
  for (std::int32_t block : blocks) {
    in_use_[block] = false;
    released_.push_back(block);
  }
}

}  // namespace freezeframe
