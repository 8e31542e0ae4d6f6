#pragma once
// How the tool reports an error: a refusal by its code and message, a bug as an internal error.

#include <exception>
#include <string>

namespace freezeframe::tools {

/// The text the tool prints for `e` after "freezeframe <command>: ". A freezeframe::Error is its
/// code and message, and with `verbose` also the source file and line that threw it. An Error
/// with ErrorCode::kInternal, and any exception that is not an Error, start with
/// "internal error: ", which tells a bug from a refusal (a fuzzer looks for it).
[[nodiscard]] std::string describe_error(const std::exception& e, bool verbose);

}  // namespace freezeframe::tools
