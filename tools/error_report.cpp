#include "error_report.h"

#include "freezeframe/base/error.h"

namespace freezeframe::tools {

std::string describe_error(const std::exception& e, bool verbose) {
  const auto* error = dynamic_cast<const Error*>(&e);
  if (error == nullptr) return detail::concat("internal error: ", e.what());
  if (verbose) return e.what();  // "code: message (file:line)"
  std::string text = detail::concat(to_string(error->code()), ": ", error->message());
  if (error->code() == ErrorCode::kInternal) {
    text += " (a bug in Freezeframe; freezeframe --verbose names the source line)";
  }
  return text;
}

}  // namespace freezeframe::tools
