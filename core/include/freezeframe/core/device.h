#pragma once
// Device discovery that never throws: lets every binary run (and GPU tests skip) on machines
// without a GPU.

#include <string>

namespace freezeframe {

/// True when the CUDA runtime finds at least one usable device.
[[nodiscard]] bool has_gpu();
/// Why has_gpu() is false ("no CUDA driver", "no device", ...), or the device name when true.
[[nodiscard]] std::string gpu_status();

}  // namespace freezeframe
