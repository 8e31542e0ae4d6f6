#include "freezeframe/base/error.h"

namespace freezeframe {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kOutOfMemory: return "out of memory";
    case ErrorCode::kCudaError: return "CUDA error";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

namespace {
std::string format_what(ErrorCode code, const std::string& message, const char* file, int line) {
  return detail::concat(to_string(code), ": ", message, " (", file, ":", line, ")");
}
}  // namespace

Error::Error(ErrorCode code, std::string message, const char* file, int line)
    : std::runtime_error(format_what(code, message, file, line)),
      code_(code),
      message_(std::move(message)),
      file_(file),
      line_(line) {}

}  // namespace freezeframe
