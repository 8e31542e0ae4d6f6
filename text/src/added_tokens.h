#pragma once
// AddedTokens: finding added tokens in text, as Hugging Face's AddedVocabulary does: the
// tokens not normalized first, over the whole text, then the normalized ones in the text left
// between; each pass takes the leftmost match, the longest there, and goes on after it (a
// byte trie). lstrip/rstrip tokens take the white space next to them. Private to model/.

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer_parts.h"

namespace freezeframe {

/// A stretch of the text: an added token (id >= 0) or plain text for the pre-tokenizer.
struct TextPiece {
  std::size_t begin = 0, end = 0;
  TokenId id = -1;
};

class AddedTokens {
 public:
  explicit AddedTokens(const std::vector<AddedToken>& tokens);

  /// `text` as pieces, in order, covering it (less the white space lstrip/rstrip took).
  [[nodiscard]] std::vector<TextPiece> split(std::string_view text) const;

 private:
  struct Trie {
    std::unordered_map<std::uint64_t, std::int32_t> children;  // (node << 8 | byte) → node
    std::vector<std::int32_t> token;  // by node: the index in tokens_ ending there, or -1
    Trie() : token(1, -1) {}
    void add(std::string_view s, std::int32_t index);
    /// The longest token at text[at], as (index, length), or index -1.
    [[nodiscard]] std::pair<std::int32_t, std::size_t> longest(std::string_view text,
                                                               std::size_t at) const;
  };
  void split_pass(const Trie& trie, std::string_view text, std::size_t begin, std::size_t end,
                  std::vector<TextPiece>& out) const;

  std::vector<AddedToken> tokens_;
  Trie raw_, normalized_;
  bool any_normalized_ = false;
};

}  // namespace freezeframe
