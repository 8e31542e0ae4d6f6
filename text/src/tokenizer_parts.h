#pragma once
// TokenizerParts: what a tokenizer file says, as the GGUF and tokenizer.json readers hand it to
// the Tokenizer, which checks the parts against each other (merges against the vocabulary, ids
// against its size). Private to model/.

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bpe_model.h"
#include "freezeframe/text/tokenizer.h"
#include "pre_tokenizer.h"

namespace freezeframe {

/// The largest vocabulary read (the largest real ones hold a few hundred thousand tokens).
inline constexpr std::size_t kMaxTokens = std::size_t(1) << 24;

/// A token matched verbatim in the text before pre-tokenization.
struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;      ///< takes the white space before it
  bool rstrip = false;      ///< takes the white space after it
  bool normalized = false;  ///< matched after the non-normalized ones, in the text left
};

struct TokenizerParts {
  std::string source;        ///< the file, for messages
  std::string merges_field;  ///< where the merges are ("tokenizer.ggml.merges"), for messages

  std::vector<std::string> tokens;                 ///< by id: spelling, or an added token's text
  std::unordered_map<std::string, TokenId> vocab;  ///< BPE's: byte-level spelling to id
  std::vector<std::pair<std::string, std::string>> merges;  ///< by rank
  std::vector<AddedToken> added;
  BpeOptions bpe;

  std::string pre_name;  ///< "gpt2" or "smollm"
  PreTokenizerConfig pre;

  TokenId bos = -1, eos = -1, pad = -1;
  std::vector<TokenId> prefix, suffix;  ///< what encode(text, add_special) puts around
  std::string chat_template;
};

/// The parts of a tokenizer.json (tokenizer_json.cpp) and of a GGUF file's metadata
/// (tokenizer_gguf.cpp).
[[nodiscard]] TokenizerParts tokenizer_parts_from_json(const std::string& path);
[[nodiscard]] TokenizerParts tokenizer_parts_from_gguf(const GgufFile& file);

}  // namespace freezeframe
