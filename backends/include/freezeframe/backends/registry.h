#pragma once
// The backend registry: backends are found by name. The built-in backends are registered on
// first use; embedders may add their own.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/backends/backend.h"

namespace freezeframe {

class BackendRegistry {
 public:
  /// The process-wide registry, holding the built-in backends.
  static BackendRegistry& global();

  /// Adds a backend; a second backend with the same name is an error.
  void add(std::unique_ptr<AttentionBackend> backend);
  /// The backend called `name`; an unknown name throws kNotFound listing the known ones.
  [[nodiscard]] const AttentionBackend& get(std::string_view name) const;
  [[nodiscard]] bool contains(std::string_view name) const;
  /// Registered names, sorted.
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<AttentionBackend>> backends_;
};

/// Shorthand for BackendRegistry::global().get(name).
[[nodiscard]] const AttentionBackend& find_backend(std::string_view name);

}  // namespace freezeframe
