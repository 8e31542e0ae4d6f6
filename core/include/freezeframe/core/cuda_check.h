#pragma once
// Checks of CUDA runtime calls: a failure throws freezeframe::Error (kCudaError, or
// kOutOfMemory for a failed allocation) naming the statement, file and line; destructors use
// the warn-only variant because they must never throw.

#include <cuda_runtime_api.h>

#include "freezeframe/base/error.h"

namespace freezeframe::detail {
[[noreturn]] void throw_cuda_error(int status, const char* statement, const char* file, int line);
void warn_cuda_error(int status, const char* statement, const char* file, int line);
}  // namespace freezeframe::detail

/// Checks a CUDA runtime call; the exception names the statement, file and line.
#define FF_CUDA_CHECK(statement)                                                                  \
  do {                                                                                            \
    const auto ff_status_ = (statement);                                                          \
    if (ff_status_ != 0) {                                                                        \
      ::freezeframe::detail::throw_cuda_error(static_cast<int>(ff_status_), #statement, __FILE__, \
                                              __LINE__);                                          \
    }                                                                                             \
  } while (0)

/// Like FF_CUDA_CHECK but only prints: for destructors and other no-throw paths.
#define FF_CUDA_WARN(statement)                                                                  \
  do {                                                                                           \
    const auto ff_status_ = (statement);                                                         \
    if (ff_status_ != 0) {                                                                       \
      ::freezeframe::detail::warn_cuda_error(static_cast<int>(ff_status_), #statement, __FILE__, \
                                             __LINE__);                                          \
    }                                                                                            \
  } while (0)

/// After a kernel launch: reports launch-configuration errors without synchronising.
#define FF_CHECK_LAUNCH() FF_CUDA_CHECK(cudaGetLastError())
