#pragma once
// JsonFields: typed reads of a checkpoint's JSON config (config.json, generation_config.json),
// each mistake one problem naming the file, line, column and field, reading going on after
// it. Private to checkpoints/.

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint_config_reader.h"
#include "freezeframe/base/json_value.h"
#include "freezeframe/base/printable.h"

namespace freezeframe::checkpoint_detail {

/// Typed reads of the config's fields; each mistake becomes one problem and reading goes on.
class JsonFields {
 public:
  JsonFields(std::string file, std::string_view text, CheckpointConfig& config,
             std::vector<std::string>& problems)
      : file_(std::move(file)), text_(text), config_(config), problems_(problems) {}

  [[nodiscard]] std::string where(const JsonValue* node) const {
    if (node == nullptr) return printable(file_, 200);
    return printable(file_, 200) + ":" + json_position(text_, node->offset);
  }
  void problem(const JsonValue* at, std::string_view field, std::string_view message) {
    problems_.push_back(problem_text(where(at), field, message));
  }
  /// Records where the checkpoint states a ModelSpec field.
  void origin(std::string_view spec_field, const JsonValue* at, std::string_view field) {
    config_.origins[std::string(spec_field)] = where(at) + ": " + std::string(field);
  }

  /// map[key]; null when absent, when null (which means "not set") or when map is no object.
  [[nodiscard]] static const JsonValue* get(const JsonValue* map, std::string_view key) {
    if (map == nullptr || map->kind != JsonValue::Kind::kObject) return nullptr;
    const JsonValue* v = map->find(key);
    return v == nullptr || v->is_null() ? nullptr : v;
  }

  /// What a value is, for "expected X, got Y": a number as written.
  [[nodiscard]] std::string kind_of(const JsonValue& node) const {
    switch (node.kind) {
      case JsonValue::Kind::kArray: return "a list";
      case JsonValue::Kind::kObject: return "an object";
      case JsonValue::Kind::kString: return "the string " + quote(node.string);
      case JsonValue::Kind::kBool: return node.boolean ? "'true'" : "'false'";
      case JsonValue::Kind::kNull: return "'null'";
      case JsonValue::Kind::kNumber: return quote(number_text(node));
    }
    return "a value";
  }
  /// The number as the file writes it.
  [[nodiscard]] std::string_view number_text(const JsonValue& node) const {
    std::size_t end = node.offset;
    while (end < text_.size() &&
           std::string_view("0123456789-+.eE").find(text_[end]) != std::string_view::npos) {
      ++end;
    }
    return text_.substr(node.offset, end - node.offset);
  }

  void missing(const JsonValue* map, std::string_view field) {
    problem(map, field, "is required but missing");
  }

  std::optional<std::int64_t> integer(const JsonValue* map, std::string_view key,
                                      std::string_view field, bool required, std::int64_t min = 1,
                                      std::int64_t max = kMaxSize) {
    const JsonValue* node = get(map, key);
    if (node == nullptr) {
      if (required) missing(map, field);
      return std::nullopt;
    }
    return integer_value(*node, field, min, max);
  }

  /// The integer `node` holds, in [min, max].
  std::optional<std::int64_t> integer_value(const JsonValue& node, std::string_view field,
                                            std::int64_t min, std::int64_t max) {
    if (node.kind != JsonValue::Kind::kNumber ||
        (!node.integral && node.number != std::floor(node.number))) {
      problem(&node, field, "expected an integer, got " + kind_of(node));
      return std::nullopt;
    }
    if (!node.integral || node.integer < min || node.integer > max) {
      problem(&node, field,
              "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                  quote(number_text(node)));
      return std::nullopt;
    }
    return node.integer;
  }

  /// A finite number greater than 0.
  std::optional<double> positive(const JsonValue* map, std::string_view key, std::string_view field,
                                 bool required) {
    const JsonValue* node = get(map, key);
    if (node == nullptr) {
      if (required) missing(map, field);
      return std::nullopt;
    }
    if (node->kind != JsonValue::Kind::kNumber) {
      problem(node, field, "expected a number, got " + kind_of(*node));
      return std::nullopt;
    }
    // Kept as a 32-bit float: a value that would become 0, a denormal or infinity there is
    // refused rather than changed.
    const double value = node->number;
    if (value < std::numeric_limits<float>::min() || value > std::numeric_limits<float>::max()) {
      problem(node, field,
              "must be a positive number that a 32-bit float holds as a normal value, got " +
                  quote(number_text(*node)));
      return std::nullopt;
    }
    return value;
  }

  std::optional<bool> boolean(const JsonValue* map, std::string_view key, std::string_view field) {
    const JsonValue* node = get(map, key);
    if (node == nullptr) return std::nullopt;
    if (node->kind == JsonValue::Kind::kBool) return node->boolean;
    problem(node, field, "expected true or false, got " + kind_of(*node));
    return std::nullopt;
  }

  std::optional<std::string> string(const JsonValue* map, std::string_view key,
                                    std::string_view field) {
    const JsonValue* node = get(map, key);
    if (node == nullptr) return std::nullopt;
    if (node->kind == JsonValue::Kind::kString) return node->string;
    problem(node, field, "expected a string, got " + kind_of(*node));
    return std::nullopt;
  }

 private:
  std::string file_;
  std::string_view text_;
  CheckpointConfig& config_;
  std::vector<std::string>& problems_;
};

}  // namespace freezeframe::checkpoint_detail
