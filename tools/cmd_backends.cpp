// freezeframe backends: what each registered backend can do.

#include <cstdio>
#include <string>

#include "arguments.h"
#include "commands.h"
#include "freezeframe/backends/registry.h"

namespace freezeframe::tools {

const std::string_view kBackendsUsage =
    "usage: freezeframe backends\n"
    "  lists the registered attention backends: MLA or not, CUDA graph support, whether they\n"
    "  write into a preallocated output buffer, KV cache dtypes and head sizes; and the\n"
    "  aliases (older names specs may still use)\n";

int run_backends(Args args) {
  for (const std::string_view a : args) {
    if (is_help(a)) {
      std::printf("%.*s", int(kBackendsUsage.size()), kBackendsUsage.data());
      return 0;
    }
    refuse(a);
  }
  const BackendRegistry& registry = BackendRegistry::global();
  std::printf("%-16s %-4s %-28s %-9s %-22s %s\n", "backend", "mla", "cuda graphs", "out buf",
              "kv cache dtypes", "head sizes");
  for (const std::string& name : registry.names()) {
    const AttentionBackend& b = registry.get(name);
    std::string dtypes, sizes;
    for (DType d : b.supported_kv_cache_dtypes()) {
      if (!dtypes.empty()) dtypes += ',';
      dtypes += name_of(d);
    }
    for (int s : b.supported_head_sizes()) {
      if (!sizes.empty()) sizes += ',';
      sizes += std::to_string(s);
    }
    std::printf("%-16s %-4s %-28.*s %-9s %-22s %s\n", name.c_str(), b.is_mla() ? "yes" : "no",
                int(to_string(b.graph_support()).size()), to_string(b.graph_support()).data(),
                b.accept_output_buffer() ? "yes" : "no", dtypes.c_str(), sizes.c_str());
  }
  for (const auto& [alias, name] : registry.aliases()) {
    std::printf("%s is another name of %s\n", alias.c_str(), name.c_str());
  }
  return 0;
}

}  // namespace freezeframe::tools
