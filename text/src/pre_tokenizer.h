#pragma once
// Pre-tokenization of byte-level BPE: text between added tokens is cut into words, and BPE runs
// on each word alone. The cuts are those of GPT-2's regular expression
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// (Hugging Face's ByteLevel pre-tokenizer with use_regex), scanned by hand over UTF-8 with the
// generated class tables, optionally after cutting out every number character on its own
// (Digits with individual_digits, the SmolLM/StarCoder vocabularies; llama.cpp's "smollm").
// Private to model/.

#include <functional>
#include <string_view>

namespace freezeframe {

struct PreTokenizerConfig {
  bool individual_digits = false;  ///< each \p{N} character a piece of its own first
  bool add_prefix_space = false;   ///< a space before each piece that does not start with one
};

/// Calls `word` with each word of `text`, in order; their concatenation is `text` (with the
/// prefix spaces, when asked for). Empty text has no words.
void pre_tokenize(std::string_view text, const PreTokenizerConfig& config,
                  const std::function<void(std::string_view)>& word);

}  // namespace freezeframe
