#include "freezeframe/base/json_value.h"

#include <charconv>
#include <cmath>
#include <unordered_set>

#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/base/utf8.h"

namespace freezeframe {
namespace {

class Parser {
 public:
  Parser(std::string_view text, const std::string& source) : t_(text), source_(source) {}

  JsonValue document() {
    JsonValue v = value(0);
    skip_space();
    if (at_ != t_.size()) fail("text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const { fail_at(at_, what); }
  [[noreturn]] void fail_at(std::size_t offset, std::string_view what) const {
    FF_THROW(ErrorCode::kInvalidArgument, source_, ":", json_position(t_, offset), ": ", what);
  }

  void skip_space() {
    while (at_ < t_.size() &&
           (t_[at_] == ' ' || t_[at_] == '\t' || t_[at_] == '\n' || t_[at_] == '\r')) {
      ++at_;
    }
  }

  void expect_word(std::string_view word) {
    if (t_.substr(at_, word.size()) != word) fail("not a JSON value");
    at_ += word.size();
  }

  JsonValue value(int depth) {
    skip_space();
    if (at_ >= t_.size()) fail("the text ends where a value should be");
    if (++values_ > kMaxJsonValues) {
      fail("more than " + std::to_string(kMaxJsonValues) + " values in one JSON text");
    }
    JsonValue v;
    v.offset = at_;
    const char c = t_[at_];
    if (c == '{' || c == '[') {
      if (depth >= kMaxJsonDepth) fail("nested deeper than " + std::to_string(kMaxJsonDepth));
      ++at_;
      (c == '{' ? object(v, depth) : array(v, depth));
    } else if (c == '"') {
      v.kind = JsonValue::Kind::kString;
      v.string = string();
    } else if (c == 't') {
      expect_word("true");
      v.kind = JsonValue::Kind::kBool;
      v.boolean = true;
    } else if (c == 'f') {
      expect_word("false");
      v.kind = JsonValue::Kind::kBool;
    } else if (c == 'n') {
      expect_word("null");
    } else {
      v.kind = JsonValue::Kind::kNumber;
      v.number = number();
    }
    return v;
  }

  void object(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::kObject;
    std::unordered_set<std::string> keys;
    skip_space();
    if (at_ < t_.size() && t_[at_] == '}') {
      ++at_;
      return;
    }
    while (true) {
      skip_space();
      if (at_ >= t_.size() || t_[at_] != '"') fail("expected a key in quotes");
      const std::size_t key_at = at_;
      std::string key = string();
      if (!keys.insert(key).second) fail_at(key_at, "the key " + quote(key) + " appears twice");
      skip_space();
      if (at_ >= t_.size() || t_[at_] != ':') fail("expected ':' after a key");
      ++at_;
      JsonValue member = value(depth + 1);
      v.members.emplace_back(std::move(key), std::move(member));
      skip_space();
      if (at_ < t_.size() && t_[at_] == ',') {
        ++at_;
      } else if (at_ < t_.size() && t_[at_] == '}') {
        ++at_;
        return;
      } else {
        fail("expected ',' or '}' in an object");
      }
    }
  }

  void array(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::kArray;
    skip_space();
    if (at_ < t_.size() && t_[at_] == ']') {
      ++at_;
      return;
    }
    while (true) {
      v.items.push_back(value(depth + 1));
      skip_space();
      if (at_ < t_.size() && t_[at_] == ',') {
        ++at_;
      } else if (at_ < t_.size() && t_[at_] == ']') {
        ++at_;
        return;
      } else {
        fail("expected ',' or ']' in an array");
      }
    }
  }

  unsigned hex4() {
    if (t_.size() - at_ < 4) fail("a \\u escape needs four hex digits");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = t_[at_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= unsigned(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= unsigned(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= unsigned(c - 'A' + 10);
      } else {
        fail("a \\u escape needs four hex digits");
      }
    }
    return v;
  }

  std::string string() {
    ++at_;  // the opening quote
    std::string out;
    while (true) {
      if (at_ >= t_.size()) fail("a string is not closed");
      const char c = t_[at_];
      if (c == '"') {
        ++at_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        // Copy the run up to the next quote, escape or control character (already valid UTF-8).
        const std::size_t start = at_;
        while (at_ < t_.size() && t_[at_] != '"' && t_[at_] != '\\' &&
               static_cast<unsigned char>(t_[at_]) >= 0x20) {
          ++at_;
        }
        out.append(t_.substr(start, at_ - start));
        continue;
      }
      if (++at_ >= t_.size()) fail("a string is not closed");
      const char e = t_[at_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const std::size_t escape_at = at_ - 2;
          char32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(escape_at, "a lone low surrogate escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (t_.substr(at_, 2) != "\\u") fail_at(escape_at, "a high surrogate escape alone");
            at_ += 2;
            const char32_t low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) {
              fail_at(escape_at, "a high surrogate escape without its low half");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          utf8::append(out, cp);
          break;
        }
        default: fail_at(at_ - 2, "an unknown escape in a string");
      }
    }
  }

  double number() {
    // JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    const std::size_t start = at_;
    auto digits = [&] {
      const std::size_t from = at_;
      while (at_ < t_.size() && t_[at_] >= '0' && t_[at_] <= '9') ++at_;
      return at_ - from;
    };
    if (at_ < t_.size() && t_[at_] == '-') ++at_;
    const std::size_t int_at = at_;
    const std::size_t n = digits();
    if (n == 0) fail_at(start, "not a JSON value");
    if (n > 1 && t_[int_at] == '0') fail_at(start, "a number with a leading zero");
    if (at_ < t_.size() && t_[at_] == '.') {
      ++at_;
      if (digits() == 0) fail_at(start, "a number with no digits after '.'");
    }
    if (at_ < t_.size() && (t_[at_] == 'e' || t_[at_] == 'E')) {
      ++at_;
      if (at_ < t_.size() && (t_[at_] == '+' || t_[at_] == '-')) ++at_;
      if (digits() == 0) fail_at(start, "a number with no digits in its exponent");
    }
    double v = 0;
    const auto r = std::from_chars(t_.data() + start, t_.data() + at_, v);
    if (r.ec != std::errc() || !std::isfinite(v)) fail_at(start, "a number out of range");
    return v;
  }

  std::string_view t_;
  const std::string& source_;
  std::size_t at_ = 0;
  std::size_t values_ = 0;
};

}  // namespace

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& [k, v] : members) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string_view json_kind_name(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kNull: return "null";
    case JsonValue::Kind::kBool: return "a boolean";
    case JsonValue::Kind::kNumber: return "a number";
    case JsonValue::Kind::kString: return "a string";
    case JsonValue::Kind::kArray: return "an array";
    case JsonValue::Kind::kObject: return "an object";
  }
  return "a value";
}

JsonValue parse_json(std::string_view text, const std::string& source) {
  // Checked whole first, so that strings can be copied without looking at each byte again.
  for (std::size_t at = 0; at < text.size();) {
    const utf8::Char c = utf8::next(text, at);
    if (c.cp == utf8::kInvalid) {
      FF_THROW(ErrorCode::kInvalidArgument, source, ":", json_position(text, at),
               ": not UTF-8 (byte 0x", "0123456789abcdef"[(std::uint8_t(text[at]) >> 4)],
               "0123456789abcdef"[std::uint8_t(text[at]) & 15], ")");
    }
    at += c.bytes;
  }
  return Parser(text, source).document();
}

std::string json_position(std::string_view text, std::size_t offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace freezeframe
