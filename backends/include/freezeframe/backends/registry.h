#pragma once
// The backend registry: backends are found by name, or by an alias (an older name kept so that
// specs written with it still load). The built-in backends are registered on first use;
// embedders may add their own.

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "freezeframe/backends/backend.h"

namespace freezeframe {

class BackendRegistry {
 public:
  /// The process-wide registry, holding the built-in backends.
  static BackendRegistry& global();

  /// Adds a backend; a second backend (or alias) with the same name is an error.
  void add(std::unique_ptr<AttentionBackend> backend);
  /// Makes `alias` a second name of the registered backend `name`.
  void add_alias(std::string alias, std::string_view name);
  /// The backend called `name` (or aliased so); an unknown name throws kNotFound listing the
  /// known ones.
  [[nodiscard]] const AttentionBackend& get(std::string_view name) const;
  [[nodiscard]] bool contains(std::string_view name) const;
  /// Registered names, sorted (aliases not among them).
  [[nodiscard]] std::vector<std::string> names() const;
  /// (alias, backend name) pairs, sorted by alias.
  [[nodiscard]] std::vector<std::pair<std::string, std::string>> aliases() const;

 private:
  [[nodiscard]] const AttentionBackend* find(std::string_view name) const;

  std::vector<std::unique_ptr<AttentionBackend>> backends_;
  std::vector<std::pair<std::string, std::string>> aliases_;
};

/// Shorthand for BackendRegistry::global().get(name).
[[nodiscard]] const AttentionBackend& find_backend(std::string_view name);

}  // namespace freezeframe
