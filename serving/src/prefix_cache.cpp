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
                                std::vector<std::int32_t>& blocks, std::uint64_t& chain) {
  chain = kRootHash;
  const auto limit = std::min<std::int64_t>(max_tokens, static_cast<std::int64_t>(tokens.size()));
  if (!enabled_) return 0;
  std::uint64_t parent = kRootHash;
  std::int32_t matched = 0;
  while (matched + tokens_per_block_ <= limit) {
    const auto piece = tokens.subspan(static_cast<std::size_t>(matched),
                                      static_cast<std::size_t>(tokens_per_block_));
    const std::uint64_t h = hash_block(parent, piece);
    const auto found = by_hash_.find(h);
    if (found == by_hash_.end()) break;
    const Cached& c = cached_.at(found->second);
    if (c.parent != parent || !std::equal(piece.begin(), piece.end(), c.tokens.begin())) break;
    take(found->second);
    blocks.push_back(found->second);
    matched += tokens_per_block_;
    parent = h;
  }
  chain = parent;
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
                         std::int32_t first, std::int32_t full, std::uint64_t& chain) {
  if (!enabled_ || full <= first) return;
  FF_CHECK(first >= 0 && full <= static_cast<std::int32_t>(blocks.size()) &&
               static_cast<std::int64_t>(full - first) * tokens_per_block_ ==
                   static_cast<std::int64_t>(tokens.size()),
           ErrorCode::kInvalidArgument, "commit: blocks [", first, ", ", full,
           ") of a sequence of ", blocks.size(), " blocks and ", tokens.size(), " tokens");
  for (std::int32_t b = first; b < full; ++b) {
    const auto piece = tokens.subspan(static_cast<std::size_t>(b - first) * tokens_per_block_,
                                      static_cast<std::size_t>(tokens_per_block_));
    const std::uint64_t h = hash_block(chain, piece);
    const std::int32_t block = blocks[b];
    const auto held = held_.find(block);
    // Cached already (matched), or another block holds this prefix: nothing to record.
    if (held != held_.end() && !by_hash_.contains(h)) {
      Cached c;
      c.hash = h;
      c.parent = chain;
      c.tokens.assign(piece.begin(), piece.end());
      c.references = held->second;
      held_.erase(held);
      by_hash_[h] = block;
      cached_.emplace(block, std::move(c));
    }
    chain = h;
  }
}

}  // namespace freezeframe
