#pragma once
// The subcommands of the freezeframe tool; each takes its own arguments and returns an exit code.

#include <span>
#include <string_view>

namespace freezeframe::tools {

using Args = std::span<const std::string_view>;

int run_backends(Args args);
int run_bench(Args args);
int run_capture(Args args);
int run_demo(Args args);
int run_plan(Args args);
int run_serve_sim(Args args);

}  // namespace freezeframe::tools
