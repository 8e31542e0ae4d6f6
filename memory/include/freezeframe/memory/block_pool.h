#pragma once
// BlockPool: the host-side owner of a KV cache's block ids. The serving loop takes blocks for
// a request as its sequence grows and gives them back when it finishes; the engine only sees
// the block tables this produces.

#include <cstdint>
#include <span>
#include <vector>

namespace freezeframe {

class BlockPool {
 public:
  /// A pool of blocks 0 .. num_blocks − 1, all free. Its host memory grows with the blocks
  /// ever handed out, not with the pool's size (a pool may have billions of blocks).
  explicit BlockPool(std::int32_t num_blocks);

  [[nodiscard]] std::int32_t num_blocks() const { return num_blocks_; }
  [[nodiscard]] std::int32_t num_free() const {
    return static_cast<std::int32_t>(released_.size()) + (num_blocks_ - fresh_);
  }
  [[nodiscard]] bool is_free(std::int32_t block) const;

  /// Appends `count` free blocks to `table`. Throws kOutOfMemory (taking none) when fewer than
  /// `count` are free.
  void allocate(std::int32_t count, std::vector<std::int32_t>& table);
  /// Returns `blocks` to the pool. Throws kInvalidArgument (returning none) for an id outside
  /// the pool, one that is already free, or one listed twice.
  void release(std::span<const std::int32_t> blocks);

 private:
  std::int32_t num_blocks_ = 0;
  std::int32_t fresh_ = 0;              // blocks [fresh_, num_blocks_) were never handed out
  std::vector<std::int32_t> released_;  // a stack: the most recently freed block is reused first
  std::vector<bool> in_use_;            // over [0, fresh_)
};

/// Blocks of `block_size` tokens needed to hold `tokens` tokens.
[[nodiscard]] constexpr std::int32_t blocks_for(std::int64_t tokens, std::int32_t block_size) {
  return static_cast<std::int32_t>((tokens + block_size - 1) / block_size);
}

}  // namespace freezeframe
