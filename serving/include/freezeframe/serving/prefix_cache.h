#pragma once
// PrefixCache: automatic prefix caching over a BlockPool. A full block of a sequence is found
// by a hash chain: its tokens and the hash of the block before it. The hash only names a
// candidate: a hit compares the tokens and checks that the block was recorded after the very
// block matched before it (each recording has a generation of its own), so a hash collision is
// a miss, never a wrong block. Blocks carry reference counts: requests that share a prefix
// share its blocks.
// A block no request holds stays cached, and is taken back least recently used first when the
// pool has no free block left. A request then starts from its longest cached prefix and
// computes only the rest.
//
// Disabled, it is the pool itself: no block is cached, release frees at once.

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "freezeframe/memory/block_pool.h"

namespace freezeframe {

class PrefixCache {
 public:
  /// Over `pool` (which must outlive it), blocks of `tokens_per_block` tokens.
  PrefixCache(BlockPool& pool, std::int32_t tokens_per_block, bool enabled);

  [[nodiscard]] bool enabled() const { return enabled_; }
  /// Blocks a request can have now: free in the pool, or cached and held by none.
  [[nodiscard]] std::int32_t num_free() const {
    return pool_.num_free() + static_cast<std::int32_t>(evictable_.size());
  }
  /// Cached blocks (held or not).
  [[nodiscard]] std::int32_t num_cached() const {
    return static_cast<std::int32_t>(by_hash_.size());
  }
  [[nodiscard]] std::int32_t num_blocks() const { return pool_.num_blocks(); }

  /// The hash chain of a sequence before its first block.
  static constexpr std::uint64_t kRootHash = 0x6a09e667f3bcc908ull;

  /// Where a sequence's chain stands after its blocks so far: their hash, and the recorded
  /// block that stands for them (its own last block, or another sequence's with the same
  /// prefix) with that recording's generation; none once the chain runs through a block
  /// that is not recorded (then what follows is not recorded either).
  struct Chain {
    std::uint64_t hash = kRootHash;
    std::int32_t block = -1;  ///< −1: before the first block
    std::uint64_t generation = 0;
    bool linked = true;
  };

  /// The cached blocks that hold `tokens` from the start, whole blocks only and at most
  /// `max_tokens` tokens, appended to `blocks` with a reference each; returns the tokens they
  /// hold, and in `chain` where the chain stands after them.
  std::int32_t match(std::span<const std::int32_t> tokens, std::int32_t max_tokens,
                     std::vector<std::int32_t>& blocks, Chain& chain);
  /// Appends `count` blocks with a reference each: free ones first, then cached ones no request
  /// holds, least recently used first (they leave the cache). Throws kOutOfMemory (taking none)
  /// when fewer than `count` can be had.
  void allocate(std::int32_t count, std::vector<std::int32_t>& blocks);
  /// Drops a reference to each of `blocks`; a block no request holds any more stays cached if
  /// it is, else goes back to the pool.
  void release(std::span<const std::int32_t> blocks);
  /// Records that blocks[first, full) of a sequence hold `tokens`, its tokens [first·B, full·B)
  /// (B tokens a block): each becomes findable by match(). `chain`: where the chain stood
  /// after block first − 1 (a default Chain at the start), moved on to block full − 1. A block
  /// whose prefix another block already caches stays uncached (that block stands for it).
  void commit(std::span<const std::int32_t> blocks, std::span<const std::int32_t> tokens,
              std::int32_t first, std::int32_t full, Chain& chain);

  /// Counts a lookup that was used (a request admitted): `queried` tokens, `hit` found cached.
  void record_lookup(std::int64_t queried, std::int64_t hit) {
    queried_tokens_ += queried;
    hit_tokens_ += hit;
  }
  /// Tokens admitted requests found cached, and those they looked up, since the start.
  [[nodiscard]] std::int64_t hit_tokens() const { return hit_tokens_; }
  [[nodiscard]] std::int64_t queried_tokens() const { return queried_tokens_; }
  /// References held on `block` (0 for a free or evictable one).
  [[nodiscard]] std::int32_t references(std::int32_t block) const;

 private:
  struct Cached {
    std::uint64_t hash = 0;
    std::uint64_t generation = 0;  // unique to this recording of the block
    std::int32_t parent = -1;      // the block before it in its sequence (−1: the first) ...
    std::uint64_t parent_generation = 0;  // ... as it was recorded then
    std::vector<std::int32_t> tokens;
    std::int32_t references = 0;
    std::list<std::int32_t>::iterator lru;  // in evictable_ while references == 0
  };
  [[nodiscard]] std::uint64_t hash_block(std::uint64_t parent,
                                         std::span<const std::int32_t> tokens) const;
  void take(std::int32_t block);  // a reference, out of the evictable list

  BlockPool& pool_;
  std::int32_t tokens_per_block_;
  bool enabled_;
  std::unordered_map<std::int32_t, Cached> cached_;          // by block id
  std::unordered_map<std::uint64_t, std::int32_t> by_hash_;  // chain hash → block
  std::unordered_map<std::int32_t, std::int32_t> held_;      // uncached blocks' references
  std::list<std::int32_t> evictable_;                        // least recently used first
  std::uint64_t generations_ = 0;
  std::int64_t hit_tokens_ = 0, queried_tokens_ = 0;
};

}  // namespace freezeframe
