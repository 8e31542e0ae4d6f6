// SharedExecutables on the GPU: graphs of one shape share an executable and each launch runs
// its own graph's parameters, in any order; a graph of another shape gets its own executable.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/graphs/shared_executables.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

__global__ void add_kernel(float* data, int n, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += value;
}

__global__ void scale_kernel(float* data, int n, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= value;
}

// The add kernel launched in clusters of two CTAs (a launch attribute, not the kernel's own).
void add_in_clusters(cudaStream_t stream, float* data, int n, float value) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(2 * ((n + 255) / 256));
  config.blockDim = dim3(128);
  config.stream = stream;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 2;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  FF_CUDA_CHECK(cudaLaunchKernelEx(&config, add_kernel, data, n, value));
}

/// `kernels` launches of data[0, n) += value, each over its own grid.
CudaGraph capture_adds(cudaStream_t stream, float* data, int n, float value, int kernels) {
  return capture_graph(stream, [&] {
    for (int k = 0; k < kernels; ++k)
      add_kernel<<<(n + 127) / 128, 128, 0, stream>>>(data, n, value);
  });
}

std::vector<float> read(const DeviceBuffer& buffer, int n) {
  std::vector<float> host(n);
  FF_CUDA_CHECK(cudaMemcpy(host.data(), buffer.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

TEST(SharedExecutables, GraphsOfOneShapeShareAndEachLaunchRunsItsOwnParameters) {
  FF_REQUIRE_GPU();
  const Stream stream = Stream::create();
  constexpr int kMax = 4096;
  DeviceBuffer data(kMax * sizeof(float));
  FF_CUDA_CHECK(cudaMemsetAsync(data.data(), 0, kMax * sizeof(float), stream.get()));
  auto* p = static_cast<float*>(data.data());

  SharedExecutables shared;
  // Sizes 64 … 4096 (other grids), each adding its own value three times.
  const int sizes[] = {64, 512, 1000, 4096};
  std::vector<int> handles;
  for (int i = 0; i < 4; ++i) {
    handles.push_back(
        shared.add(0, capture_adds(stream.get(), p, sizes[i], float(i + 1), 3), stream.get()));
  }
  // Another shape (one kernel) in the same group, and the same shape in another group.
  const int other_shape = shared.add(0, capture_adds(stream.get(), p, 64, 100.f, 1), stream.get());
  const int other_group = shared.add(1, capture_adds(stream.get(), p, 64, 1000.f, 3), stream.get());
  EXPECT_EQ(shared.num_graphs(), 6);
  EXPECT_EQ(shared.num_executables(), 3);

  // Launch out of order, several times, the host keeping no track; the device sums every add.
  const int order[] = {3, 0, 2, 2, 1, 3, 0, 1, 0};
  std::vector<double> expected(kMax, 0.0);
  for (const int i : order) {
    shared.launch(handles[i], stream.get());
    for (int x = 0; x < sizes[i]; ++x) expected[x] += 3.0 * (i + 1);
  }
  shared.launch(other_shape, stream.get());
  shared.launch(other_group, stream.get());
  shared.launch(handles[1], stream.get());
  for (int x = 0; x < 64; ++x) expected[x] += 100.0 + 3000.0;
  for (int x = 0; x < 512; ++x) expected[x] += 3.0 * 2;
  stream.synchronize();
  const std::vector<float> got = read(data, kMax);
  for (int x = 0; x < kMax; ++x) ASSERT_EQ(got[x], expected[x]) << "element " << x;
  EXPECT_GT(shared.updates(), 0);
}

// Graphs of one topology whose kernel nodes run other functions, or the same function in other
// clusters, get executables of their own (CUDA would update one into the other), and each
// launch computes what its own graph says.
TEST(SharedExecutables, GraphsOfOtherKernelsOrClustersDoNotShare) {
  FF_REQUIRE_GPU();
  const Stream stream = Stream::create();
  constexpr int n = 1024;
  DeviceBuffer data(n * sizeof(float));
  auto* p = static_cast<float*>(data.data());
  SharedExecutables shared;
  const int add = shared.add(0, capture_adds(stream.get(), p, n, 1.f, 1), stream.get());
  const int scale =
      shared.add(0,
                 capture_graph(stream.get(),
                               [&] { scale_kernel<<<n / 128, 128, 0, stream.get()>>>(p, n, 3.f); }),
                 stream.get());
  const int clustered =
      shared.add(0, capture_graph(stream.get(), [&] { add_in_clusters(stream.get(), p, n, 5.f); }),
                 stream.get());
  const int add_again = shared.add(0, capture_adds(stream.get(), p, n, 2.f, 1), stream.get());
  EXPECT_EQ(shared.num_graphs(), 4);
  EXPECT_EQ(shared.num_executables(), 3) << "only the two plain adds may share";
  bool differs = false;
  for (const auto& [reason, count] : shared.refusals()) {
    differs |= reason.find("function or cluster shape differs") != std::string::npos;
  }
  EXPECT_TRUE(differs) << "the refusals name the kernels that differ";

  FF_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), stream.get()));
  // ((0 + 1) · 3 + 5 + 2) · 3 + 1 = 31.
  for (const int g : {add, scale, clustered, add_again, scale, add}) shared.launch(g, stream.get());
  stream.synchronize();
  for (const float v : read(data, n)) ASSERT_EQ(v, 31.f);
}

TEST(SharedExecutables, RelaunchingTheHeldGraphNeedsNoUpdate) {
  FF_REQUIRE_GPU();
  const Stream stream = Stream::create();
  DeviceBuffer data(256 * sizeof(float));
  FF_CUDA_CHECK(cudaMemsetAsync(data.data(), 0, 256 * sizeof(float), stream.get()));
  SharedExecutables shared;
  const int a = shared.add(
      0, capture_adds(stream.get(), static_cast<float*>(data.data()), 256, 1.f, 2), stream.get());
  const long long after_add = shared.updates();
  for (int i = 0; i < 5; ++i) shared.launch(a, stream.get());
  EXPECT_EQ(shared.updates(), after_add);
  stream.synchronize();
  for (const float v : read(data, 256)) ASSERT_EQ(v, 10.f);
}

}  // namespace
}  // namespace freezeframe
