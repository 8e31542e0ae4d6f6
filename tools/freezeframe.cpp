// freezeframe: the command-line tool.

#include <cstdio>
#include <exception>
#include <string_view>
#include <vector>

#include "arguments.h"
#include "commands.h"
#include "error_report.h"

namespace {

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(freezeframe::tools::Args);
  const std::string_view* usage;  // the command's own, printed after a usage error
};

constexpr Command kCommands[] = {
    {"backends", "list the registered attention backends and their capabilities",
     freezeframe::tools::run_backends, &freezeframe::tools::kBackendsUsage},
    {"bench", "decode-step latency per batch size: eager, piecewise and full graphs (GPU)",
     freezeframe::tools::run_bench, &freezeframe::tools::kBenchUsage},
    {"capture", "capture every graph of a spec; per descriptor nodes and times, graph memory (GPU)",
     freezeframe::tools::run_capture, &freezeframe::tools::kCaptureUsage},
    {"demo", "run one reference attention forward (GPU if present, else the host reference)",
     freezeframe::tools::run_demo, &freezeframe::tools::kDemoUsage},
    {"generate", "continue a prompt with a checkpoint's model, its tokens drawn on the GPU (GPU)",
     freezeframe::tools::run_generate, &freezeframe::tools::kGenerateUsage},
    {"inspect", "what a checkpoint holds as the engine reads it; --verify reads it all (no GPU)",
     freezeframe::tools::run_inspect, &freezeframe::tools::kInspectUsage},
    {"plan", "print the static memory plan of a spec (no GPU needed); JSON and SVG on request",
     freezeframe::tools::run_plan, &freezeframe::tools::kPlanUsage},
#ifdef FREEZEFRAME_HAS_SERVER
    {"serve", "an OpenAI-compatible HTTP server over a checkpoint's model (GPU)",
     freezeframe::tools::run_serve, &freezeframe::tools::kServeUsage},
#endif
    {"serve-sim", "replay a request trace through the batcher and graph dispatcher of a spec",
     freezeframe::tools::run_serve_sim, &freezeframe::tools::kServeSimUsage},
    {"tokenize", "encode a text with a checkpoint's tokenizer: ids and pieces (no GPU needed)",
     freezeframe::tools::run_tokenize, &freezeframe::tools::kTokenizeUsage},
};

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: freezeframe [--verbose] <command> [args]\n"
               "       freezeframe --version\n"
               "  --verbose  errors also name the source file and line that raised them\n\n"
               "commands:\n");
  for (const Command& c : kCommands) {
    std::fprintf(out, "  %-10.*s %.*s\n", int(c.name.size()), c.name.data(), int(c.summary.size()),
                 c.summary.data());
  }
  std::fprintf(out, "\n'freezeframe <command> --help' shows a command's options\n");
}

}  // namespace

// Exit codes: 0 done, 1 an error (a refusal, or "internal error: " for a bug), 2 a mistake on
// the command line.
int main(int argc, char** argv) {
  int first = 1;
  const bool verbose = argc > first && std::string_view(argv[first]) == "--verbose";
  if (verbose) ++first;
  if (argc <= first) {
    usage(stderr);
    return 2;
  }
  const std::string_view name = argv[first];
  if (name == "-h" || name == "--help" || name == "help") {
    usage(stdout);
    return 0;
  }
  if (name == "--version" || name == "version") {
    std::printf("freezeframe %s\n", FREEZEFRAME_VERSION);
    return 0;
  }
  std::vector<std::string_view> args(argv + first + 1, argv + argc);
  for (const Command& c : kCommands) {
    if (c.name != name) continue;
    try {
      return c.run(args);
    } catch (const freezeframe::tools::UsageError& e) {
      std::fprintf(stderr, "freezeframe %s: %s\n\n%.*s", argv[first], e.what(),
                   int(c.usage->size()), c.usage->data());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "freezeframe %s: %s\n", argv[first],
                   freezeframe::tools::describe_error(e, verbose).c_str());
      return 1;
    } catch (...) {
      std::fprintf(stderr, "freezeframe %s: internal error: an exception of unknown type\n",
                   argv[first]);
      return 1;
    }
  }
  std::fprintf(stderr, "freezeframe: unknown command '%s'\n\n", argv[first]);
  usage(stderr);
  return 2;
}
