#include "support/device_tensor.h"

#include "freezeframe/core/cuda_check.h"

namespace freezeframe::testing {

DeviceTensor upload(const HostTensor& host) {
  DeviceTensor t{DeviceBuffer(host.bytes()), {}};
  FF_CUDA_CHECK(cudaMemcpy(t.buffer.data(), host.data(), host.bytes(), cudaMemcpyHostToDevice));
  t.view = TensorView(t.buffer.data(), host.dtype(), host.shape(), Device::cuda());
  return t;
}

void download(const TensorView& device, HostTensor& host) {
  FF_CHECK(static_cast<std::size_t>(device.span_bytes()) == host.bytes(),
           ErrorCode::kInvalidArgument, "download: device view ", device.describe(),
           " and host tensor differ in size");
  FF_CUDA_CHECK(cudaMemcpy(host.data(), device.data(), host.bytes(), cudaMemcpyDeviceToHost));
}

std::vector<std::uint8_t> device_bytes(const TensorView& device) {
  std::vector<std::uint8_t> host(static_cast<std::size_t>(device.span_bytes()));
  FF_CUDA_CHECK(cudaMemcpy(host.data(), device.data(), host.size(), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace freezeframe::testing
