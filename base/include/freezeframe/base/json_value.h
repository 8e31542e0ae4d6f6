#pragma once
// JSON text read into a tree whose values keep their offset in the text, so that a message can
// name its line and column. nlohmann/json parses (RFC 8259: UTF-8, escapes with surrogate
// pairs, no comments, nothing after the value); this adds what the readers need: a repeated
// key keeps its last value, as Python's json (and so transformers) does; nesting at most
// kMaxJsonDepth deep; memory bounded by the number of values (kMaxJsonValues), not only by the
// text's size.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace freezeframe {

inline constexpr int kMaxJsonDepth = 64;
/// The most values one text may hold (a vocabulary of 256k tokens with 500k merges as pairs
/// holds under 2M).
inline constexpr std::size_t kMaxJsonValues = std::size_t(4) << 20;

struct JsonValue {
  enum class Kind : std::uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  /// kNumber: `number` always; `integer` too when written without fraction or exponent and
  /// within 64 bits (`integral`).
  bool integral = false;
  std::int64_t integer = 0;
  double number = 0;
  std::size_t offset = 0;  ///< where the value starts in the text
  std::string string;
  std::vector<JsonValue> items;                            ///< kArray
  std::vector<std::pair<std::string, JsonValue>> members;  ///< kObject, in file order

  /// The member called `key` of an object, or null when absent (or not an object).
  [[nodiscard]] const JsonValue* find(std::string_view key) const;
  [[nodiscard]] bool is_null() const { return kind == Kind::kNull; }
};

/// "null", "a boolean", "a number", ... for messages.
[[nodiscard]] std::string_view json_kind_name(JsonValue::Kind kind);

/// Parses `text`, all of it one JSON value. Throws kInvalidArgument "`source`:LINE:COLUMN: what
/// is wrong".
[[nodiscard]] JsonValue parse_json(std::string_view text, const std::string& source);

/// "LINE:COLUMN" of byte `offset` in `text` (both from 1; columns in bytes).
[[nodiscard]] std::string json_position(std::string_view text, std::size_t offset);

}  // namespace freezeframe
