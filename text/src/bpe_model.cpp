#include "bpe_model.h"

#include <queue>

#include "byte_level.h"
#include "freezeframe/base/utf8.h"

namespace freezeframe {

BpeModel::BpeModel(std::unordered_map<std::string, TokenId> vocab,
                   const std::vector<BpeMerge>& merges, BpeOptions options)
    : vocab_(std::move(vocab)), options_(options) {
  ranks_.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const BpeMerge& m = merges[i];
    ranks_[key(m.left, m.right)] = Rank{std::int32_t(i), m.merged};
  }
  for (int b = 0; b < 256; ++b) {
    std::string c;
    utf8::append(c, byte_level::char_of(std::uint8_t(b)));
    const auto it = vocab_.find(c);
    byte_tokens_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  const bool cached = word.size() <= kCachedWordBytes;
  if (cached) {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<TokenId> ids;
  merge(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cached) {
    const std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheWords) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

void BpeModel::merge(std::string_view word, std::vector<TokenId>& out) const {
  if (options_.ignore_merges) {
    const auto it = vocab_.find(byte_level::spell(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // The symbols as a list linked through prev/next; a merged-away symbol is dead.
  struct Symbol {
    TokenId id;
    std::int32_t prev, next;
    bool dead;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  bool pending_unk = false;
  auto add = [&](TokenId id) {
    const auto n = std::int32_t(symbols.size());
    symbols.push_back({id, n - 1, n + 1, false});
  };
  for (const char ch : word) {
    const TokenId id = byte_tokens_[static_cast<std::uint8_t>(ch)];
    if (id >= 0) {
      pending_unk = false;
      add(id);
    } else if (options_.unk >= 0 && !(options_.fuse_unk && pending_unk)) {
      pending_unk = true;
      add(options_.unk);
    }
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    std::int32_t rank, pos;
    TokenId merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](std::int32_t pos) {
    const std::int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = ranks_.find(key(symbols[pos].id, symbols[next].id));
    if (it != ranks_.end()) queue.push({it->second.rank, pos, it->second.merged});
  };
  for (std::int32_t i = 0; i + 1 < std::int32_t(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.dead || left.next < 0) continue;
    // Stale when either side has changed since the pair was queued.
    const auto it = ranks_.find(key(left.id, symbols[left.next].id));
    if (it == ranks_.end() || it->second.merged != top.merged) continue;
    Symbol& right = symbols[left.next];
    left.id = top.merged;
    right.dead = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (!s.dead) out.push_back(s.id);
  }
}

}  // namespace freezeframe
