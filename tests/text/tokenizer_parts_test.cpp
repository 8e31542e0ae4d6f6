// engine/: the tokenizer's private pieces on hand-made cases: GPT-2's split alternative by
// alternative, the digits split and prefix spaces, the byte alphabet, the character classes,
// the JSON reader's refusals and escapes.

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "byte_level.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/utf8.h"
#include "pre_tokenizer.h"
#include "unicode_tables.h"

namespace freezeframe {
namespace {

std::vector<std::string> words(std::string_view text, PreTokenizerConfig config = {}) {
  std::vector<std::string> out;
  pre_tokenize(text, config, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}
using W = std::vector<std::string>;

TEST(PreTokenizer, Gpt2SplitAlternativeByAlternative) {
  EXPECT_EQ(words(""), W{});
  // Contractions, lower case only, even before more letters.
  EXPECT_EQ(words("it's"), (W{"it", "'s"}));
  EXPECT_EQ(words("we'll they're I've I'd"),
            (W{"we", "'ll", " they", "'re", " I", "'ve", " I", "'d"}));
  EXPECT_EQ(words("IT'S"), (W{"IT", "'", "S"}));
  EXPECT_EQ(words("'steve"), (W{"'s", "teve"}));
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+".
  EXPECT_EQ(words("Hello world"), (W{"Hello", " world"}));
  EXPECT_EQ(words("abc123def"), (W{"abc", "123", "def"}));
  EXPECT_EQ(words("a 12 b"), (W{"a", " 12", " b"}));
  EXPECT_EQ(words("x!!'s"), (W{"x", "!!'", "s"}));
  EXPECT_EQ(words(" 's"), (W{" '", "s"}));
  EXPECT_EQ(words("naïve café"), (W{"naïve", " café"}));
  EXPECT_EQ(words("中文 字"), (W{"中文", " 字"}));
  EXPECT_EQ(words("x²³ ½"), (W{"x", "²³", " ½"}));
  EXPECT_EQ(words("😀😃 ok"), (W{"😀😃", " ok"}));
  EXPECT_EQ(words("e\u0301"), (W{"e", "\u0301"})) << "a combining mark is not a letter";
  // "\s+(?!\S)": a run of white space leaves its last character to the word after it.
  EXPECT_EQ(words("a   b"), (W{"a", "  ", " b"}));
  EXPECT_EQ(words("a\t\tb"), (W{"a", "\t", "\t", "b"}));
  EXPECT_EQ(words("a \n b"), (W{"a", " \n", " b"}));
  EXPECT_EQ(words("end  "), (W{"end", "  "}));
  EXPECT_EQ(words("   "), (W{"   "}));
  // "\s+" alone: one white space character before a non-space.
  EXPECT_EQ(words("\tx"), (W{"\t", "x"}));
  EXPECT_EQ(words("a\u00a0b"), (W{"a", "\u00a0", "b"})) << "only U+0020 joins the next word";
  EXPECT_EQ(words(" \u00a0b"), (W{" ", "\u00a0", "b"}));
  EXPECT_EQ(words("a\u3000\u3000b"), (W{"a", "\u3000", "\u3000", "b"}));
  // U+001C..U+001F are spaces to Python's isspace but not White_Space.
  EXPECT_EQ(words("a\x1c b"), (W{"a", "\x1c", " b"}));
  // Bytes outside UTF-8 are "other" characters.
  EXPECT_EQ(words("a\xff\xfe b"), (W{"a", "\xff\xfe", " b"}));
}

TEST(PreTokenizer, DigitsAloneAndPrefixSpaces) {
  const PreTokenizerConfig digits{true, false};
  EXPECT_EQ(words("abc123", digits), (W{"abc", "1", "2", "3"}));
  EXPECT_EQ(words("a  1", digits), (W{"a", "  ", "1"})) << "the stretch ends before the digit";
  EXPECT_EQ(words(" 1", digits), (W{" ", "1"}));
  EXPECT_EQ(words("x²½٣", digits), (W{"x", "²", "½", "٣"}));
  const PreTokenizerConfig prefix{false, true};
  EXPECT_EQ(words("hi", prefix), (W{" hi"}));
  EXPECT_EQ(words(" hi", prefix), (W{" hi"}));
  EXPECT_EQ(words("", prefix), W{});
  const PreTokenizerConfig both{true, true};
  EXPECT_EQ(words("ab12 c", both), (W{" ab", " 1", " 2", " c"}));
}

TEST(ByteLevel, AlphabetIsGpt2s) {
  EXPECT_EQ(byte_level::char_of(' '), U'Ġ');
  EXPECT_EQ(byte_level::char_of('\n'), U'Ċ');
  EXPECT_EQ(byte_level::char_of('A'), U'A');
  EXPECT_EQ(byte_level::char_of(0xE9), U'é');
  EXPECT_EQ(byte_level::char_of(0x00), U'Ā');
  EXPECT_EQ(byte_level::char_of(0xAD), char32_t(0x143));
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_level::char_of(std::uint8_t(b));
    EXPECT_TRUE(seen.insert(c).second);
    EXPECT_EQ(byte_level::byte_of(c), std::uint8_t(b));
  }
  EXPECT_EQ(byte_level::byte_of(U'中'), std::nullopt);
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  EXPECT_EQ(byte_level::unspell(byte_level::spell(all)), all);
  EXPECT_EQ(byte_level::spell(" world"), "Ġworld");
  EXPECT_EQ(byte_level::unspell("中"), std::nullopt);
}

TEST(UnicodeTables, Classes) {
  EXPECT_EQ(char_class(U'a'), CharClass::kLetter);
  EXPECT_EQ(char_class(U'中'), CharClass::kLetter);
  EXPECT_EQ(char_class(U'ب'), CharClass::kLetter);
  EXPECT_EQ(char_class(U'7'), CharClass::kNumber);
  EXPECT_EQ(char_class(U'½'), CharClass::kNumber);
  EXPECT_EQ(char_class(U'Ⅻ'), CharClass::kNumber);
  EXPECT_EQ(char_class(U' '), CharClass::kSpace);
  EXPECT_EQ(char_class(U'\u0085'), CharClass::kSpace);
  EXPECT_EQ(char_class(U'\u3000'), CharClass::kSpace);
  EXPECT_EQ(char_class(U'\u200b'), CharClass::kOther);
  EXPECT_EQ(char_class(U'\x1c'), CharClass::kOther);
  EXPECT_EQ(char_class(U'😀'), CharClass::kOther);
  EXPECT_EQ(char_class(U'\u0301'), CharClass::kOther);
  EXPECT_EQ(char_class(char32_t(0x10FFFF)), CharClass::kOther);
  EXPECT_EQ(char_class(char32_t(0x7FFFFFFF)), CharClass::kOther);
}

TEST(Utf8, MalformedSequencesAreSingleBytes) {
  EXPECT_EQ(utf8::next("\xC0\x80", 0).cp, utf8::kInvalid) << "overlong";
  EXPECT_EQ(utf8::next("\xED\xA0\x80", 0).cp, utf8::kInvalid) << "surrogate";
  EXPECT_EQ(utf8::next("\xF4\x90\x80\x80", 0).cp, utf8::kInvalid) << "past U+10FFFF";
  EXPECT_EQ(utf8::next("\xE2\x82", 0).cp, utf8::kInvalid) << "truncated";
  EXPECT_EQ(utf8::next("\xE2\x82\xAC", 0).cp, U'€');
  EXPECT_EQ(utf8::next("\xE2\x82\xAC", 0).bytes, 3u);
}

}  // namespace
}  // namespace freezeframe
