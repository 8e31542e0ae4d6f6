#include "freezeframe/core/cuda_check.h"

#include <cstdio>

namespace freezeframe {

namespace detail {

void throw_cuda_error(int status, const char* statement, const char* file, int line) {
  const auto error = static_cast<cudaError_t>(status);
  const ErrorCode code =
      error == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kCudaError;
  throw Error(
      code,
      concat(statement, " failed: ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"),
      file, line);
}

void warn_cuda_error(int status, const char* statement, const char* file, int line) {
  const auto error = static_cast<cudaError_t>(status);
  std::fprintf(stderr, "freezeframe warning: %s failed: %s (%s:%d)\n", statement,
               cudaGetErrorName(error), file, line);
}

}  // namespace detail

}  // namespace freezeframe
