// The smallest outside user of an installed Freezeframe: list the backends.
#include <cstdio>

#include "freezeframe/backends/registry.h"
#include "freezeframe/engine.h"

// The project sets no C++ standard: this one comes from freezeframe::engine.
static_assert(__cplusplus >= 202002L, "freezeframe::engine must require C++20 of its users");

int main() {
  for (const auto& name : freezeframe::BackendRegistry::global().names()) {
    std::printf("%s\n", name.c_str());
  }
  return 0;
}
