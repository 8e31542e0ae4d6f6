#include "memset_nodes.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "freezeframe/core/error.h"

namespace freezeframe {
namespace {

// A memset: `height` rows of `width` elements of `element_size` bytes, `pitch` bytes apart.
__global__ void fill_kernel(void* dst, unsigned value, unsigned element_size, std::size_t width,
                            std::size_t height, std::size_t pitch) {
  const std::size_t total = width * height;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < total;
       i += std::size_t(gridDim.x) * blockDim.x) {
    auto* row = static_cast<std::uint8_t*>(dst) + (i / width) * pitch;
    const std::size_t col = i % width;
    if (element_size == 1) {
      row[col] = static_cast<std::uint8_t>(value);
    } else if (element_size == 2) {
      reinterpret_cast<std::uint16_t*>(row)[col] = static_cast<std::uint16_t>(value);
    } else {
      reinterpret_cast<std::uint32_t*>(row)[col] = value;
    }
  }
}

std::vector<cudaGraphNode_t> nodes_of(cudaGraph_t graph) {
  std::size_t n = 0;
  FF_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) FF_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  return nodes;
}

}  // namespace

int memsets_to_kernels(cudaGraph_t graph) {
  int replaced = 0;
  for (cudaGraphNode_t node : nodes_of(graph)) {
    cudaGraphNodeType type{};
    FF_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeMemset) continue;
    cudaMemsetParams m{};
    FF_CUDA_CHECK(cudaGraphMemsetNodeGetParams(node, &m));
    std::size_t num_in = 0, num_out = 0;
    FF_CUDA_CHECK(cudaGraphNodeGetDependencies(node, nullptr, nullptr, &num_in));
    FF_CUDA_CHECK(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &num_out));
    std::vector<cudaGraphNode_t> in(num_in), out(num_out);
    if (num_in > 0) FF_CUDA_CHECK(cudaGraphNodeGetDependencies(node, in.data(), nullptr, &num_in));
    if (num_out > 0) FF_CUDA_CHECK(cudaGraphNodeGetDependentNodes(node, out.data(), nullptr, &num_out));

    void* dst = m.dst;
    unsigned value = m.value, element_size = m.elementSize;
    std::size_t width = m.width, height = m.height > 0 ? m.height : 1, pitch = m.pitch;
    void* args[] = {&dst, &value, &element_size, &width, &height, &pitch};
    constexpr unsigned kThreads = 256;
    const std::size_t blocks = (width * height + kThreads - 1) / kThreads;
    cudaKernelNodeParams k{};
    k.func = reinterpret_cast<void*>(&fill_kernel);
    k.gridDim = dim3(static_cast<unsigned>(blocks < 1024 ? (blocks > 0 ? blocks : 1) : 1024));
    k.blockDim = dim3(kThreads);
    k.kernelParams = args;
    cudaGraphNode_t fill = nullptr;
    FF_CUDA_CHECK(cudaGraphAddKernelNode(&fill, graph, in.data(), in.size(), &k));
    for (cudaGraphNode_t next : out) FF_CUDA_CHECK(cudaGraphAddDependencies(graph, &fill, &next, nullptr, 1));
    FF_CUDA_CHECK(cudaGraphDestroyNode(node));
    ++replaced;
  }
  return replaced;
}

}  // namespace freezeframe
