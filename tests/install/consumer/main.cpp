// The smallest outside user of an installed Freezeframe: list the backends.
#include <cstdio>

#include "freezeframe/backends/registry.h"

int main() {
  for (const auto& name : freezeframe::BackendRegistry::global().names()) {
    std::printf("%s\n", name.c_str());
  }
  return 0;
}
