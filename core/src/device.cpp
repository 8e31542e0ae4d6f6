#include "freezeframe/core/device.h"

#include <cuda_runtime_api.h>

#include "freezeframe/core/cuda_check.h"
#include "kernel_image.h"

#ifndef FREEZEFRAME_CUDA_ARCHITECTURES
#error "core/CMakeLists.txt defines FREEZEFRAME_CUDA_ARCHITECTURES (CMAKE_CUDA_ARCHITECTURES)"
#endif

namespace freezeframe {

namespace {
struct Probe {
  bool ok = false;
  std::string status;
};

/// "12.4" from CUDA's 12040.
std::string cuda_version(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

/// CUDA's own words for `status`, as detail after our message.
std::string cuda_detail(int status) {
  const auto error = static_cast<cudaError_t>(status);
  return detail::concat(" [", cudaGetErrorName(error), ": ", cudaGetErrorString(error), "]");
}

const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later calls start clean
      int driver = 0, runtime = 0;
      if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
      if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
      cudaGetLastError();
      p.status = describe_no_gpu(error, driver, runtime);
      return p;
    }
    if (count == 0) {
      p.status = "no CUDA GPU found";
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

std::string_view built_cuda_architectures() { return FREEZEFRAME_CUDA_ARCHITECTURES; }

std::string describe_no_gpu(int status, int driver_version, int runtime_version) {
  switch (static_cast<cudaError_t>(status)) {
    case cudaErrorInsufficientDriver:
      // CUDA says "insufficient" also when there is no driver at all; the version tells apart.
      if (driver_version == 0) {
        return "no CUDA driver found (is the NVIDIA driver installed?)" + cuda_detail(status);
      }
      return detail::concat("the NVIDIA driver is too old: it supports CUDA ",
                            cuda_version(driver_version), ", this build needs ",
                            cuda_version(runtime_version), " (update the driver)",
                            cuda_detail(status));
    case cudaErrorNoDevice: return "no CUDA GPU found" + cuda_detail(status);
    case cudaErrorSystemDriverMismatch:
      return "the NVIDIA driver's kernel module and library differ in version (reboot, or "
             "reinstall the driver)" +
             cuda_detail(status);
    default: return "no usable CUDA GPU" + cuda_detail(status);
  }
}

std::string describe_no_kernel_image(std::string_view device_name, int major, int minor,
                                     int status) {
  const std::string arch = std::to_string(major) + std::to_string(minor);
  return detail::concat(device_name, " (sm_", arch,
                        ") cannot run this build: it holds code for CUDA architectures ",
                        built_cuda_architectures(),
                        " only; rebuild for this GPU: cmake --preset release "
                        "-DCMAKE_CUDA_ARCHITECTURES=",
                        arch, " && cmake --build --preset release", cuda_detail(status));
}

void require_usable_gpu() {
  FF_CHECK(has_gpu(), ErrorCode::kUnsupported, gpu_status());
  const auto status = static_cast<cudaError_t>(detail::probe_kernel_image());
  if (status == cudaSuccess) return;
  cudaGetLastError();  // not sticky: the context stays usable
  int device = 0;
  FF_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  FF_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (status == cudaErrorNoKernelImageForDevice || status == cudaErrorInvalidDeviceFunction) {
    FF_THROW(ErrorCode::kUnsupported,
             describe_no_kernel_image(prop.name, prop.major, prop.minor, status));
  }
  if (status == cudaErrorUnsupportedPtxVersion) {
    // Only PTX fits the device, and the driver cannot compile PTX of this toolkit.
    FF_THROW(ErrorCode::kUnsupported, prop.name, " (sm_", prop.major, prop.minor,
             "): the NVIDIA driver is too old to compile this build's PTX; update the driver, "
             "or rebuild with -DCMAKE_CUDA_ARCHITECTURES=",
             prop.major, prop.minor, cuda_detail(status));
  }
  detail::throw_cuda_error(status, "cudaFuncGetAttributes(<a trivial kernel>)", __FILE__, __LINE__);
}

}  // namespace freezeframe
