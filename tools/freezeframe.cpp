// freezeframe: the command-line tool.

#include <cstdio>
#include <exception>
#include <string_view>
#include <vector>

#include "commands.h"
#include "freezeframe/core/error.h"

namespace {

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(freezeframe::tools::Args);
};

constexpr Command kCommands[] = {
    {"backends", "list the registered attention backends and their capabilities",
     freezeframe::tools::run_backends},
    {"bench", "decode-step latency per batch size: eager, piecewise and full graphs (GPU)",
     freezeframe::tools::run_bench},
    {"capture", "capture every graph of a spec; per descriptor nodes and times, graph memory (GPU)",
     freezeframe::tools::run_capture},
    {"demo", "run one reference attention forward (GPU if present, else the host reference)",
     freezeframe::tools::run_demo},
    {"plan", "print the static memory plan of a spec (no GPU needed); JSON and SVG on request",
     freezeframe::tools::run_plan},
    {"serve-sim", "replay a request trace through the batcher and graph dispatcher of a spec",
     freezeframe::tools::run_serve_sim},
};

void usage(std::FILE* out) {
  std::fprintf(out, "usage: freezeframe <command> [args]\n\ncommands:\n");
  for (const Command& c : kCommands) {
    std::fprintf(out, "  %-10.*s %.*s\n", int(c.name.size()), c.name.data(), int(c.summary.size()),
                 c.summary.data());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string_view name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    usage(stdout);
    return 0;
  }
  std::vector<std::string_view> args(argv + 2, argv + argc);
  for (const Command& c : kCommands) {
    if (c.name != name) continue;
    try {
      return c.run(args);
    } catch (const freezeframe::Error& e) {
      std::fprintf(stderr, "freezeframe %s: %s\n", argv[1], e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "freezeframe %s: %s\n", argv[1], e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "freezeframe: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
