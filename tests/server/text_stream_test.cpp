// server/: output tokens as text sent in whole UTF-8 characters, stop strings found across
// token boundaries and never sent, against the text the tokens decode to all at once.

#include "freezeframe/server/text_stream.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "freezeframe/base/utf8.h"

namespace freezeframe {
namespace {

const Tokenizer& smollm2() {
  static const Tokenizer t = Tokenizer::from_json(
      std::string(FREEZEFRAME_SOURCE_DIR) + "/tests/fixtures/tokenizer/smollm2/tokenizer.json");
  return t;
}

/// Every piece the stream sends for `tokens`, then its finish.
std::vector<std::string> pieces(TextStream& s, const std::vector<TokenId>& tokens) {
  std::vector<std::string> out;
  for (const TokenId t : tokens) out.push_back(s.push(t));
  out.push_back(s.finish());
  return out;
}

TEST(TextStream, SendsWholeCharactersOnly) {
  const Tokenizer& t = smollm2();
  const std::string text = "naïve café — 日本語 😀 ok";
  const std::vector<TokenId> ids = t.encode(text);
  TextStream s(t, {});
  std::string joined;
  for (const std::string& p : pieces(s, ids)) {
    EXPECT_TRUE(utf8::valid(p)) << "a piece cut inside a character";
    joined += p;
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(s.text(), text);
  EXPECT_FALSE(s.stopped());
}

TEST(TextStream, BytesThatMakeNoCharacterBecomeReplacements) {
  const Tokenizer& t = smollm2();
  // Byte tokens: 0xE6 0x97 (the start of 日, cut short), then 'a'; and a lone 0xFF.
  auto byte = [&](unsigned char b) {
    for (TokenId id = 0; id < t.vocab_size(); ++id) {
      if (t.token_bytes(id) == std::string(1, char(b))) return id;
    }
    ADD_FAILURE() << "no token for byte " << int(b);
    return TokenId(0);
  };
  TextStream s(t, {});
  std::string out = s.push(byte(0xE6));
  out += s.push(byte(0x97));
  EXPECT_EQ(out, "") << "held: the character may still end";
  out += s.push(byte('a'));
  out += s.finish();
  EXPECT_EQ(out,
            "\xEF\xBF\xBD"
            "a");
  TextStream cut(t, {});
  std::string tail = cut.push(byte('b'));
  tail += cut.push(byte(0xE6));
  tail += cut.finish();
  EXPECT_EQ(tail, "b\xEF\xBF\xBD") << "the output ended inside a character";
}

TEST(TextStream, StopStringsAcrossTokensAreNeverSent) {
  const Tokenizer& t = smollm2();
  const std::string text = "The answer is 42.\n\nUser: and then?";
  const std::vector<TokenId> ids = t.encode(text);
  for (const std::string stop : {"\n\nUser:", "42", "answer is", "?", "The"}) {
    SCOPED_TRACE(stop);
    TextStream s(t, {"never", stop});
    std::string joined;
    for (const std::string& p : pieces(s, ids)) joined += p;
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(joined, text.substr(0, text.find(stop)));
    EXPECT_EQ(s.text(), joined);
  }
  // A prefix of a stop string that does not go on to match is sent in the end.
  TextStream s(t, {"\n\nAssistant:"});
  std::string joined;
  for (const std::string& p : pieces(s, ids)) joined += p;
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(joined, text);
}

// Random texts and stop strings cut from them: what is sent is always the text up to the
// first stop string, whatever the token boundaries.
TEST(TextStream, MatchesTheWholeTextOnRandomStreams) {
  const Tokenizer& t = smollm2();
  const char* words[] = {"alpha", " beta", " γάμμα", "\n", " 42", "!!", " 日本", " x"};
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    for (int w = 0; w < 12; ++w) text += words[rng() % std::size(words)];
    const std::size_t from = rng() % text.size();
    std::string stop = text.substr(from, 1 + rng() % 6);
    const std::vector<TokenId> ids = t.encode(text);
    TextStream s(t, {stop});
    std::string joined;
    for (const std::string& p : pieces(s, ids)) joined += p;
    // The stop string may cut a character; the text as characters is what can be matched.
    const std::string expected = text.substr(0, text.find(stop));
    if (utf8::valid(stop)) {
      EXPECT_EQ(joined, expected) << "stop " << stop;
      EXPECT_TRUE(s.stopped());
    }
  }
}

TEST(TextStream, TokensPastTheTokenizersVocabularyAreReplacements) {
  const Tokenizer& t = smollm2();
  TextStream s(t, {});
  std::string out = s.push(t.encode("a")[0]);
  out += s.push(t.vocab_size());
  out += s.push(t.vocab_size() + 100000);
  out += s.finish();
  EXPECT_EQ(out, "a\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TextStream, SpecialTokensGiveNoText) {
  const Tokenizer& t = smollm2();
  const TokenId end = *t.find("<|im_end|>");
  TextStream s(t, {});
  std::vector<TokenId> ids = t.encode("Hi");
  ids.push_back(end);
  std::string joined;
  for (const std::string& p : pieces(s, ids)) joined += p;
  EXPECT_EQ(joined, "Hi");
}

}  // namespace
}  // namespace freezeframe
