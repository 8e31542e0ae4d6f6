#include "spec_reader.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "printable.h"

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

SpecLocation SpecReader::location(const YAML::Node& node) const {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return {file_, 0, 0};
  return {file_, mark.line + 1, mark.column + 1};
}

void SpecReader::problem_at(const SpecLocation& at, std::string_view path, std::string message) {
  if (++problem_count_ > kMaxKeptProblems) return;
  std::ostringstream text;
  text << at.file;
  if (at.line > 0) text << ':' << at.line << ':' << at.column;
  text << ": ";
  if (!path.empty()) text << path << ": ";
  text << message;
  problems_.push_back(text.str());
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
    problem(node, path, "expected an integer, got a " +
                            std::string(node.IsSequence() ? "list" : "mapping"));
    return std::nullopt;
  }
  std::int64_t value = 0;
  try {
    value = node.as<std::int64_t>();
  } catch (const YAML::Exception&) {
    problem(node, path, "expected an integer, got " + quote(node.Scalar()));
    return std::nullopt;
  }
  if (value < min || value > max) {
    problem(node, path, "must be in [" + std::to_string(min) + ", " + std::to_string(max) +
                            "], got " + std::to_string(value));
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

std::optional<double> SpecReader::read_number(const YAML::Node& map, std::string_view key,
                                              std::string_view path, double min, double max,
                                              bool min_exclusive) {
  const YAML::Node node = child(map, key);
  if (!node.IsDefined()) return std::nullopt;
  const std::string full = join_path(path, key);
  remember(full, node);
  if (!node.IsScalar()) {
    problem(node, full, std::string("expected a number, got a ") +
                            (node.IsSequence() ? "list" : "mapping"));
    return std::nullopt;
  }
  double value = 0;
  try {
    value = node.as<double>();
  } catch (const YAML::Exception&) {
    problem(node, full, "expected a number, got " + quote(node.Scalar()));
    return std::nullopt;
  }
  const bool below = min_exclusive ? !(value > min) : !(value >= min);
  if (!std::isfinite(value) || below || value > max) {
    std::ostringstream range;
    range << (min_exclusive ? "(" : "[") << min << ", " << max << "]";
    problem(node, full, "must be a finite number in " + range.str() + ", got " +
                            printable(node.Scalar()));
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
  problem(node, full, "expected true or false, got " +
                          (node.IsScalar() ? quote(node.Scalar())
                                           : node.IsSequence() ? "a list" : "a mapping"));
  return std::nullopt;
}

std::optional<std::string> SpecReader::read_string(const YAML::Node& map, std::string_view key,
                                                   std::string_view path) {
  const YAML::Node node = child(map, key);
  if (!node.IsDefined()) return std::nullopt;
  const std::string full = join_path(path, key);
  remember(full, node);
  if (!node.IsScalar()) {
    problem(node, full, std::string("expected a string, got a ") +
                            (node.IsSequence() ? "list" : "mapping"));
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
