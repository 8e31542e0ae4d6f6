// core/device: what a user without a usable GPU is told, and the start-up check against the
// build's architectures. Every case runs without a GPU: the messages are built from fake
// statuses, and require_usable_gpu() is checked against what this machine has.

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <string>

#include "freezeframe/base/error.h"
#include "freezeframe/core/device.h"

namespace freezeframe {
namespace {

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

TEST(Device, NoDriverIsToldApartFromAnOldOne) {
  // CUDA says "driver version is insufficient" in both cases; only the driver version differs.
  const std::string none = describe_no_gpu(cudaErrorInsufficientDriver, 0, 13000);
  EXPECT_EQ(none.rfind("no CUDA driver found (is the NVIDIA driver installed?)", 0), 0u) << none;
  EXPECT_TRUE(contains(none, "cudaErrorInsufficientDriver")) << none;  // CUDA's words as detail

  const std::string old = describe_no_gpu(cudaErrorInsufficientDriver, 12020, 13000);
  EXPECT_EQ(old.rfind("the NVIDIA driver is too old", 0), 0u) << old;
  EXPECT_TRUE(contains(old, "CUDA 12.2")) << old;
  EXPECT_TRUE(contains(old, "needs 13.0")) << old;
  EXPECT_FALSE(contains(old, "no CUDA driver found")) << old;
}

TEST(Device, NoDeviceAndOtherFailuresSaySo) {
  const std::string none = describe_no_gpu(cudaErrorNoDevice, 13000, 13000);
  EXPECT_EQ(none.rfind("no CUDA GPU found", 0), 0u) << none;
  const std::string mismatch = describe_no_gpu(cudaErrorSystemDriverMismatch, 13000, 13000);
  EXPECT_TRUE(contains(mismatch, "kernel module")) << mismatch;
  const std::string other = describe_no_gpu(cudaErrorOperatingSystem, 13000, 13000);
  EXPECT_EQ(other.rfind("no usable CUDA GPU", 0), 0u) << other;
  EXPECT_TRUE(contains(other, "cudaErrorOperatingSystem")) << other;
}

TEST(Device, MissingKernelImageNamesDeviceBuildAndRebuild) {
  EXPECT_EQ(built_cuda_architectures(), FREEZEFRAME_EXPECTED_CUDA_ARCHITECTURES);
  const std::string m =
      describe_no_kernel_image("NVIDIA A100-SXM4-80GB", 8, 0, cudaErrorNoKernelImageForDevice);
  EXPECT_TRUE(contains(m, "NVIDIA A100-SXM4-80GB (sm_80)")) << m;
  EXPECT_TRUE(contains(m, "CUDA architectures " + std::string(built_cuda_architectures()))) << m;
  EXPECT_TRUE(contains(m, "-DCMAKE_CUDA_ARCHITECTURES=80")) << m;
  EXPECT_TRUE(contains(m, "cudaErrorNoKernelImageForDevice")) << m;
  const std::string blackwell = describe_no_kernel_image("NVIDIA B200", 10, 0, 209);
  EXPECT_TRUE(contains(blackwell, "(sm_100)")) << blackwell;
  EXPECT_TRUE(contains(blackwell, "-DCMAKE_CUDA_ARCHITECTURES=100")) << blackwell;
}

TEST(Device, RequireUsableGpuRefusesWithTheProbesReason) {
  if (has_gpu()) {
    // A GPU this build was made for: the check passes (it fails, with the rebuild command,
    // on a GPU of another architecture; that is what it is for).
    EXPECT_NO_THROW(require_usable_gpu()) << gpu_status();
    return;
  }
  try {
    require_usable_gpu();
    FAIL() << "require_usable_gpu() did not throw without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_EQ(e.message(), gpu_status());
    // Ours first; CUDA's words (which say "insufficient" when there is no driver at all) only
    // as detail in brackets after it.
    const std::string ours = e.message().substr(0, e.message().find(" ["));
    EXPECT_FALSE(ours.empty()) << e.message();
    EXPECT_FALSE(contains(ours, "insufficient")) << e.message();
  }
}

}  // namespace
}  // namespace freezeframe
