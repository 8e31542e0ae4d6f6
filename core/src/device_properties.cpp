#include "freezeframe/core/device_properties.h"

#include <cuda_runtime_api.h>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/device.h"

namespace freezeframe {

DeviceProperties current_device_properties() {
  FF_CHECK(has_gpu(), ErrorCode::kUnsupported,
           "no CUDA GPU to read properties from: ", gpu_status());
  int device = 0;
  FF_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  FF_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceProperties p;
  p.name = prop.name;
  p.sm_count = prop.multiProcessorCount;
  p.compute_capability = prop.major * 10 + prop.minor;
  p.total_memory = static_cast<std::int64_t>(prop.totalGlobalMem);
  return p;
}

}  // namespace freezeframe
