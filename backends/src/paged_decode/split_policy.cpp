#include "paged_decode/split_policy.h"

#include <cuda_runtime_api.h>

#include "freezeframe/core/device.h"

namespace freezeframe {

DecodeSplitPolicy DecodeSplitPolicy::for_current_device() {
  DecodeSplitPolicy policy;
  if (!has_gpu()) return policy;
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
      sms > 0) {
    policy.sm_count = sms;
  }
  return policy;
}

DecodeSplitPolicy DecodeSplitPolicy::for_device(const DeviceProperties& device) {
  DecodeSplitPolicy policy;
  policy.sm_count = device.sm_count;
  return policy;
}

}  // namespace freezeframe
