#include "added_tokens.h"

#include "freezeframe/base/utf8.h"
#include "unicode_tables.h"

namespace freezeframe {
namespace {

bool white_space_at(std::string_view text, std::size_t at, std::size_t* bytes) {
  const utf8::Char c = utf8::next(text, at);
  *bytes = c.bytes;
  return c.cp != utf8::kInvalid && char_class(c.cp) == CharClass::kSpace;
}

}  // namespace

void AddedTokens::Trie::add(std::string_view s, std::int32_t index) {
  std::int32_t node = 0;
  for (const char ch : s) {
    const std::uint64_t k = (std::uint64_t(node) << 8) | static_cast<std::uint8_t>(ch);
    const auto it = children.find(k);
    if (it != children.end()) {
      node = it->second;
    } else {
      const auto next = std::int32_t(token.size());
      token.push_back(-1);
      children.emplace(k, next);
      node = next;
    }
  }
  token[node] = index;  // a later token of the same text wins
}

std::pair<std::int32_t, std::size_t> AddedTokens::Trie::longest(std::string_view text,
                                                                std::size_t at) const {
  std::pair<std::int32_t, std::size_t> best{-1, 0};
  std::int32_t node = 0;
  for (std::size_t i = at; i < text.size(); ++i) {
    const auto it = children.find((std::uint64_t(node) << 8) | static_cast<std::uint8_t>(text[i]));
    if (it == children.end()) break;
    node = it->second;
    if (token[node] >= 0) best = {token[node], i + 1 - at};
  }
  return best;
}

AddedTokens::AddedTokens(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    (tokens_[i].normalized ? normalized_ : raw_).add(tokens_[i].content, std::int32_t(i));
    any_normalized_ = any_normalized_ || tokens_[i].normalized;
  }
}

void AddedTokens::split_pass(const Trie& trie, std::string_view text, std::size_t begin,
                             std::size_t end, std::vector<TextPiece>& out) const {
  const std::string_view range = text.substr(0, end);
  std::size_t done = begin;  // the end of the last piece put out
  for (std::size_t at = begin; at < end;) {
    if (trie.children.empty()) break;
    const auto [index, length] = trie.longest(range, at);
    if (index < 0) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[std::size_t(index)];
    std::size_t start = at, stop = at + length, bytes = 0;
    if (token.lstrip) {
      // Back to the end of the last character before it that is not white space.
      std::size_t kept = done;
      for (std::size_t p = done; p < start; p += bytes) {
        if (!white_space_at(range, p, &bytes)) kept = p + bytes;
      }
      start = kept;
    }
    if (token.rstrip) {
      while (stop < end && white_space_at(range, stop, &bytes)) stop += bytes;
    }
    if (done < start) out.push_back({done, start, -1});
    out.push_back({start, stop, token.id});
    done = at = stop;
  }
  if (done < end) out.push_back({done, end, -1});
}

std::vector<TextPiece> AddedTokens::split(std::string_view text) const {
  std::vector<TextPiece> first;
  split_pass(raw_, text, 0, text.size(), first);
  if (!any_normalized_) return first;
  std::vector<TextPiece> out;
  for (const TextPiece& p : first) {
    if (p.id >= 0) {
      out.push_back(p);
    } else {
      split_pass(normalized_, text, p.begin, p.end, out);
    }
  }
  return out;
}

}  // namespace freezeframe
