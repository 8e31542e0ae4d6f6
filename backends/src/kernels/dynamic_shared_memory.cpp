#include "kernels/dynamic_shared_memory.h"

#include <mutex>
#include <set>
#include <tuple>

#include "freezeframe/core/cuda_check.h"

namespace freezeframe::kernels {

void allow_dynamic_shared_memory(const void* kernel, int bytes) {
  int device = 0;
  FF_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::set<std::tuple<const void*, int, int>> done;
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.contains({kernel, device, bytes})) return;
  FF_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.insert({kernel, device, bytes});
}

}  // namespace freezeframe::kernels
