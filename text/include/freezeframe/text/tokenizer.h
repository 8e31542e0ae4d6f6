#pragma once
// Tokenizer: byte-level BPE (GPT-2's scheme; SmolLM2's), read from a GGUF checkpoint's
// tokenizer.ggml.* metadata or from a Hugging Face tokenizer.json, both giving the same object.
//
// encode: added tokens (special ones like <|im_start|>, and user-defined ones) are found in the
// text first, verbatim, the longest at the leftmost place; the text between them is cut into
// words by the pre-tokenizer (GPT-2's split, optionally after each digit alone), and each word,
// as bytes in GPT-2's byte alphabet, is merged by BPE rank. decode maps every token back to the
// bytes it stands for. The ids are those of Hugging Face's tokenizers on the same vocabulary.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace freezeframe {

using TokenId = std::int32_t;

class ChatFormat;
class GgufFile;
struct TokenizerParts;

class Tokenizer {
 public:
  /// From the tokenizer.ggml.* metadata of `file` (tokenizer.ggml.model "gpt2"). Throws
  /// kInvalidArgument naming the file and the field for absent, malformed or inconsistent
  /// metadata (a merge of unknown tokens, an id past the vocabulary), kUnsupported for another
  /// tokenizer model or a pre-tokenizer (tokenizer.ggml.pre) this does not implement.
  [[nodiscard]] static Tokenizer from_gguf(const GgufFile& file);
  /// From a tokenizer.json (model type BPE with the byte-level pre-tokenizer and decoder); the
  /// same refusals, naming the file, line, column and field.
  [[nodiscard]] static Tokenizer from_json(const std::string& path);
  /// A GGUF checkpoint (told by its magic) or a tokenizer.json.
  [[nodiscard]] static Tokenizer open(const std::string& path);
  /// The tokenizer of a checkpoint as model.checkpoint names one: a GGUF file's own, or the
  /// tokenizer.json beside a Hugging Face config.json (`path` the folder or a file in it).
  [[nodiscard]] static Tokenizer of_checkpoint(const std::string& path);

  /// The ids of `text`; with `add_special`, also the tokens the tokenizer puts around a text
  /// (a BOS when tokenizer.ggml.add_bos_token says so, or the tokenizer.json post-processor's).
  [[nodiscard]] std::vector<TokenId> encode(std::string_view text, bool add_special = false) const;
  /// The bytes the ids stand for, concatenated (an added token gives its text). A sequence cut
  /// inside a multi-byte character gives that character's partial bytes, so pieces decoded one
  /// by one concatenate to the whole. Throws kInvalidArgument for an id outside the vocabulary.
  [[nodiscard]] std::string decode(std::span<const TokenId> ids) const;

  [[nodiscard]] std::int32_t vocab_size() const;
  /// The token as the vocabulary spells it ("Ġworld"), or an added token's text.
  [[nodiscard]] const std::string& token_text(TokenId id) const;
  /// The bytes the token stands for (" world").
  [[nodiscard]] const std::string& token_bytes(TokenId id) const;
  /// The id of an added token's text or of a vocabulary spelling, if there is one.
  [[nodiscard]] std::optional<TokenId> find(std::string_view text) const;
  /// Added tokens marked special (control tokens in GGUF terms).
  [[nodiscard]] bool is_special(TokenId id) const;

  /// -1 where the tokenizer names none.
  [[nodiscard]] TokenId bos_id() const;
  [[nodiscard]] TokenId eos_id() const;
  [[nodiscard]] TokenId pad_id() const;

  /// The file it was read from.
  [[nodiscard]] const std::string& source() const;
  /// "gpt2" (GPT-2's split) or "smollm" (each digit alone first).
  [[nodiscard]] const std::string& pre_tokenizer() const;
  /// The checkpoint's chat template (tokenizer.chat_template), empty when it has none.
  [[nodiscard]] const std::string& chat_template() const;
  /// The chat format of the template; throws kNotFound when there is no template and
  /// kUnsupported for a template it does not recognise (see chat_format.h).
  [[nodiscard]] ChatFormat chat_format() const;

 private:
  struct Impl;
  explicit Tokenizer(TokenizerParts&& parts);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace freezeframe
