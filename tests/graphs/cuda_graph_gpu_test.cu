// capture_graph on the GPU: a capture whose work allocates stream-ordered memory fails with
// an error naming the allocation, and the stream is usable afterwards. Event::record_external
// inside a capture puts an event record node in the graph, which each replay records.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

__global__ void set_kernel(int* data, int value) { *data = value; }
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

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
    EXPECT_NE(std::string(e.what()).find(
                  "allocated device memory (1 stream-ordered allocations, 1048576 bytes)"),
              std::string::npos)
        << e.what();
  }
  // The same stream captures and runs a graph that does not allocate.
  const CudaGraph graph =
      capture_graph(stream.get(), [&] { set_kernel<<<1, 1, 0, stream.get()>>>(result, 42); });
  EXPECT_EQ(allocation_nodes(graph).count, 0);
  const GraphExec exec(graph);
  exec.launch(stream.get());
  stream.synchronize();
  int host = 0;
  FF_CUDA_CHECK(cudaMemcpy(&host, result, sizeof host, cudaMemcpyDeviceToHost));
  EXPECT_EQ(host, 42);
}

TEST(EventRecordExternal, ReplaysRecordTheEventWhereItWasCaptured) {
  FF_REQUIRE_GPU();
  const Stream stream = Stream::create();
  DeviceBuffer out(sizeof(int));
  auto* result = static_cast<int*>(out.data());
  Event done;
  done.record_external(stream.get());  // outside a capture: a plain record
  const CudaGraph graph = capture_graph(stream.get(), [&] {
    set_kernel<<<1, 1, 0, stream.get()>>>(result, 7);
    done.record_external(stream.get());
    spin_kernel<<<1, 1, 0, stream.get()>>>(400'000'000);  // about 0.2 s
  });
  std::size_t count = 0;
  FF_CUDA_CHECK(cudaGraphGetNodes(graph.get(), nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  FF_CUDA_CHECK(cudaGraphGetNodes(graph.get(), nodes.data(), &count));
  int records = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    FF_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    records += type == cudaGraphNodeTypeEventRecord;
  }
  EXPECT_EQ(records, 1);

  FF_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(int), stream.get()));
  stream.synchronize();
  const GraphExec exec(graph);
  exec.launch(stream.get());
  done.synchronize();  // returns while the graph still spins
  EXPECT_EQ(cudaStreamQuery(stream.get()), cudaErrorNotReady);
  int value = 0;
  FF_CUDA_CHECK(cudaMemcpy(&value, result, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(value, 7);
  stream.synchronize();
}

}  // namespace
}  // namespace freezeframe
