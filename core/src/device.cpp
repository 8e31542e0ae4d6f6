#include "freezeframe/core/device.h"

#include <cuda_runtime_api.h>

namespace freezeframe {

namespace {
struct Probe {
  bool ok = false;
  std::string status;
};

const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later calls start clean
      p.status = std::string("no usable CUDA device: ") + cudaGetErrorString(error);
      return p;
    }
    if (count == 0) {
      p.status = "no CUDA device present";
      return p;
    }
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
      cudaGetLastError();
      p.status = "CUDA device 0 could not be queried";
      return p;
    }
    p.ok = true;
    p.status = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
               std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) +
               " SMs)";
    return p;
  }();
  return result;
}
}  // namespace

bool has_gpu() { return probe().ok; }
std::string gpu_status() { return probe().status; }

}  // namespace freezeframe
