#include "freezeframe/memory/block_pool.h"

#include <algorithm>

#include "freezeframe/core/error.h"

namespace freezeframe {

BlockPool::BlockPool(std::int32_t num_blocks) {
  FF_CHECK(num_blocks >= 0, ErrorCode::kInvalidArgument, "a block pool cannot have ", num_blocks,
           " blocks");
  in_use_.assign(num_blocks, false);
  free_.resize(num_blocks);
  // Lowest ids on top of the stack, so a fresh pool hands out 0, 1, 2, ...
  for (std::int32_t i = 0; i < num_blocks; ++i) free_[i] = num_blocks - 1 - i;
}

bool BlockPool::is_free(std::int32_t block) const {
  FF_CHECK(block >= 0 && block < num_blocks(), ErrorCode::kInvalidArgument, "block ", block,
           " is outside the pool of ", num_blocks());
  return !in_use_[block];
}

void BlockPool::allocate(std::int32_t count, std::vector<std::int32_t>& table) {
  FF_CHECK(count >= 0, ErrorCode::kInvalidArgument, "cannot allocate ", count, " blocks");
  FF_CHECK(count <= num_free(), ErrorCode::kOutOfMemory, "the KV cache has ", num_free(),
           " free blocks of ", num_blocks(), "; ", count, " were asked for");
  for (std::int32_t i = 0; i < count; ++i) {
    const std::int32_t block = free_.back();
    free_.pop_back();
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
    FF_CHECK(block >= 0 && block < num_blocks(), ErrorCode::kInvalidArgument, "block ", block,
             " is outside the pool of ", num_blocks());
    FF_CHECK(in_use_[block], ErrorCode::kInvalidArgument, "block ", block, " is already free");
    FF_CHECK(i == 0 || sorted[i - 1] != block, ErrorCode::kInvalidArgument, "block ", block,
             " is listed twice");
  }
  for (std::int32_t block : blocks) {
    in_use_[block] = false;
    free_.push_back(block);
  }
}

}  // namespace freezeframe
