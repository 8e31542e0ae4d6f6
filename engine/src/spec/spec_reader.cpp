#include "spec/spec_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "freezeframe/base/printable.h"

namespace freezeframe::spec_detail {

int edit_distance(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const int substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  // A typo changes a few characters; beyond a third of the word it is probably something else.
  const std::size_t length = std::min<std::size_t>(word.size(), 1 << 20);
  const int limit = std::max(2, static_cast<int>(length / 3));
  std::string best;
  int best_distance = 0;
  for (const std::string& c : candidates) {
    // The distance is at least the difference in length.
    const std::size_t gap = std::max(word.size(), c.size()) - std::min(word.size(), c.size());
    if (gap > static_cast<std::size_t>(limit)) continue;
    const int d = edit_distance(word, c);
    if (best.empty() || d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return !best.empty() && best_distance <= limit ? best : std::string();
}

std::string join_path(std::string_view parent, std::string_view key) {
  if (parent.empty()) return printable(key);
  return std::string(parent) + "." + printable(key);
}

std::optional<double> parse_yaml_number(std::string_view text, bool& out_of_range) {
  out_of_range = false;
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (std::string_view inf : {".inf", ".Inf", ".INF"}) {
    if (text == inf) return negative ? -kInf : kInf;
  }
  for (std::string_view nan : {".nan", ".NaN", ".NAN"}) {
    if (text == nan) return std::numeric_limits<double>::quiet_NaN();
  }
  // Digits only: from_chars would also take "inf", "nan" and hexadecimal-looking text.
  if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string_view::npos) {
    return std::nullopt;
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (end != text.data() + text.size()) return std::nullopt;
  if (ec == std::errc::result_out_of_range) {
    out_of_range = true;
    return std::nullopt;
  }
  if (ec != std::errc()) return std::nullopt;
  return negative ? -value : value;
}

SpecLocation SpecReader::location(const YAML::Node& node) const {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null() || written_) return {file_, 0, 0};
  return {file_, mark.line + 1, mark.column + 1};
}

void SpecReader::problem_at(const SpecLocation& at, std::string_view path, std::string message) {
  if (++problem_count_ > kMaxKeptProblems) return;
  std::ostringstream text;
  if (!written_) {
    text << at.file;
    if (at.line > 0) text << ':' << at.line << ':' << at.column;
    text << ": ";
  }
  if (!path.empty()) text << path << ": ";
  text << message;
  problems_.push_back(text.str());
}

void SpecReader::checkpoint_problem(const YAML::Node& at, std::string message) {
  if (!written_) {
    problem(at, "model.checkpoint", std::move(message));
  } else if (++problem_count_ <= kMaxKeptProblems) {
    problems_.push_back(std::move(message));
  }
}

void SpecReader::problem(const YAML::Node& at, std::string_view path, std::string message) {
  problem_at(location(at), path, std::move(message));
}

void SpecReader::remember(std::string_view path, const YAML::Node& node) {
  spec_.locations[std::string(path)] = location(node);
}

bool SpecReader::expect_map(const YAML::Node& node, std::string_view path) {
  if (!node.IsDefined() || node.IsNull()) return false;
  if (!node.IsMap()) {
    problem(node, path, "expected a mapping of keys to values");
    return false;
  }
  remember(path, node);
  return true;
}

void SpecReader::check_keys(const YAML::Node& map, std::string_view path,
                            std::initializer_list<std::string_view> known) {
  std::vector<std::string> names(known.begin(), known.end());
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;  // a copy: `it->first` lives in a temporary proxy
    if (!key.IsScalar()) {
      problem(key, path, "keys must be plain names");
      continue;
    }
    const std::string name = key.Scalar();
    if (!seen.insert(name).second) {
      problem(key, join_path(path, name), "key given twice (the first is used)");
      continue;
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    std::string message = "unknown key " + quote(name);
    if (const std::string hint = closest_match(name, names); !hint.empty()) {
      message += "; did you mean '" + hint + "'?";
    } else {
      std::string list;
      for (const std::string& n : names) (list += list.empty() ? "" : ", ") += n;
      message += "; expected one of: " + list;
    }
    problem(key, join_path(path, name), message);
  }
}

YAML::Node SpecReader::child(const YAML::Node& map, std::string_view key) {
  if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  // First occurrence wins (check_keys reports repeats).
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) {
      if (it->second.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
      return it->second;
    }
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

std::optional<std::int64_t> SpecReader::as_int(const YAML::Node& node, std::string_view path,
                                               std::int64_t min, std::int64_t max) {
  remember(path, node);
  if (!node.IsScalar()) {
    problem(node, path,
            "expected an integer, got a " + std::string(node.IsSequence() ? "list" : "mapping"));
    return std::nullopt;
  }
  std::int64_t value = 0;
  try {
    value = node.as<std::int64_t>();
  } catch (const YAML::Exception&) {
    const std::string& text = node.Scalar();
    const std::size_t digits = text.find_first_not_of("+-") == 1 ? 1 : 0;
    if (text.size() > digits && text.find_first_not_of("0123456789", digits) == std::string::npos) {
      problem(node, path,
              "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                  quote(text) + " (past the 64-bit integers)");
    } else {
      problem(node, path, "expected an integer, got " + quote(text));
    }
    return std::nullopt;
  }
  if (value < min || value > max) {
    problem(node, path,
            "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                std::to_string(value));
    return std::nullopt;
  }
  return value;
}

std::optional<std::int64_t> SpecReader::read_int(const YAML::Node& map, std::string_view key,
                                                 std::string_view path, std::int64_t min,
                                                 std::int64_t max) {
  const YAML::Node node = child(map, key);
  if (!node.IsDefined()) return std::nullopt;
  return as_int(node, join_path(path, key), min, max);
}

std::optional<double> SpecReader::read_float(const YAML::Node& map, std::string_view key,
                                             std::string_view path, double min, double max,
                                             bool min_exclusive) {
  const YAML::Node node = child(map, key);
  if (!node.IsDefined()) return std::nullopt;
  const std::string full = join_path(path, key);
  remember(full, node);
  if (!node.IsScalar()) {
    problem(node, full,
            std::string("expected a number, got a ") + (node.IsSequence() ? "list" : "mapping"));
    return std::nullopt;
  }
  std::ostringstream range;
  range << (min_exclusive ? "(" : "[") << min << ", " << max << "]";
  bool out_of_range = false;
  const std::optional<double> value = parse_yaml_number(node.Scalar(), out_of_range);
  if (out_of_range) {
    problem(node, full,
            "must be a finite number in " + range.str() + ", got " + quote(node.Scalar()) +
                ", which is past what a double holds");
    return std::nullopt;
  }
  if (!value) {
    problem(node, full, "expected a number, got " + quote(node.Scalar()));
    return std::nullopt;
  }
  const bool below = min_exclusive ? !(*value > min) : !(*value >= min);
  if (!std::isfinite(*value) || below || *value > max) {
    problem(node, full,
            "must be a finite number in " + range.str() + ", got " + printable(node.Scalar()));
    return std::nullopt;
  }
  // The value is kept as a float: one that would become zero, a denormal or infinity there
  // is refused rather than silently changed.
  const double magnitude = std::fabs(*value);
  if (magnitude != 0 && (magnitude < std::numeric_limits<float>::min() ||
                         magnitude > std::numeric_limits<float>::max())) {
    std::ostringstream limits;
    limits << (magnitude < 1 ? "smaller than the smallest normal 32-bit float, "
                             : "larger than the largest 32-bit float, ")
           << (magnitude < 1 ? std::numeric_limits<float>::min()
                             : std::numeric_limits<float>::max());
    problem(node, full,
            "got " + printable(node.Scalar()) + ", " + limits.str() +
                " (write 0 for none, or a value the float holds)");
    return std::nullopt;
  }
  return value;
}

std::optional<bool> SpecReader::read_bool(const YAML::Node& map, std::string_view key,
                                          std::string_view path) {
  const YAML::Node node = child(map, key);
  if (!node.IsDefined()) return std::nullopt;
  const std::string full = join_path(path, key);
  remember(full, node);
  try {
    if (node.IsScalar()) return node.as<bool>();
  } catch (const YAML::Exception&) {
  }
  problem(node, full,
          "expected true or false, got " + (node.IsScalar()     ? quote(node.Scalar())
                                            : node.IsSequence() ? "a list"
                                                                : "a mapping"));
  return std::nullopt;
}

std::optional<std::string> SpecReader::read_string(const YAML::Node& map, std::string_view key,
                                                   std::string_view path) {
  const YAML::Node node = child(map, key);
  if (!node.IsDefined()) return std::nullopt;
  const std::string full = join_path(path, key);
  remember(full, node);
  if (!node.IsScalar()) {
    problem(node, full,
            std::string("expected a string, got a ") + (node.IsSequence() ? "list" : "mapping"));
    return std::nullopt;
  }
  return node.Scalar();
}

std::optional<std::string> SpecReader::read_choice(const YAML::Node& map, std::string_view key,
                                                   std::string_view path,
                                                   const std::vector<std::string>& options) {
  std::optional<std::string> value = read_string(map, key, path);
  if (!value) return std::nullopt;
  if (std::find(options.begin(), options.end(), *value) != options.end()) return value;
  std::string list;
  for (const std::string& o : options) (list += list.empty() ? "" : ", ") += o;
  std::string message = "expected one of " + list + "; got " + quote(*value);
  if (const std::string hint = closest_match(*value, options); !hint.empty()) {
    message += " (did you mean '" + hint + "'?)";
  }
  problem(child(map, key), join_path(path, key), message);
  return std::nullopt;
}

void SpecReader::missing(const YAML::Node& map, std::string_view path) {
  problem(map, path, "is required but missing");
}

}  // namespace freezeframe::spec_detail
