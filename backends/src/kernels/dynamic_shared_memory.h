#pragma once
// Raising a kernel's dynamic shared memory limit above the 48 KiB default, once per kernel and
// device: the attribute sticks to the kernel, so steps after the first skip the driver call.

#include <cuda_runtime_api.h>

namespace freezeframe::kernels {

/// Allows `kernel` `bytes` of dynamic shared memory on the current device (the first call for
/// a (kernel, device, bytes) sets the attribute; later ones return at once). Thread-safe.
void allow_dynamic_shared_memory(const void* kernel, int bytes);

}  // namespace freezeframe::kernels
