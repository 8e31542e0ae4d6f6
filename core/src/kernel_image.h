#pragma once
// Whether the device can run this build's kernels, asked of a kernel that does nothing.

namespace freezeframe::detail {

/// cudaFuncGetAttributes on a trivial kernel compiled like every other one of the build, on
/// the current device: cudaErrorNoKernelImageForDevice (or cudaErrorInvalidDeviceFunction)
/// when the build holds neither code nor PTX the device can run.
[[nodiscard]] int probe_kernel_image();

}  // namespace freezeframe::detail
