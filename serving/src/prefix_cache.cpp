#include "freezeframe/serving/prefix_cache.h"

#include <algorithm>

#include "freezeframe/base/error.h"

namespace freezeframe {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

}  // namespace

PrefixCache::PrefixCache(BlockPool& pool, std::int32_t tokens_per_block, bool enabled)
    : pool_(pool), tokens_per_block_(tokens_per_block), enabled_(enabled) {
  FF_CHECK(tokens_per_block > 0, ErrorCode::kInvalidArgument,
           "a prefix cache needs blocks of at least one token, got ", tokens_per_block);
}

std::uint64_t PrefixCache::hash_block(std::uint64_t parent,
                                      std::span<const std::int32_t> tokens) const {
  std::uint64_t h = mix(parent, static_cast<std::uint64_t>(tokens.size()));
  for (const std::int32_t t : tokens) h = mix(h, static_cast<std::uint32_t>(t));
  return h;
}

std::int32_t PrefixCache::references(std::int32_t block) const {
  if (const auto it = cached_.find(block); it != cached_.end()) return it->second.references;
  const auto it = held_.find(block);
  return it == held_.end() ? 0 : it->second;
}

void PrefixCache::take(std::int32_t block) {
  Cached& c = cached_.at(block);
  if (c.references++ == 0) evictable_.erase(c.lru);
}

std::int32_t PrefixCache::match(std::span<const std::int32_t> tokens, std::int32_t max_tokens,
                                std::vector<std::int32_t>& blocks, Chain& chain) {
  chain = Chain{};
  const auto limit = std::min<std::int64_t>(max_tokens, static_cast<std::int64_t>(tokens.size()));
  if (!enabled_) return 0;
  std::int32_t matched = 0;
  while (matched + tokens_per_block_ <= limit) {
    const auto piece = tokens.subspan(static_cast<std::size_t>(matched),
                                      static_cast<std::size_t>(tokens_per_block_));
    const std::uint64_t h = hash_block(chain.hash, piece);
    const auto found = by_hash_.find(h);
    if (found == by_hash_.end()) break;
    const Cached& c = cached_.at(found->second);
    // Recorded after the very block matched before it, with these tokens: the hash only named
    // a candidate.
    if (c.parent != chain.block || c.parent_generation != chain.generation ||
        !std::equal(piece.begin(), piece.end(), c.tokens.begin())) {
      break;
    }
    take(found->second);
    blocks.push_back(found->second);
    matched += tokens_per_block_;
    chain = Chain{h, found->second, c.generation, true};
  }
  return matched;
}

void PrefixCache::allocate(std::int32_t count, std::vector<std::int32_t>& blocks) {
  FF_CHECK(count >= 0, ErrorCode::kInvalidArgument, "cannot allocate ", count, " blocks");
  FF_CHECK(count <= num_free(), ErrorCode::kOutOfMemory, "the KV cache has ", num_free(),
           " free blocks of ", num_blocks(), "; ", count, " were asked for");
  const std::int32_t fresh = std::min(count, pool_.num_free());
  const std::size_t first = blocks.size();
  pool_.allocate(fresh, blocks);
  for (std::size_t i = first; i < blocks.size(); ++i) held_[blocks[i]] = 1;
  for (std::int32_t i = fresh; i < count; ++i) {
    // The least recently used cached block no request holds leaves the cache.
    const std::int32_t block = evictable_.front();
    evictable_.pop_front();
    by_hash_.erase(cached_.at(block).hash);
    cached_.erase(block);
    held_[block] = 1;
    blocks.push_back(block);
  }
}

void PrefixCache::release(std::span<const std::int32_t> blocks) {
  std::vector<std::int32_t> to_pool;
  // Last block first: a sequence's tail becomes the least recently used, so eviction takes it
  // before its head. Evicting a head would strand every block after it (a match walks the chain
  // from the start), wasting the cache on blocks no lookup can reach.
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    const std::int32_t block = *b;
    if (const auto it = cached_.find(block); it != cached_.end()) {
      FF_CHECK(it->second.references > 0, ErrorCode::kInvalidArgument, "block ", block,
               " is released more often than it was taken");
      if (--it->second.references == 0) {
        it->second.lru = evictable_.insert(evictable_.end(), block);
      }
      continue;
    }
    const auto it = held_.find(block);
    FF_CHECK(it != held_.end(), ErrorCode::kInvalidArgument, "block ", block,
             " is released but not held");
    if (--it->second == 0) {
      held_.erase(it);
      to_pool.push_back(block);
    }
  }
  pool_.release(to_pool);
}

void PrefixCache::commit(std::span<const std::int32_t> blocks, std::span<const std::int32_t> tokens,
                         std::int32_t first, std::int32_t full, Chain& chain) {
  if (!enabled_ || full <= first) return;
  FF_CHECK(first >= 0 && full <= static_cast<std::int32_t>(blocks.size()) &&
               static_cast<std::int64_t>(full - first) * tokens_per_block_ ==
                   static_cast<std::int64_t>(tokens.size()),
           ErrorCode::kInvalidArgument, "commit: blocks [", first, ", ", full,
           ") of a sequence of ", blocks.size(), " blocks and ", tokens.size(), " tokens");
  for (std::int32_t b = first; b < full; ++b) {
    const auto piece = tokens.subspan(static_cast<std::size_t>(b - first) * tokens_per_block_,
                                      static_cast<std::size_t>(tokens_per_block_));
    const std::uint64_t h = hash_block(chain.hash, piece);
    const std::int32_t block = blocks[b];
    // The chain's block before this one is still what it was recorded as: an evicted one
    // (its id taken by other tokens since) breaks the chain here.
    const auto parent = chain.block >= 0 ? cached_.find(chain.block) : cached_.end();
    if (chain.linked && chain.block >= 0 &&
        (parent == cached_.end() || parent->second.generation != chain.generation)) {
      chain.linked = false;
    }
    const auto mine = cached_.find(block);
    const auto stand_in = by_hash_.find(h);
    if (!chain.linked) {
      // Nothing after an unrecorded block can be found: leave the rest as it is.
    } else if (mine != cached_.end()) {
      // Matched from the cache: already recorded.
    } else if (stand_in != by_hash_.end()) {
      // Another sequence's block holds this prefix: it stands for ours, if it is this very
      // continuation (else the hashes collided: stop recording here).
      const Cached& other = cached_.at(stand_in->second);
      const bool same = other.parent == chain.block &&
                        other.parent_generation == chain.generation &&
                        std::equal(piece.begin(), piece.end(), other.tokens.begin());
      chain = same ? Chain{h, stand_in->second, other.generation, true} : Chain{h, -1, 0, false};
      continue;
    } else if (const auto held = held_.find(block); held != held_.end()) {
      Cached c;
      c.hash = h;
      c.generation = ++generations_;
      c.parent = chain.block;
      c.parent_generation = chain.generation;
      c.tokens.assign(piece.begin(), piece.end());
      c.references = held->second;
      held_.erase(held);
      by_hash_[h] = block;
      const std::uint64_t generation = c.generation;
      cached_.emplace(block, std::move(c));
      chain = Chain{h, block, generation, true};
      continue;
    }
    if (mine != cached_.end() && chain.linked) {
      chain = Chain{h, block, mine->second.generation, true};
    } else {
      chain = Chain{h, -1, 0, false};
    }
  }
}

}  // namespace freezeframe
