#pragma once
// A device tensor for tests: a DeviceBuffer with the view of a HostTensor's shape, and copies
// both ways (synchronous: tests are not the steady state).

#include <cstdint>
#include <vector>

#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/host_tensor.h"

namespace freezeframe::testing {

struct DeviceTensor {
  DeviceBuffer buffer;
  TensorView view;
};

/// A device copy of `host` (same dtype and shape).
[[nodiscard]] DeviceTensor upload(const HostTensor& host);
/// Copies `device` back into `host` (same byte size).
void download(const TensorView& device, HostTensor& host);
/// The bytes `device` spans, for comparing outputs bit for bit.
[[nodiscard]] std::vector<std::uint8_t> device_bytes(const TensorView& device);

}  // namespace freezeframe::testing
