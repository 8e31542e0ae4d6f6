// capture_graph on the GPU: a capture whose work allocates stream-ordered memory fails with
// an error naming the allocation, and the stream is usable afterwards.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/error.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

__global__ void set_kernel(int* data, int value) { *data = value; }

TEST(CaptureGraph, WorkThatAllocatesIsRefusedAndTheStreamStaysUsable) {
  FF_REQUIRE_GPU();
  const Stream stream = Stream::create();
  DeviceBuffer out(sizeof(int));
  auto* result = static_cast<int*>(out.data());
  try {
    (void)capture_graph(stream.get(), [&] {
      void* scratch = nullptr;
      FF_CUDA_CHECK(cudaMallocAsync(&scratch, 1 << 20, stream.get()));
      set_kernel<<<1, 1, 0, stream.get()>>>(static_cast<int*>(scratch), 1);
      FF_CUDA_CHECK(cudaFreeAsync(scratch, stream.get()));
    });
    FAIL() << "a capture that allocates was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allocated device memory (1 stream-ordered allocations, 1048576 bytes)"),
              std::string::npos) << e.what();
  }
  // The same stream captures and runs a graph that does not allocate.
  const CudaGraph graph = capture_graph(stream.get(), [&] { set_kernel<<<1, 1, 0, stream.get()>>>(result, 42); });
  EXPECT_EQ(allocation_nodes(graph).count, 0);
  const GraphExec exec(graph);
  exec.launch(stream.get());
  stream.synchronize();
  int host = 0;
  FF_CUDA_CHECK(cudaMemcpy(&host, result, sizeof host, cudaMemcpyDeviceToHost));
  EXPECT_EQ(host, 42);
}

}  // namespace
}  // namespace freezeframe
