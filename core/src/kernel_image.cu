#include <cuda_runtime_api.h>

#include "kernel_image.h"

namespace freezeframe::detail {
namespace {
__global__ void empty_kernel() {}
}  // namespace

int probe_kernel_image() {
  cudaFuncAttributes attributes{};
  // Loads the kernel's module (also under lazy loading), which is where a missing image shows.
  return static_cast<int>(cudaFuncGetAttributes(&attributes, empty_kernel));
}

}  // namespace freezeframe::detail
