// engine/: text from input files as messages quote it (escaped, shortened).

#include "freezeframe/base/printable.h"

#include <gtest/gtest.h>

#include <string>

namespace freezeframe {
namespace {

TEST(Printable, EscapesWhatWouldBreakAMessage) {
  EXPECT_EQ(printable("plain text, 42"), "plain text, 42");
  EXPECT_EQ(printable("a\nb\rc\td\\e"), "a\\nb\\rc\\td\\\\e");
  EXPECT_EQ(printable(std::string("\x07\x1b[31m\x7f\0z", 9)), "\\x07\\x1B[31m\\x7F\\x00z");
  // Valid UTF-8 stays; invalid bytes, C1 controls and invisible format characters do not.
  EXPECT_EQ(printable("größe ≤ 4 µs"), "größe ≤ 4 µs");
  EXPECT_EQ(printable("\xff\xfe"), "\\xFF\\xFE");
  EXPECT_EQ(printable("\xc3"), "\\xC3") << "a truncated sequence";
  EXPECT_EQ(printable("\xc0\xaf"), "\\xC0\\xAF") << "an overlong '/'";
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xED\\xA0\\x80") << "a surrogate";
  EXPECT_EQ(printable("\xc2\x85"), "\\xC2\\x85") << "NEL, a C1 control";
  EXPECT_EQ(printable("a\xe2\x80\xae"
                      "b"),
            "a\\xE2\\x80\\xAEb")
      << "right-to-left override";
  EXPECT_EQ(printable("\xef\xbb\xbfx"), "\\xEF\\xBB\\xBFx") << "byte order mark";
}

TEST(Printable, ShortensLongTextWithAnEllipsis) {
  EXPECT_EQ(printable(std::string(80, 'a')), std::string(80, 'a'));
  EXPECT_EQ(printable(std::string(81, 'a')), std::string(80, 'a') + "…");
  EXPECT_EQ(printable(std::string(5'000'000, 'a')).size(), 80u + 3u);
  // Escapes count as what they show and are never cut in half.
  EXPECT_EQ(printable(std::string(79, 'a') + "\n", 80), std::string(79, 'a') + "…");
  EXPECT_EQ(printable("ab\x01", 4), "ab…");
  EXPECT_EQ(printable("ééé", 2), "éé…") << "characters, not bytes";
}

TEST(Printable, QuotedAddsTheLengthWhenShortened) {
  EXPECT_EQ(quote("bf16"), "'bf16'");
  EXPECT_EQ(quote(""), "''");
  EXPECT_EQ(quote(std::string(100, 'x')), "'" + std::string(80, 'x') + "…' (100 bytes)");
  EXPECT_EQ(quote("a\x07", 10), "'a\\x07'");
}

}  // namespace
}  // namespace freezeframe
