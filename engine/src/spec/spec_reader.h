#pragma once
// SpecReader: typed reads of YAML values that never throw on bad input; each mistake becomes
// one "file:line:column: path: message" problem, and reading goes on so a spec's problems are
// all reported at once. Private to the engine.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/engine/spec/spec.h"

namespace freezeframe::spec_detail {

/// Levenshtein distance (insert, delete, substitute; each costs 1).
[[nodiscard]] int edit_distance(std::string_view a, std::string_view b);
/// The candidate closest to `word`, when close enough to be a likely typo; else empty. Cheap
/// for a long word: candidates whose length alone rules them out are not compared.
[[nodiscard]] std::string closest_match(std::string_view word,
                                        const std::vector<std::string>& candidates);

class SpecReader {
 public:
  /// `written`: the spec is text a program wrote (parse_written_spec), whose lines and
  /// columns no one saw; its problems name the field only.
  SpecReader(EngineSpec& spec, std::string file, bool written = false)
      : spec_(spec), file_(std::move(file)), written_(written) {}

  [[nodiscard]] SpecLocation location(const YAML::Node& node) const;
  /// The most problems kept (the rest are counted): a spec with thousands of mistakes still
  /// gets a message of a readable size.
  static constexpr std::size_t kMaxKeptProblems = 100;

  void problem(const YAML::Node& at, std::string_view path, std::string message);
  void problem_at(const SpecLocation& at, std::string_view path, std::string message);
  /// A problem the checkpoint's reader found (`message` names its file and field): at
  /// model.checkpoint in a spec file, as it is in a written spec.
  void checkpoint_problem(const YAML::Node& at, std::string message);
  [[nodiscard]] const std::vector<std::string>& problems() const { return problems_; }
  [[nodiscard]] std::size_t problem_count() const { return problem_count_; }
  void remember(std::string_view path, const YAML::Node& node);

  /// True when `node` is a mapping; otherwise reports "expected a mapping" (unless undefined).
  bool expect_map(const YAML::Node& node, std::string_view path);
  /// Reports keys of `map` not in `known` (suggesting the closest) and repeated keys.
  void check_keys(const YAML::Node& map, std::string_view path,
                  std::initializer_list<std::string_view> known);

  /// map[key] when present and not null; otherwise an undefined node.
  [[nodiscard]] static YAML::Node child(const YAML::Node& map, std::string_view key);

  std::optional<std::int64_t> read_int(const YAML::Node& map, std::string_view key,
                                       std::string_view path, std::int64_t min, std::int64_t max);
  /// A number kept as a 32-bit float: besides the range, a nonzero value must be a normal
  /// float (neither rounded to zero or a denormal nor past the largest float).
  std::optional<double> read_float(const YAML::Node& map, std::string_view key,
                                   std::string_view path, double min, double max,
                                   bool min_exclusive = false);
  std::optional<bool> read_bool(const YAML::Node& map, std::string_view key, std::string_view path);
  std::optional<std::string> read_string(const YAML::Node& map, std::string_view key,
                                         std::string_view path);
  /// A string that must be one of `options`; suggests the closest on a miss.
  std::optional<std::string> read_choice(const YAML::Node& map, std::string_view key,
                                         std::string_view path,
                                         const std::vector<std::string>& options);
  /// Reports `key` missing from `map` (at the mapping's location).
  void missing(const YAML::Node& map, std::string_view path);

  /// Scalar conversions used by the readers above (exposed for list items).
  std::optional<std::int64_t> as_int(const YAML::Node& node, std::string_view path,
                                     std::int64_t min, std::int64_t max);

 private:
  EngineSpec& spec_;
  std::string file_;
  bool written_ = false;
  std::vector<std::string> problems_;
  std::size_t problem_count_ = 0;
};

/// "parent.key", with the key (text from the file) made printable.
[[nodiscard]] std::string join_path(std::string_view parent, std::string_view key);

/// A YAML number: decimal or exponent notation, an optional sign, and YAML's .inf and .nan.
/// `out_of_range` is set when the value is past what a double holds (or underflows).
[[nodiscard]] std::optional<double> parse_yaml_number(std::string_view text, bool& out_of_range);

}  // namespace freezeframe::spec_detail
