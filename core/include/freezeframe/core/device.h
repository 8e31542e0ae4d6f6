#pragma once
// Device discovery that never throws: lets every binary run (and GPU tests skip) on machines
// without a GPU. require_usable_gpu() is the one check that throws, for code about to run
// kernels.

#include <string>
#include <string_view>

namespace freezeframe {

/// True when the CUDA runtime finds at least one usable device.
[[nodiscard]] bool has_gpu();
/// Why has_gpu() is false ("no CUDA driver found ...", "no CUDA GPU found", ...), or the device
/// name when true.
[[nodiscard]] std::string gpu_status();

/// Throws Error(kUnsupported) unless the current device can run this build's kernels: when there
/// is no driver or no GPU (gpu_status() as the message), or when the build holds no code for the
/// device's architecture (naming the device, the architectures built and how to rebuild).
/// Everything that launches kernels calls it first, so a mismatch is one clear error instead
/// of a failed launch deep inside.
void require_usable_gpu();

/// The CUDA architectures the build was compiled for, as CMAKE_CUDA_ARCHITECTURES gave them,
/// comma-separated: "90", "80,90".
[[nodiscard]] std::string_view built_cuda_architectures();

/// gpu_status() when cudaGetDeviceCount failed with `status`; `driver_version` and
/// `runtime_version` as cudaDriverGetVersion (0 when no driver is installed) and
/// cudaRuntimeGetVersion give them. Apart from the probe so that every case is testable
/// without a GPU.
[[nodiscard]] std::string describe_no_gpu(int status, int driver_version, int runtime_version);
/// require_usable_gpu()'s message for a device of compute capability major.minor that the
/// build has no code for (`status`: what CUDA said when asked for a kernel).
[[nodiscard]] std::string describe_no_kernel_image(std::string_view device_name, int major,
                                                   int minor, int status);

}  // namespace freezeframe
