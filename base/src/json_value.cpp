#include "freezeframe/base/json_value.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <unordered_map>

#include "freezeframe/base/error.h"

namespace freezeframe {
namespace {

// nlohmann/json parses; this file only builds the tree, with each value's offset. The parser
// reads its input one character at a time through this iterator, which publishes how far it
// has read: when the parser reports a value, that is the end of the value's token (one past it
// for a number, whose end the parser learns from the next character).
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* at, const char* base, std::size_t* read)
      : at_(at), base_(base), read_(read) {}
  reference operator*() const { return *at_; }
  CountingIterator& operator++() {
    ++at_;
    *read_ = static_cast<std::size_t>(at_ - base_);
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  friend bool operator==(const CountingIterator& a, const CountingIterator& b) {
    return a.at_ == b.at_;
  }

 private:
  const char* at_;
  const char* base_;
  std::size_t* read_;
};

bool is_number_char(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// Receives the parser's events (nlohmann's SAX interface) and builds JsonValues. Objects keep
// the last value of a repeated key, at the place the key first appeared, as Python's json (and
// so transformers) does.
class TreeBuilder {
 public:
  using number_integer_t = std::int64_t;
  using number_unsigned_t = std::uint64_t;
  using number_float_t = double;
  using string_t = std::string;
  using binary_t = nlohmann::json::binary_t;

  TreeBuilder(std::string_view text, const std::string& source) : t_(text), source_(source) {}

  JsonValue take() { return std::move(root_); }
  std::size_t* read() { return &read_; }

  bool null() { return add(JsonValue::Kind::kNull, read_ - 4); }
  bool boolean(bool b) {
    JsonValue& v = add_value(JsonValue::Kind::kBool, read_ - (b ? 4 : 5));
    v.boolean = b;
    return true;
  }
  bool number_integer(std::int64_t n) {
    JsonValue& v = add_value(JsonValue::Kind::kNumber, number_start());
    v.number = double(n);
    v.integral = true;
    v.integer = n;
    return true;
  }
  bool number_unsigned(std::uint64_t n) {
    JsonValue& v = add_value(JsonValue::Kind::kNumber, number_start());
    v.number = double(n);
    v.integral = n <= std::uint64_t(std::numeric_limits<std::int64_t>::max());
    if (v.integral) v.integer = std::int64_t(n);
    return true;
  }
  bool number_float(double d, const std::string& /*text*/) {
    const std::size_t at = number_start();
    if (!std::isfinite(d)) fail_at(at, "a number out of range");
    add_value(JsonValue::Kind::kNumber, at).number = d;
    return true;
  }
  bool string(std::string& s) {
    add_value(JsonValue::Kind::kString, string_start()).string = std::move(s);
    return true;
  }
  bool binary(binary_t& /*unused*/) { return false; }  // never produced from JSON text
  bool start_object(std::size_t /*unknown*/) { return open(JsonValue::Kind::kObject); }
  bool key(std::string& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() {
    keep_last_of_repeated_keys(*open_.back());
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*unknown*/) { return open(JsonValue::Kind::kArray); }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string& /*token*/,
                   const nlohmann::detail::exception& e) {
    if (e.id == 406) fail_at(number_start(), "a number out of range");  // past a double
    // "[json.exception.parse_error.101] parse error at line 1, column 6: syntax error ...":
    // the part after the position, which this file names in its own form.
    std::string_view what = e.what();
    if (const std::size_t id_end = what.find("] ");
        what.starts_with("[json.") && id_end != what.npos) {
      what.remove_prefix(id_end + 2);
    }
    if (what.starts_with("parse error at line ")) {
      const std::size_t colon = what.find(": ");
      if (colon != what.npos) what.remove_prefix(colon + 2);
    }
    fail_at(position == 0 ? 0 : position - 1, what);
  }

 private:
  [[noreturn]] void fail_at(std::size_t offset, std::string_view what) const {
    FF_THROW(ErrorCode::kInvalidArgument, source_, ":", json_position(t_, offset), ": ", what);
  }

  // Where the token the parser has just read starts (see CountingIterator).
  std::size_t number_start() const {
    std::size_t at = read_;
    if (at > 0 && at <= t_.size() && !is_number_char(t_[at - 1])) --at;
    while (at > 0 && is_number_char(t_[at - 1])) --at;
    return at;
  }
  std::size_t string_start() const {
    // The closing quote is at read_ - 1; inside the string a quote is always escaped, so the
    // opening one is the first quote before it not preceded by an odd run of backslashes.
    std::size_t at = read_ - 1;
    while (at > 0) {
      --at;
      if (t_[at] != '"') continue;
      std::size_t slashes = 0;
      while (slashes < at && t_[at - 1 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) return at;
    }
    return 0;
  }

  JsonValue& add_value(JsonValue::Kind kind, std::size_t offset) {
    if (++values_ > kMaxJsonValues) {
      fail_at(offset, "more than " + std::to_string(kMaxJsonValues) + " values in one JSON text");
    }
    JsonValue* v = &root_;
    if (!open_.empty()) {
      JsonValue& parent = *open_.back();
      if (parent.kind == JsonValue::Kind::kArray) {
        v = &parent.items.emplace_back();
      } else {
        v = &parent.members.emplace_back(std::move(key_), JsonValue{}).second;
      }
    }
    v->kind = kind;
    v->offset = offset;
    return *v;
  }
  bool add(JsonValue::Kind kind, std::size_t offset) {
    add_value(kind, offset);
    return true;
  }
  // A parent stays where it is while its children are added: only the innermost open value
  // grows, and each pointer below it points into a value that is not growing.
  bool open(JsonValue::Kind kind) {
    const std::size_t at = read_ - 1;
    if (open_.size() >= std::size_t(kMaxJsonDepth)) {
      fail_at(at, "nested deeper than " + std::to_string(kMaxJsonDepth));
    }
    open_.push_back(&add_value(kind, at));
    return true;
  }
  static void keep_last_of_repeated_keys(JsonValue& object) {
    auto& members = object.members;
    if (members.size() < 2) return;
    std::vector<bool> dropped(members.size(), false);
    bool repeated = false;
    {
      std::unordered_map<std::string_view, std::size_t> first;
      first.reserve(members.size());
      for (std::size_t i = 0; i < members.size(); ++i) {
        const auto [it, fresh] = first.emplace(members[i].first, i);
        if (!fresh) {
          members[it->second].second = std::move(members[i].second);
          dropped[i] = repeated = true;
        }
      }
    }
    if (!repeated) return;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (dropped[i]) continue;
      if (kept != i) members[kept] = std::move(members[i]);
      ++kept;
    }
    members.resize(kept);
  }

  std::string_view t_;
  const std::string& source_;
  JsonValue root_;
  std::vector<JsonValue*> open_;
  std::string key_;
  std::size_t read_ = 0;
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
  TreeBuilder builder(text, source);
  const CountingIterator first(text.data(), text.data(), builder.read());
  const CountingIterator last(text.data() + text.size(), text.data(), builder.read());
  // Strict: one value and nothing after it; comments refused.
  nlohmann::json::sax_parse(first, last, &builder, nlohmann::json::input_format_t::json,
                            /*strict=*/true, /*ignore_comments=*/false);
  return builder.take();
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
