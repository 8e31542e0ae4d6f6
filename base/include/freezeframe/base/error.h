#pragma once
// Error reporting for the whole library: one exception type carrying a canonical code, the
// failed check, and the file and line. User mistakes and CUDA failures both throw it (CUDA
// calls are checked by freezeframe/core/cuda_check.h, which builds on this).

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace freezeframe {

enum class ErrorCode {
  kInvalidArgument,  ///< the caller passed something wrong (shape, dtype, value)
  kUnsupported,      ///< valid, but this backend/build cannot do it
  kNotFound,         ///< a name that is not registered
  kOutOfMemory,      ///< an allocation or a plan that does not fit
  kCudaError,        ///< a CUDA runtime / library call failed
  kInternal,         ///< a broken invariant: a bug in Freezeframe
};

std::string_view to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message, const char* file, int line);

  [[nodiscard]] ErrorCode code() const { return code_; }
  /// The message without the code and location prefix.
  [[nodiscard]] const std::string& message() const { return message_; }
  [[nodiscard]] const char* file() const { return file_; }
  [[nodiscard]] int line() const { return line_; }

 private:
  ErrorCode code_;
  std::string message_;
  const char* file_;
  int line_;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

}  // namespace freezeframe

/// Throws freezeframe::Error(code, message) unless `cond` holds. Message parts are streamed.
#define FF_CHECK(cond, code, ...)                                                              \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      throw ::freezeframe::Error((code), ::freezeframe::detail::concat(__VA_ARGS__), __FILE__, \
                                 __LINE__);                                                    \
    }                                                                                          \
  } while (0)

/// Throws freezeframe::Error(code, message) unconditionally.
#define FF_THROW(code, ...) \
  throw ::freezeframe::Error((code), ::freezeframe::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
