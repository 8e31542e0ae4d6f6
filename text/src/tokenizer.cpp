#include "freezeframe/text/tokenizer.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "added_tokens.h"
#include "bpe_model.h"
#include "byte_level.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/checkpoints/gguf_file.h"
#include "freezeframe/text/chat_format.h"
#include "tokenizer_parts.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

/// The merges as ids, each refused naming its entry when a side or the merged token is not in
/// the vocabulary (as Hugging Face refuses them).
std::vector<BpeMerge> resolve_merges(const TokenizerParts& p) {
  std::vector<BpeMerge> out;
  out.reserve(p.merges.size());
  for (std::size_t i = 0; i < p.merges.size(); ++i) {
    const auto& [left, right] = p.merges[i];
    auto id = [&](const std::string& token) {
      const auto it = p.vocab.find(token);
      FF_CHECK(it != p.vocab.end(), E::kInvalidArgument, p.source, ": ", p.merges_field, "[", i,
               "] (", quote(left + " " + right), ") names ", quote(token),
               ", which is not in the vocabulary");
      return it->second;
    };
    out.push_back({id(left), id(right), id(left + right)});
  }
  return out;
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  std::vector<std::string> tokens;  // by id: spelling
  std::vector<std::string> bytes;   // by id: what it decodes to
  std::vector<std::uint8_t> special;
  std::unordered_map<std::string, TokenId> added_ids;  // added tokens by text
  std::unique_ptr<BpeModel> bpe;
  std::unique_ptr<AddedTokens> added;
  std::string pre_name;
  PreTokenizerConfig pre;
  TokenId bos = -1, eos = -1, pad = -1;
  std::vector<TokenId> prefix, suffix;
  std::string chat_template;

  void check_id(TokenId id) const {
    FF_CHECK(id >= 0 && std::size_t(id) < tokens.size(), E::kInvalidArgument, "token id ", id,
             " is outside the vocabulary of ", tokens.size(), " tokens of ", source);
  }
};

Tokenizer::Tokenizer(TokenizerParts&& p) {
  auto impl = std::make_shared<Impl>();
  const std::size_t n = p.tokens.size();
  FF_CHECK(n > 0 && n <= kMaxTokens, E::kInvalidArgument, p.source, ": a vocabulary of ", n,
           " tokens (1 to ", kMaxTokens, " are read)");
  for (const auto& [text, id] : p.vocab) {
    FF_CHECK(id >= 0 && std::size_t(id) < n, E::kInternal, p.source, ": vocabulary id ", id);
  }
  const std::vector<BpeMerge> merges = resolve_merges(p);
  for (const TokenId id : {p.bos, p.eos, p.pad}) {
    FF_CHECK(id >= -1 && id < TokenId(n), E::kInternal, p.source, ": special id ", id);
  }
  impl->special.assign(n, 0);
  std::vector<std::uint8_t> is_added(n, 0);
  for (const AddedToken& a : p.added) {
    FF_CHECK(a.id >= 0 && std::size_t(a.id) < n, E::kInternal, p.source, ": added id ", a.id);
    is_added[a.id] = 1;
    impl->special[a.id] = a.special ? 1 : 0;
    impl->added_ids[a.content] = a.id;
  }
  // What each token decodes to: an added token its text; a vocabulary token the bytes its
  // spelling stands for, or its UTF-8 as it is when spelled outside the byte alphabet (as the
  // ByteLevel decoder falls back).
  impl->bytes.resize(n);
  for (const AddedToken& a : p.added) impl->bytes[a.id] = a.content;
  for (std::size_t id = 0; id < n; ++id) {
    if (is_added[id]) continue;
    auto unspelled = byte_level::unspell(p.tokens[id]);
    impl->bytes[id] = unspelled ? std::move(*unspelled) : p.tokens[id];
  }
  impl->source = std::move(p.source);
  impl->tokens = std::move(p.tokens);
  impl->bpe = std::make_unique<BpeModel>(std::move(p.vocab), merges, p.bpe);
  impl->added = std::make_unique<AddedTokens>(p.added);
  impl->pre_name = std::move(p.pre_name);
  impl->pre = p.pre;
  impl->bos = p.bos;
  impl->eos = p.eos;
  impl->pad = p.pad;
  impl->prefix = std::move(p.prefix);
  impl->suffix = std::move(p.suffix);
  impl->chat_template = std::move(p.chat_template);
  impl_ = std::move(impl);
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  return Tokenizer(tokenizer_parts_from_gguf(file));
}

Tokenizer Tokenizer::from_json(const std::string& path) {
  return Tokenizer(tokenizer_parts_from_json(path));
}

Tokenizer Tokenizer::open(const std::string& path) {
  require_regular_file(path, "tokenizer");  // before the open: a FIFO would block it
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  FF_CHECK(in.good(), E::kNotFound, "cannot open tokenizer file ", quote(path));
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    return from_gguf(GgufFile::open(path));
  }
  return from_json(path);
}

Tokenizer Tokenizer::of_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return from_json((fs::path(path) / "tokenizer.json").string());
  const fs::path file(path);
  // A config.json (or another file of the folder that is not a GGUF) has the tokenizer.json
  // beside it.
  require_regular_file(path, "checkpoint");  // before the open: a FIFO would block it
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  FF_CHECK(in.good(), E::kNotFound, "cannot open checkpoint ", quote(path));
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    return from_gguf(GgufFile::open(path));
  }
  if (file.filename() == "tokenizer.json") return from_json(path);
  return from_json((file.parent_path() / "tokenizer.json").string());
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special) const {
  const Impl& m = *impl_;
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special) out.insert(out.end(), m.prefix.begin(), m.prefix.end());
  for (const TextPiece& piece : m.added->split(text)) {
    if (piece.id >= 0) {
      out.push_back(piece.id);
      continue;
    }
    pre_tokenize(text.substr(piece.begin, piece.end - piece.begin), m.pre,
                 [&](std::string_view word) { m.bpe->encode_word(word, out); });
  }
  if (add_special) out.insert(out.end(), m.suffix.begin(), m.suffix.end());
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  for (const TokenId id : ids) {
    impl_->check_id(id);
    out += impl_->bytes[std::size_t(id)];
  }
  return out;
}

std::int32_t Tokenizer::vocab_size() const { return std::int32_t(impl_->tokens.size()); }

const std::string& Tokenizer::token_text(TokenId id) const {
  impl_->check_id(id);
  return impl_->tokens[std::size_t(id)];
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
  impl_->check_id(id);
  return impl_->bytes[std::size_t(id)];
}

std::optional<TokenId> Tokenizer::find(std::string_view text) const {
  const std::string key(text);
  if (const auto it = impl_->added_ids.find(key); it != impl_->added_ids.end()) return it->second;
  const auto& vocab = impl_->bpe->vocab();
  if (const auto it = vocab.find(key); it != vocab.end()) return it->second;
  return std::nullopt;
}

bool Tokenizer::is_special(TokenId id) const {
  impl_->check_id(id);
  return impl_->special[std::size_t(id)] != 0;
}

TokenId Tokenizer::bos_id() const { return impl_->bos; }
TokenId Tokenizer::eos_id() const { return impl_->eos; }
TokenId Tokenizer::pad_id() const { return impl_->pad; }
const std::string& Tokenizer::source() const { return impl_->source; }
const std::string& Tokenizer::pre_tokenizer() const { return impl_->pre_name; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

ChatFormat Tokenizer::chat_format() const {
  FF_CHECK(!impl_->chat_template.empty(), E::kNotFound, impl_->source,
           ": no chat template (tokenizer.chat_template)");
  return ChatFormat::recognise(impl_->chat_template, impl_->source + ": tokenizer.chat_template");
}

}  // namespace freezeframe
