// The tokenizer of a Hugging Face tokenizer.json: model BPE (vocab, merges as "a b" or
// ["a", "b"]), no normalizer, the ByteLevel pre-tokenizer (alone, after Digits with
// individual_digits, or after a Split by GPT-2's expression) and decoder, added_tokens, and the
// post-processor's tokens around a text. The tokenizer_config.json beside it, when there is
// one, gives the chat template and the BOS, EOS and padding tokens.

#include <filesystem>
#include <sstream>
#include <string>

#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/json_value.h"
#include "freezeframe/base/printable.h"
#include "tokenizer_parts.h"

namespace freezeframe {
namespace {

using E = ErrorCode;
using Kind = JsonValue::Kind;

/// The largest tokenizer.json read (the largest real ones are a few tens of MiB).
constexpr std::int64_t kMaxTokenizerJsonBytes = std::int64_t(64) << 20;
constexpr std::int64_t kMaxTokenizerConfigBytes = std::int64_t(4) << 20;

constexpr std::string_view kGpt2Split =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// Reads fields of one JSON document, naming file, line, column and field in every refusal.
class Fields {
 public:
  Fields(std::string source, std::string text)
      : source_(std::move(source)), text_(std::move(text)), root_(parse_json(text_, source_)) {
    FF_CHECK(root_.kind == Kind::kObject, E::kInvalidArgument, source_,
             ": not a JSON object at the top");
  }

  [[nodiscard]] const JsonValue& root() const { return root_; }
  [[nodiscard]] const std::string& source() const { return source_; }

  /// "FILE:LINE:COLUMN: field"
  [[nodiscard]] std::string at(const JsonValue& v, std::string_view field) const {
    return source_ + ":" + json_position(text_, v.offset) + ": " + std::string(field);
  }

  [[noreturn]] void refuse(ErrorCode code, const JsonValue& v, std::string_view field,
                           std::string_view what) const {
    FF_THROW(code, at(v, field), " ", what);
  }

  const JsonValue& need(const JsonValue& v, Kind kind, std::string_view field) const {
    if (v.kind != kind) {
      refuse(E::kInvalidArgument, v, field,
             "is " + std::string(json_kind_name(v.kind)) + ", not " +
                 std::string(json_kind_name(kind)));
    }
    return v;
  }

  /// The member `key` of `parent` (called `field` in messages); refused when absent.
  const JsonValue& member(const JsonValue& parent, std::string_view key,
                          std::string_view field) const {
    const JsonValue* v = parent.find(key);
    if (v == nullptr) refuse(E::kInvalidArgument, parent, field, "is absent");
    return *v;
  }

  const std::string& string(const JsonValue& v, std::string_view field) const {
    return need(v, Kind::kString, field).string;
  }

  /// An optional boolean member; `fallback` when absent or null.
  bool flag(const JsonValue& parent, std::string_view key, std::string_view field,
            bool fallback) const {
    const JsonValue* v = parent.find(key);
    if (v == nullptr || v->is_null()) return fallback;
    return need(*v, Kind::kBool, field).boolean;
  }

  TokenId id(const JsonValue& v, std::string_view field) const {
    need(v, Kind::kNumber, field);
    if (!(v.number >= 0 && v.number < double(kMaxTokens) &&
          v.number == double(TokenId(v.number)))) {
      std::ostringstream shown;
      shown << v.number;
      refuse(E::kInvalidArgument, v, field,
             "is " + shown.str() + ", not a token id (a whole number from 0 below " +
                 std::to_string(kMaxTokens) + ")");
    }
    return TokenId(v.number);
  }

  /// The "type" of an object called `field`.
  const std::string& type(const JsonValue& v, std::string_view field) const {
    need(v, Kind::kObject, field);
    return string(member(v, "type", std::string(field) + ".type"), std::string(field) + ".type");
  }

 private:
  std::string source_;
  std::string text_;
  JsonValue root_;
};

void read_model(const Fields& f, TokenizerParts& p) {
  const JsonValue& model = f.member(f.root(), "model", "model");
  const std::string& type = f.type(model, "model");
  if (type != "BPE") {
    f.refuse(E::kUnsupported, *model.find("type"), "model.type",
             "is " + quote(type) + "; only byte-level BPE (\"BPE\") is read");
  }
  const JsonValue* dropout = model.find("dropout");
  if (dropout != nullptr && !dropout->is_null() &&
      !(dropout->kind == Kind::kNumber && dropout->number == 0)) {
    f.refuse(E::kUnsupported, *dropout, "model.dropout", "is set; BPE dropout is not implemented");
  }
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const JsonValue* v = model.find(affix);
    if (v != nullptr && !v->is_null() && !(v->kind == Kind::kString && v->string.empty())) {
      f.refuse(E::kUnsupported, *v, std::string("model.") + affix,
               "is set; byte-level BPE has no subword affixes");
    }
  }
  if (f.flag(model, "byte_fallback", "model.byte_fallback", false)) {
    f.refuse(E::kUnsupported, *model.find("byte_fallback"), "model.byte_fallback",
             "is true; byte fallback (<0xNN> tokens) is not byte-level BPE");
  }
  p.bpe.fuse_unk = f.flag(model, "fuse_unk", "model.fuse_unk", false);
  p.bpe.ignore_merges = f.flag(model, "ignore_merges", "model.ignore_merges", false);

  const JsonValue& vocab =
      f.need(f.member(model, "vocab", "model.vocab"), Kind::kObject, "model.vocab");
  p.vocab.reserve(vocab.members.size());
  for (const auto& [token, value] : vocab.members) {
    p.vocab.emplace(token, f.id(value, "model.vocab[" + quote(token) + "]"));
  }

  const JsonValue& merges =
      f.need(f.member(model, "merges", "model.merges"), Kind::kArray, "model.merges");
  p.merges_field = "model.merges";
  p.merges.reserve(merges.items.size());
  for (std::size_t i = 0; i < merges.items.size(); ++i) {
    const JsonValue& m = merges.items[i];
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    if (m.kind == Kind::kArray && m.items.size() == 2) {
      p.merges.emplace_back(f.string(m.items[0], field + "[0]"),
                            f.string(m.items[1], field + "[1]"));
      continue;
    }
    const std::string& s = m.kind == Kind::kString ? m.string : std::string();
    const std::size_t space = s.find(' ');
    if (m.kind != Kind::kString || space == std::string::npos || space == 0 ||
        space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos) {
      f.refuse(E::kInvalidArgument, m, field, "is not a merge (\"a b\", or [\"a\", \"b\"])");
    }
    p.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
  }

  const JsonValue* unk = model.find("unk_token");
  if (unk != nullptr && !unk->is_null()) {
    const std::string& text = f.string(*unk, "model.unk_token");
    const auto it = p.vocab.find(text);
    if (it == p.vocab.end()) {
      f.refuse(E::kInvalidArgument, *unk, "model.unk_token",
               quote(text) + " is not in the vocabulary");
    }
    p.bpe.unk = it->second;
  }
}

/// ByteLevel as a pre-tokenizer: `split` says whether it must split by GPT-2's expression
/// itself (use_regex) or must not (a Split before it did).
void byte_level_pre(const Fields& f, const JsonValue& v, std::string_view field, bool split,
                    TokenizerParts& p) {
  if (f.type(v, field) != "ByteLevel" ||
      f.flag(v, "use_regex", std::string(field) + ".use_regex", true) != split) {
    f.refuse(E::kUnsupported, v, field,
             split ? "is not ByteLevel with use_regex" : "is not ByteLevel without use_regex");
  }
  p.pre.add_prefix_space =
      f.flag(v, "add_prefix_space", std::string(field) + ".add_prefix_space", true);
}

void read_pre_tokenizer(const Fields& f, TokenizerParts& p) {
  const JsonValue& pre = f.member(f.root(), "pre_tokenizer", "pre_tokenizer");
  const std::string known =
      "; the pre-tokenizers implemented are ByteLevel with GPT-2's split, alone or after "
      "Digits(individual_digits)";
  if (pre.is_null()) f.refuse(E::kUnsupported, pre, "pre_tokenizer", "is null" + known);
  const std::string& type = f.type(pre, "pre_tokenizer");
  p.pre_name = "gpt2";
  if (type == "ByteLevel") {
    byte_level_pre(f, pre, "pre_tokenizer", true, p);
    return;
  }
  if (type != "Sequence") {
    f.refuse(E::kUnsupported, *pre.find("type"), "pre_tokenizer.type", "is " + quote(type) + known);
  }
  const JsonValue& steps = f.need(f.member(pre, "pretokenizers", "pre_tokenizer.pretokenizers"),
                                  Kind::kArray, "pre_tokenizer.pretokenizers");
  const std::string field = "pre_tokenizer.pretokenizers";
  if (steps.items.size() == 1) {
    byte_level_pre(f, steps.items[0], field + "[0]", true, p);
    return;
  }
  if (steps.items.size() != 2) {
    f.refuse(E::kUnsupported, steps, field,
             "has " + std::to_string(steps.items.size()) + " steps" + known);
  }
  const JsonValue& first = steps.items[0];
  const std::string& first_type = f.type(first, field + "[0]");
  if (first_type == "Digits") {
    if (!f.flag(first, "individual_digits", field + "[0].individual_digits", false)) {
      f.refuse(E::kUnsupported, first, field + "[0]",
               "is Digits without individual_digits, which is not implemented");
    }
    p.pre_name = "smollm";
    p.pre.individual_digits = true;
    byte_level_pre(f, steps.items[1], field + "[1]", true, p);
    return;
  }
  if (first_type == "Split") {
    const JsonValue& pattern = f.member(first, "pattern", field + "[0].pattern");
    const JsonValue* regex = pattern.find("Regex");
    const JsonValue* behavior = first.find("behavior");
    const bool isolated =
        behavior != nullptr && behavior->kind == Kind::kString && behavior->string == "Isolated";
    if (regex == nullptr || regex->kind != Kind::kString || regex->string != kGpt2Split ||
        !isolated || f.flag(first, "invert", field + "[0].invert", false)) {
      f.refuse(E::kUnsupported, first, field + "[0]",
               "is a Split other than GPT-2's expression, isolated" + known);
    }
    byte_level_pre(f, steps.items[1], field + "[1]", false, p);
    // ByteLevel would put its prefix space before each word the Split made.
    if (p.pre.add_prefix_space) {
      f.refuse(E::kUnsupported, steps.items[1], field + "[1].add_prefix_space",
               "is true after a Split, which is not implemented");
    }
    return;
  }
  f.refuse(E::kUnsupported, *first.find("type"), field + "[0].type",
           "is " + quote(first_type) + known);
}

void read_decoder(const Fields& f) {
  const JsonValue& d = f.member(f.root(), "decoder", "decoder");
  if (d.is_null() || f.type(d, "decoder") != "ByteLevel") {
    f.refuse(E::kUnsupported, d, "decoder", "is not ByteLevel (byte-level BPE decodes bytes)");
  }
}

void read_added_tokens(const Fields& f, TokenizerParts& p) {
  const JsonValue* list = f.root().find("added_tokens");
  if (list == nullptr || list->is_null()) return;
  f.need(*list, Kind::kArray, "added_tokens");
  for (std::size_t i = 0; i < list->items.size(); ++i) {
    const JsonValue& t = list->items[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    f.need(t, Kind::kObject, field);
    AddedToken a;
    a.id = f.id(f.member(t, "id", field + ".id"), field + ".id");
    a.content = f.string(f.member(t, "content", field + ".content"), field + ".content");
    if (a.content.empty()) f.refuse(E::kInvalidArgument, t, field + ".content", "is empty");
    a.special = f.flag(t, "special", field + ".special", false);
    a.lstrip = f.flag(t, "lstrip", field + ".lstrip", false);
    a.rstrip = f.flag(t, "rstrip", field + ".rstrip", false);
    a.normalized = f.flag(t, "normalized", field + ".normalized", !a.special);
    if (f.flag(t, "single_word", field + ".single_word", false)) {
      f.refuse(E::kUnsupported, t, field + ".single_word", "is true, which is not implemented");
    }
    p.added.push_back(std::move(a));
  }
}

/// The token ids of a post-processor's special token named `name`.
std::vector<TokenId> special_ids(const Fields& f, const JsonValue& specials, const JsonValue& at,
                                 const std::string& name, std::string_view field) {
  const JsonValue* s = specials.find(name);
  if (s == nullptr) {
    f.refuse(E::kInvalidArgument, at, field, "names " + quote(name) + ", not in special_tokens");
  }
  const JsonValue& ids = f.need(f.member(*s, "ids", std::string(field) + ".ids"), Kind::kArray,
                                std::string(field) + ".ids");
  std::vector<TokenId> out;
  for (const JsonValue& v : ids.items) out.push_back(f.id(v, std::string(field) + ".ids"));
  return out;
}

void read_post_processor(const Fields& f, const JsonValue& pp, const std::string& field,
                         TokenizerParts& p) {
  if (pp.is_null()) return;
  const std::string& type = f.type(pp, field);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const JsonValue& list = f.need(f.member(pp, "processors", field + ".processors"), Kind::kArray,
                                   field + ".processors");
    for (std::size_t i = 0; i < list.items.size(); ++i) {
      read_post_processor(f, list.items[i], field + ".processors[" + std::to_string(i) + "]", p);
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const JsonValue& v = f.member(pp, key, field + "." + key);
      if (v.kind != Kind::kArray || v.items.size() != 2) {
        f.refuse(E::kInvalidArgument, v, field + "." + key, "is not [token, id]");
      }
      (std::string_view(key) == "cls" ? p.prefix : p.suffix)
          .push_back(f.id(v.items[1], field + "." + key + "[1]"));
    }
    return;
  }
  if (type != "TemplateProcessing") {
    f.refuse(E::kUnsupported, *pp.find("type"), field + ".type",
             "is " + quote(type) +
                 "; the post-processors read are TemplateProcessing, RobertaProcessing, "
                 "BertProcessing, ByteLevel and Sequence");
  }
  const JsonValue& single =
      f.need(f.member(pp, "single", field + ".single"), Kind::kArray, field + ".single");
  const JsonValue& specials = f.need(f.member(pp, "special_tokens", field + ".special_tokens"),
                                     Kind::kObject, field + ".special_tokens");
  bool after_text = false;
  for (std::size_t i = 0; i < single.items.size(); ++i) {
    const JsonValue& item = single.items[i];
    const std::string item_field = field + ".single[" + std::to_string(i) + "]";
    if (item.find("Sequence") != nullptr) {
      after_text = true;
      continue;
    }
    const JsonValue* special = item.find("SpecialToken");
    if (special == nullptr) {
      f.refuse(E::kInvalidArgument, item, item_field, "is neither a Sequence nor a SpecialToken");
    }
    const std::string& name =
        f.string(f.member(*special, "id", item_field + ".SpecialToken.id"), item_field);
    const std::vector<TokenId> ids = special_ids(f, specials, item, name, item_field);
    auto& side = after_text ? p.suffix : p.prefix;
    side.insert(side.end(), ids.begin(), ids.end());
  }
}

/// Every id from 0 to the largest has a token: the vocabulary's spelling, or an added
/// token's text.
void lay_out_tokens(const Fields& f, TokenizerParts& p) {
  std::size_t n = 0;
  for (const auto& [token, id] : p.vocab) n = std::max(n, std::size_t(id) + 1);
  for (const AddedToken& a : p.added) n = std::max(n, std::size_t(a.id) + 1);
  // Checked before the table is made, so that one large id cannot make a large table.
  if (n > p.vocab.size() + p.added.size()) {
    f.refuse(E::kInvalidArgument, f.root(), "model.vocab",
             "and added_tokens give ids up to " + std::to_string(n - 1) + " to " +
                 std::to_string(p.vocab.size() + p.added.size()) +
                 " tokens, so some ids have no token");
  }
  std::vector<std::uint8_t> seen(n, 0);
  p.tokens.assign(n, std::string());
  for (const auto& [token, id] : p.vocab) {
    if (seen[id]) {
      f.refuse(E::kInvalidArgument, f.root(), "model.vocab",
               "gives id " + std::to_string(id) + " to both " + quote(p.tokens[id]) + " and " +
                   quote(token));
    }
    seen[id] = 1;
    p.tokens[id] = token;
  }
  for (const AddedToken& a : p.added) {
    if (!seen[a.id]) p.tokens[a.id] = a.content;
    seen[a.id] = 1;
  }
  for (std::size_t id = 0; id < n; ++id) {
    if (!seen[id]) {
      f.refuse(E::kInvalidArgument, f.root(), "model.vocab",
               "has no token of id " + std::to_string(id) + ", and added_tokens neither");
    }
  }
}

/// The id of a token named in tokenizer_config.json: a string or {"content": ...}.
TokenId config_token(const Fields& c, const JsonValue& config, std::string_view key,
                     const TokenizerParts& p) {
  const JsonValue* v = config.find(key);
  if (v == nullptr || v->is_null()) return -1;
  const JsonValue* content = v->kind == Kind::kObject ? v->find("content") : v;
  const std::string& text = c.string(content ? *content : *v, key);
  for (const AddedToken& a : p.added) {
    if (a.content == text) return a.id;
  }
  const auto it = p.vocab.find(text);
  if (it == p.vocab.end()) c.refuse(E::kInvalidArgument, *v, key, quote(text) + " is no token");
  return it->second;
}

/// tokenizer_config.json beside the tokenizer.json: the chat template and the special tokens.
void read_config(const std::string& path, TokenizerParts& p) {
  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config_path, ec)) return;
  const Fields c(config_path.string(), read_input_file(config_path.string(), "tokenizer config",
                                                       kMaxTokenizerConfigBytes));
  const JsonValue& config = c.root();
  p.bos = config_token(c, config, "bos_token", p);
  p.eos = config_token(c, config, "eos_token", p);
  p.pad = config_token(c, config, "pad_token", p);
  const JsonValue* t = config.find("chat_template");
  if (t == nullptr || t->is_null()) return;
  if (t->kind == Kind::kString) {
    p.chat_template = t->string;
    return;
  }
  // A list of named templates: the one called "default".
  c.need(*t, Kind::kArray, "chat_template");
  for (const JsonValue& named : t->items) {
    const JsonValue* name = named.find("name");
    if (name != nullptr && name->kind == Kind::kString && name->string == "default") {
      p.chat_template = c.string(c.member(named, "template", "chat_template[].template"),
                                 "chat_template[].template");
    }
  }
}

}  // namespace

TokenizerParts tokenizer_parts_from_json(const std::string& path) {
  const Fields f(path, read_input_file(path, "tokenizer", kMaxTokenizerJsonBytes));
  TokenizerParts p;
  p.source = path;
  const JsonValue* normalizer = f.root().find("normalizer");
  if (normalizer != nullptr && !normalizer->is_null()) {
    f.refuse(E::kUnsupported, *normalizer, "normalizer",
             "is set; byte-level BPE without a normalizer is read");
  }
  read_model(f, p);
  read_pre_tokenizer(f, p);
  read_decoder(f);
  read_added_tokens(f, p);
  lay_out_tokens(f, p);
  const JsonValue* pp = f.root().find("post_processor");
  if (pp != nullptr) read_post_processor(f, *pp, "post_processor", p);
  for (const auto* side : {&p.prefix, &p.suffix}) {
    for (const TokenId id : *side) {
      if (std::size_t(id) >= p.tokens.size()) {
        f.refuse(E::kInvalidArgument, *pp, "post_processor",
                 "names id " + std::to_string(id) + ", outside the vocabulary");
      }
    }
  }
  read_config(path, p);
  return p;
}

}  // namespace freezeframe
