#pragma once
// BpeModel: byte-level BPE over one pre-tokenized word. The word's bytes start as the tokens of
// their alphabet characters; then, lowest merge rank first (leftmost first among equals), a
// pair of neighbours becomes its merged token, until no pair has a merge (Hugging Face's
// algorithm: a priority queue of candidate pairs, stale ones skipped). Words already seen are
// served from a cache of bounded size. Private to model/.

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "freezeframe/text/tokenizer.h"

namespace freezeframe {

struct BpeMerge {
  TokenId left = 0, right = 0, merged = 0;
};

struct BpeOptions {
  TokenId unk = -1;            ///< for bytes without a token; -1: such bytes are dropped
  bool fuse_unk = false;       ///< consecutive unknown bytes become one unk
  bool ignore_merges = false;  ///< a word that is a token is that token, merges or not
};

class BpeModel {
 public:
  /// `vocab`: byte-level spelling to id; `merges` by rank (a later duplicate of a pair wins,
  /// as in Hugging Face's map).
  BpeModel(std::unordered_map<std::string, TokenId> vocab, const std::vector<BpeMerge>& merges,
           BpeOptions options);
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  /// Appends the tokens of `word` (raw bytes) to `out`. Safe to call from several threads.
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;

  [[nodiscard]] const std::unordered_map<std::string, TokenId>& vocab() const { return vocab_; }

 private:
  struct Rank {
    std::int32_t rank;
    TokenId merged;
  };
  static std::uint64_t key(TokenId left, TokenId right) {
    return (std::uint64_t(std::uint32_t(left)) << 32) | std::uint32_t(right);
  }
  void merge(std::string_view word, std::vector<TokenId>& out) const;

  std::unordered_map<std::string, TokenId> vocab_;
  std::unordered_map<std::uint64_t, Rank> ranks_;
  std::array<TokenId, 256> byte_tokens_{};  // -1 where the byte's character is no token
  BpeOptions options_;

  // Words of up to kCachedWordBytes, at most kCacheWords of them (cleared when full).
  static constexpr std::size_t kCachedWordBytes = 256;
  static constexpr std::size_t kCacheWords = std::size_t(1) << 16;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<TokenId>> cache_;
};

}  // namespace freezeframe
