#pragma once
// The subcommands of the freezeframe tool; each takes its own arguments and returns an exit code.
// Each prints its usage for -h and --help; a mistake on its command line throws UsageError
// (arguments.h), which the tool prints with that usage.

#include <span>
#include <string_view>

namespace freezeframe::tools {

using Args = std::span<const std::string_view>;

int run_backends(Args args);
int run_bench(Args args);
int run_capture(Args args);
int run_demo(Args args);
int run_generate(Args args);
int run_inspect(Args args);
int run_plan(Args args);
int run_serve(Args args);
int run_serve_sim(Args args);
int run_tokenize(Args args);

extern const std::string_view kBackendsUsage;
extern const std::string_view kBenchUsage;
extern const std::string_view kCaptureUsage;
extern const std::string_view kDemoUsage;
extern const std::string_view kGenerateUsage;
extern const std::string_view kInspectUsage;
extern const std::string_view kPlanUsage;
extern const std::string_view kServeUsage;
extern const std::string_view kServeSimUsage;
extern const std::string_view kTokenizeUsage;

}  // namespace freezeframe::tools
