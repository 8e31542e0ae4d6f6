// The tokenizer of a GGUF checkpoint: llama.cpp's tokenizer.ggml.* metadata read as Hugging
// Face's conversion reads it (transformers' GGUF tokenizer builder): tokens spelled outside the
// byte alphabet are respelled from their UTF-8, control (3) and user-defined (4) tokens spelled
// in it are added tokens (special and not), the rest is the BPE vocabulary.

#include <string>

#include "byte_level.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/checkpoints/gguf_file.h"
#include "tokenizer_parts.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

constexpr std::int64_t kControl = 3, kUserDefined = 4;
constexpr std::uint32_t kGgufString = 8;

const GgufValue& array_of_strings(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  FF_CHECK(v != nullptr, E::kInvalidArgument, f.path(), ": ", key,
           " is absent (a byte-level BPE tokenizer needs it)");
  FF_CHECK(v->kind == GgufValue::Kind::kArray && v->gguf_type == kGgufString, E::kInvalidArgument,
           f.path(), ": ", key, " is not an array of strings");
  return *v;
}

/// An optional token id: -1 when absent, refused when outside the vocabulary.
TokenId token_id(const GgufFile& f, std::string_view key, std::size_t vocab) {
  const auto v = f.get_int(key);
  if (!v) return -1;
  FF_CHECK(*v >= 0 && std::uint64_t(*v) < vocab, E::kInvalidArgument, f.path(), ": ", key, " is ",
           *v, ", outside the vocabulary of ", vocab, " tokens");
  return TokenId(*v);
}

bool flag(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return false;
  FF_CHECK(v->kind == GgufValue::Kind::kBool, E::kInvalidArgument, f.path(), ": ", key,
           " is not a bool");
  return v->int_value != 0;
}

}  // namespace

TokenizerParts tokenizer_parts_from_gguf(const GgufFile& f) {
  TokenizerParts p;
  p.source = f.path();
  p.merges_field = "tokenizer.ggml.merges";
  const auto model = f.get_string("tokenizer.ggml.model");
  FF_CHECK(model.has_value(), E::kInvalidArgument, f.path(),
           ": no tokenizer in the metadata (tokenizer.ggml.model is absent)");
  FF_CHECK(*model == "gpt2", E::kUnsupported, f.path(), ": tokenizer.ggml.model is ", quote(*model),
           "; only byte-level BPE (\"gpt2\") is read");

  // The pre-tokenizer: GPT-2's split, or each digit alone first (llama.cpp's names; without
  // the key, GPT-2's, as Hugging Face's conversion takes it).
  const std::string pre = f.get_string("tokenizer.ggml.pre").value_or("gpt2");
  if (pre == "gpt2") {
    p.pre_name = "gpt2";
  } else if (pre == "smollm" || pre == "starcoder") {
    p.pre_name = "smollm";
    p.pre.individual_digits = true;
  } else {
    FF_THROW(E::kUnsupported, f.path(), ": tokenizer.ggml.pre is ", quote(pre),
             "; the pre-tokenizers implemented are \"gpt2\" (GPT-2's split) and \"smollm\" "
             "(\"starcoder\": each digit alone, then GPT-2's split)");
  }
  p.pre.add_prefix_space = flag(f, "tokenizer.ggml.add_space_prefix");

  const std::vector<std::string>& tokens = array_of_strings(f, "tokenizer.ggml.tokens").strings;
  const std::size_t n = tokens.size();
  FF_CHECK(n > 0 && n <= kMaxTokens, E::kInvalidArgument, f.path(),
           ": tokenizer.ggml.tokens holds ", n, " tokens (1 to ", kMaxTokens, " are read)");
  std::vector<std::int64_t> types;
  if (const GgufValue* t = f.find("tokenizer.ggml.token_type")) {
    FF_CHECK(t->kind == GgufValue::Kind::kArray && t->strings.empty() && t->floats.empty(),
             E::kInvalidArgument, f.path(),
             ": tokenizer.ggml.token_type is not an array of integers");
    FF_CHECK(t->ints.size() == n, E::kInvalidArgument, f.path(), ": tokenizer.ggml.token_type has ",
             t->ints.size(), " entries for ", n, " tokens");
    types = t->ints;
  }

  p.tokens = tokens;
  p.vocab.reserve(n);
  for (std::size_t id = 0; id < n; ++id) {
    const std::string& token = tokens[id];
    const bool in_alphabet = byte_level::unspell(token).has_value();
    p.vocab[in_alphabet ? token : byte_level::spell(token)] = TokenId(id);  // later ids win
    const std::int64_t type = types.empty() ? 1 : types[id];
    if ((type == kControl || type == kUserDefined) && in_alphabet) {
      p.added.push_back({TokenId(id), token, type == kControl, false, false, false});
    }
  }

  const std::vector<std::string>& merges = array_of_strings(f, "tokenizer.ggml.merges").strings;
  p.merges.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const std::size_t space = m.find(' ');
    FF_CHECK(space != std::string::npos && space > 0 && space + 1 < m.size() &&
                 m.find(' ', space + 1) == std::string::npos,
             E::kInvalidArgument, f.path(), ": tokenizer.ggml.merges[", i, "] is ", quote(m),
             ", not two tokens separated by one space");
    p.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }

  p.bos = token_id(f, "tokenizer.ggml.bos_token_id", n);
  p.eos = token_id(f, "tokenizer.ggml.eos_token_id", n);
  p.pad = token_id(f, "tokenizer.ggml.padding_token_id", n);
  (void)token_id(f, "tokenizer.ggml.unknown_token_id", n);  // checked; byte-level BPE drops
                                                            // bytes it has no token for
  if (flag(f, "tokenizer.ggml.add_bos_token")) {
    FF_CHECK(p.bos >= 0, E::kInvalidArgument, f.path(),
             ": tokenizer.ggml.add_bos_token is set but tokenizer.ggml.bos_token_id is absent");
    p.prefix.push_back(p.bos);
  }
  if (flag(f, "tokenizer.ggml.add_eos_token")) {
    FF_CHECK(p.eos >= 0, E::kInvalidArgument, f.path(),
             ": tokenizer.ggml.add_eos_token is set but tokenizer.ggml.eos_token_id is absent");
    p.suffix.push_back(p.eos);
  }
  p.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  return p;
}

}  // namespace freezeframe
