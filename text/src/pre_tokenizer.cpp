#include "pre_tokenizer.h"

#include <string>

#include "freezeframe/base/utf8.h"
#include "unicode_tables.h"

namespace freezeframe {
namespace {

struct Scanned {
  CharClass cls;
  std::size_t bytes;
};

Scanned scan(std::string_view s, std::size_t at) {
  const utf8::Char c = utf8::next(s, at);
  // A byte outside well-formed UTF-8 is neither letter, number nor space.
  return {c.cp == utf8::kInvalid ? CharClass::kOther : char_class(c.cp), c.bytes};
}

/// The end of the run of characters of class `cls` from `at`.
std::size_t run_end(std::string_view s, std::size_t at, CharClass cls) {
  while (at < s.size()) {
    const Scanned c = scan(s, at);
    if (c.cls != cls) break;
    at += c.bytes;
  }
  return at;
}

/// The length of a contraction ('s 't 're 've 'm 'll 'd, case as written) at s[at], or 0.
std::size_t contraction(std::string_view s, std::size_t at) {
  if (s[at] != '\'' || at + 1 >= s.size()) return 0;
  const char a = s[at + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (at + 2 >= s.size()) return 0;
  const char b = s[at + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

/// GPT-2's expression over `s`, alternative by alternative in the order the expression tries
/// them; each branch says which one matches.
void split_gpt2(std::string_view s, const std::function<void(std::string_view)>& word) {
  std::size_t at = 0;
  while (at < s.size()) {
    if (const std::size_t n = contraction(s, at)) {  // 's|'t|'re|'ve|'m|'ll|'d
      word(s.substr(at, n));
      at += n;
      continue;
    }
    const Scanned first = scan(s, at);
    std::size_t end = 0;
    if (first.cls != CharClass::kSpace) {
      // \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+ without the optional space.
      end = run_end(s, at, first.cls);
    } else if (s[at] == ' ' && at + 1 < s.size() && scan(s, at + 1).cls != CharClass::kSpace) {
      // " ?" then a run of the class of the character after the space.
      end = run_end(s, at + 1, scan(s, at + 1).cls);
    } else {
      // \s+(?!\S): the white space run, less its last character when something follows it;
      // \s+ when that leaves nothing (a single white space character before a non-space).
      std::size_t last = at;
      end = at;
      while (end < s.size()) {
        const Scanned c = scan(s, end);
        if (c.cls != CharClass::kSpace) break;
        last = end;
        end += c.bytes;
      }
      if (end < s.size() && last > at) end = last;
    }
    word(s.substr(at, end - at));
    at = end;
  }
}

/// One piece through the ByteLevel stage: the prefix space, then GPT-2's split.
void byte_level_stage(std::string_view piece, const PreTokenizerConfig& config,
                      const std::function<void(std::string_view)>& word) {
  if (piece.empty()) return;
  if (config.add_prefix_space && piece.front() != ' ') {
    std::string spaced;
    spaced.reserve(piece.size() + 1);
    spaced += ' ';
    spaced += piece;
    split_gpt2(spaced, word);
  } else {
    split_gpt2(piece, word);
  }
}

}  // namespace

void pre_tokenize(std::string_view text, const PreTokenizerConfig& config,
                  const std::function<void(std::string_view)>& word) {
  if (!config.individual_digits) {
    byte_level_stage(text, config, word);
    return;
  }
  // Digits first: each number character a piece, the stretches between them pieces too; the
  // ByteLevel stage then sees each piece as a whole text (its own end, its own prefix space).
  std::size_t start = 0;
  for (std::size_t at = 0; at < text.size();) {
    const Scanned c = scan(text, at);
    if (c.cls == CharClass::kNumber) {
      byte_level_stage(text.substr(start, at - start), config, word);
      byte_level_stage(text.substr(at, c.bytes), config, word);
      start = at + c.bytes;
    }
    at += c.bytes;
  }
  byte_level_stage(text.substr(start), config, word);
}

}  // namespace freezeframe
