// JSON read with nlohmann/json into values that know where they are in the text.

#include "freezeframe/base/json_value.h"

#include <gtest/gtest.h>

#include <string>

#include "freezeframe/base/error.h"

namespace freezeframe {
namespace {

std::string refusal(std::string_view text) {
  try {
    (void)parse_json(text, "f.json");
  } catch (const Error& e) {
    return e.message();
  }
  return "accepted";
}

TEST(JsonValue, ReadsWhatTokenizerJsonHolds) {
  const JsonValue v = parse_json(
      R"({"a": [1, -2.5e3, true, false, null], "s": "\u00e9\ud83d\ude00\n\"\\\/", "o": {}})", "t");
  ASSERT_EQ(v.kind, JsonValue::Kind::kObject);
  ASSERT_EQ(v.find("a")->items.size(), 5u);
  EXPECT_EQ(v.find("a")->items[1].number, -2500);
  EXPECT_FALSE(v.find("a")->items[1].integral);
  EXPECT_TRUE(v.find("a")->items[2].boolean);
  EXPECT_TRUE(v.find("a")->items[4].is_null());
  EXPECT_EQ(v.find("s")->string, "é😀\n\"\\/");
  EXPECT_EQ(v.find("o")->kind, JsonValue::Kind::kObject);
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(JsonValue, IntegersStayExact) {
  const JsonValue v = parse_json("[9007199254740993, -7, 3.0, 18446744073709551615]", "t");
  EXPECT_TRUE(v.items[0].integral);
  EXPECT_EQ(v.items[0].integer, 9007199254740993);  // 2^53 + 1: a double would round it
  EXPECT_EQ(v.items[1].integer, -7);
  EXPECT_FALSE(v.items[2].integral) << "written with a fraction";
  EXPECT_FALSE(v.items[3].integral) << "beyond int64";
  EXPECT_EQ(v.items[3].number, 18446744073709551615.0);
}

// Where each value starts, for messages: the parser reports values after it has read them.
TEST(JsonValue, ValuesKnowWhereTheyStart) {
  const std::string text =
      "{\n  \"n\": 12.5e1,\n  \"s\": \"a\\\"b\\\\\",\n  \"l\": [true, null, -3],"
      "\n  \"o\": {\"k\": 1}\n}";
  const JsonValue v = parse_json(text, "t");
  EXPECT_EQ(json_position(text, v.offset), "1:1");
  EXPECT_EQ(json_position(text, v.find("n")->offset), "2:8");
  EXPECT_EQ(json_position(text, v.find("s")->offset), "3:8");
  const JsonValue& l = *v.find("l");
  EXPECT_EQ(json_position(text, l.offset), "4:8");
  EXPECT_EQ(json_position(text, l.items[0].offset), "4:9");
  EXPECT_EQ(json_position(text, l.items[1].offset), "4:15");
  EXPECT_EQ(json_position(text, l.items[2].offset), "4:21");
  EXPECT_EQ(json_position(text, v.find("o")->offset), "5:8");
  EXPECT_EQ(json_position(text, v.find("o")->find("k")->offset), "5:14");
  EXPECT_EQ(parse_json("7", "t").offset, 0u);
}

// Python's json (and so transformers) keeps the last value of a repeated key.
TEST(JsonValue, ARepeatedKeyKeepsItsLastValueAtItsFirstPlace) {
  const JsonValue v = parse_json(R"({"a": 1, "b": 2, "a": {"x": 3}, "c": 4, "a": 5})", "t");
  ASSERT_EQ(v.members.size(), 3u);
  EXPECT_EQ(v.members[0].first, "a");
  EXPECT_EQ(v.members[0].second.integer, 5);
  EXPECT_EQ(v.members[1].first, "b");
  EXPECT_EQ(v.members[2].first, "c");
  EXPECT_EQ(v.find("a")->integer, 5);
}

TEST(JsonValue, RefusesWhatIsNotJsonWithLineAndColumn) {
  EXPECT_EQ(refusal("[1, 2"),
            "f.json:1:6: syntax error while parsing array - unexpected end of input; expected ']'");
  EXPECT_EQ(refusal("{\n  \"a\": 1,\n}"),
            "f.json:3:1: syntax error while parsing object key - unexpected '}'; "
            "expected string literal");
  EXPECT_EQ(refusal("01"),
            "f.json:1:2: syntax error while parsing value - unexpected number literal; "
            "expected end of input");
  EXPECT_EQ(refusal("1e999"), "f.json:1:1: a number out of range");
  EXPECT_EQ(refusal(std::string(100, '[') + std::string(100, ']')),
            "f.json:1:65: nested deeper than 64");
}

// What YAML (and so the yaml-cpp reading this replaced) would take.
TEST(JsonValue, RefusesYamlSyntax) {
  for (const char* text : {"{\"a\": 1} # comment", "{a: 1}", "{\"a\": 1,}", "[1, 2,]",
                           "{\"a\": !!int 1}", "{\"a\": 'x'}", "// c\n{}", "/* c */ {}",
                           "{\"a\": .5}", "{\"a\": +1}", "{\"a\": NaN}", "{\"a\": 0x10}"}) {
    const std::string m = refusal(text);
    EXPECT_NE(m, "accepted") << text;
    EXPECT_EQ(m.rfind("f.json:1:", 0), 0u) << text << " -> " << m;
  }
}

TEST(JsonValue, RefusesBrokenStrings) {
  for (const char* text : {"\"\\ud83d\"", "\"\\ude00\"", "\"a\nb\"", "\"\xff\"", "\"\xc0\xaf\"",
                           "\"\\x41\"", "\"abc", "", "tru", "[1] x"}) {
    EXPECT_EQ(refusal(text).rfind("f.json:1:", 0), 0u) << text;
  }
}

TEST(JsonValue, BoundsTheNumberOfValues) {
  std::string many = "[";
  for (std::size_t i = 0; i <= kMaxJsonValues; ++i) many += i ? ",0" : "0";
  many += "]";
  EXPECT_NE(refusal(many).find("values in one JSON text"), std::string::npos);
}

}  // namespace
}  // namespace freezeframe
