#include "freezeframe/graphs/shared_executables.h"

#include <cuda.h>

#include <string>

#include "freezeframe/core/cuda_check.h"

namespace freezeframe {
namespace {

std::string reason_of(cudaGraphExecUpdateResult result) {
  switch (result) {
    case cudaGraphExecUpdateErrorTopologyChanged: return "topology changed";
    case cudaGraphExecUpdateErrorNodeTypeChanged: return "node type changed";
    case cudaGraphExecUpdateErrorFunctionChanged: return "function changed";
    case cudaGraphExecUpdateErrorParametersChanged: return "parameters changed";
    case cudaGraphExecUpdateErrorNotSupported: return "not supported";
    case cudaGraphExecUpdateErrorUnsupportedFunctionChange: return "unsupported function change";
    case cudaGraphExecUpdateErrorAttributesChanged: return "attributes changed";
    default: return "refused (" + std::to_string(static_cast<int>(result)) + ")";
  }
}

/// "kernel node <function>", "memset node", ... for a refusal's report; never throws.
std::string describe_node(cudaGraphNode_t node) {
  if (node == nullptr) return "no node";
  cudaGraphNodeType type{};
  if (cudaGraphNodeGetType(node, &type) != cudaSuccess) {
    (void)cudaGetLastError();
    return "a node";
  }
  switch (type) {
    case cudaGraphNodeTypeKernel: {
      cudaKernelNodeParams params{};
      const char* name = nullptr;
      if (cudaGraphKernelNodeGetParams(node, &params) == cudaSuccess &&
          cudaFuncGetName(&name, params.func) == cudaSuccess && name != nullptr) {
        return std::string("kernel node ") + name;
      }
      (void)cudaGetLastError();
      return "kernel node";
    }
    case cudaGraphNodeTypeMemset: {
      cudaMemsetParams m{};
      if (cudaGraphMemsetNodeGetParams(node, &m) != cudaSuccess) {
        (void)cudaGetLastError();
        return "memset node";
      }
      return "memset node (" + std::to_string(m.width) + " x " + std::to_string(m.height) + " of " +
             std::to_string(m.elementSize) + " B, pitch " + std::to_string(m.pitch) + ", value " +
             std::to_string(m.value) + ")";
    }
    case cudaGraphNodeTypeMemcpy: return "memcpy node";
    default: return "node of type " + std::to_string(static_cast<int>(type));
  }
}

/// The driver's cuGraphKernelNodeGetParams, or null where the driver does not give it.
using DriverGetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*);
DriverGetParams driver_get_params() {
  static const DriverGetParams get = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", &fn, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return DriverGetParams{nullptr};
    }
    return reinterpret_cast<DriverGetParams>(fn);
  }();
  return get;
}

/// The function a kernel node runs, as the driver names it (a CUfunction, or a library kernel
/// for a node a library launched through the driver, cuBLAS's); null when it does not say.
/// The driver is asked first: the runtime's query fails, with an error a sanitizer reports,
/// for every kernel the runtime did not register itself.
const void* kernel_function(cudaGraphNode_t node) {
  if (const DriverGetParams get = driver_get_params()) {
    CUDA_KERNEL_NODE_PARAMS_v2 driver{};
    if (get(reinterpret_cast<CUgraphNode>(node), &driver) != CUDA_SUCCESS) return nullptr;
    return driver.func != nullptr ? static_cast<const void*>(driver.func)
                                  : static_cast<const void*>(driver.kern);
  }
  cudaKernelNodeParams params{};
  if (cudaGraphKernelNodeGetParams(node, &params) == cudaSuccess) return params.func;
  (void)cudaGetLastError();
  return nullptr;
}

}  // namespace

std::vector<SharedExecutables::KernelKey> SharedExecutables::kernel_keys(const CudaGraph& graph) {
  std::size_t count = 0;
  FF_CUDA_CHECK(cudaGraphGetNodes(graph.get(), nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  FF_CUDA_CHECK(cudaGraphGetNodes(graph.get(), nodes.data(), &count));
  std::vector<KernelKey> keys;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    FF_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) continue;
    KernelKey key;
    key.function = kernel_function(node);
    // Unknown function: a key no other graph's node has, so the graph shares with none.
    if (key.function == nullptr) key.function = node;
    cudaLaunchAttributeValue cluster{};
    if (cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributeClusterDimension, &cluster) ==
        cudaSuccess) {
      key.cluster[0] = cluster.clusterDim.x;
      key.cluster[1] = cluster.clusterDim.y;
      key.cluster[2] = cluster.clusterDim.z;
    } else {
      (void)cudaGetLastError();  // no launch attribute: the kernel's own cluster shape, if any
    }
    keys.push_back(key);
  }
  return keys;
}

bool SharedExecutables::try_update(int e, int handle, bool group_latest) {
  Executable& x = executables_[e];
  cudaGraphExecUpdateResultInfo info{};
  const cudaError_t status = cudaGraphExecUpdate(x.exec.get(), graphs_[handle].graph.get(), &info);
  if (status == cudaErrorGraphExecUpdateFailure) {
    (void)cudaGetLastError();  // not sticky: clear it so the next call does not report it
    x.holds = -1;              // what a failed update leaves behind is not relied on
    const std::string by = group_latest ? "by the group's latest executable: " : "";
    ++refusals_[by + reason_of(info.result) + " at " + describe_node(info.errorNode) + " from " +
                describe_node(info.errorFromNode)];
    return false;
  }
  FF_CUDA_CHECK(status);
  x.holds = handle;
  ++updates_;
  return true;
}

int SharedExecutables::add(int group, CudaGraph graph, cudaStream_t stream) {
  FF_CHECK(!graph.empty(), ErrorCode::kInvalidArgument, "SharedExecutables::add of an empty graph");
  const std::size_t nodes = graph.node_count();
  std::vector<KernelKey> kernels = kernel_keys(graph);
  const int handle = static_cast<int>(graphs_.size());
  graphs_.push_back({std::move(graph), -1});
  // The executable the group's previous graph joined fits most often (a decoder's middle
  // pieces of one batch size come one after another), so it is tried first.
  const auto last = last_joined_.find(group);
  const int first = last == last_joined_.end() ? -1 : last->second;
  auto join = [&](int e) {
    graphs_[handle].executable = e;
    last_joined_[group] = e;
    return handle;
  };
  auto fits = [&](int e, bool group_latest) {
    const Executable& x = executables_[e];
    if (x.group != group || x.nodes != nodes) return false;
    if (x.kernels != kernels) {
      ++refusals_[std::string(group_latest ? "by the group's latest executable: " : "") +
                  "a kernel's function or cluster shape differs"];
      return false;
    }
    return try_update(e, handle, group_latest);
  };
  if (first >= 0 && fits(first, true)) return join(first);
  for (int e = 0; e < num_executables(); ++e) {
    if (e != first && fits(e, false)) return join(e);
  }
  Executable x;
  x.exec = GraphExec(graphs_[handle].graph);
  x.exec.upload(stream);
  x.group = group;
  x.nodes = nodes;
  x.kernels = std::move(kernels);
  x.holds = handle;
  executables_.push_back(std::move(x));
  return join(num_executables() - 1);
}

void SharedExecutables::launch(int handle, cudaStream_t stream) {
  FF_CHECK(handle >= 0 && handle < num_graphs(), ErrorCode::kInvalidArgument,
           "SharedExecutables::launch of graph ", handle, " of ", num_graphs());
  const int e = graphs_[handle].executable;
  if (executables_[e].holds != handle) {
    FF_CHECK(try_update(e, handle), ErrorCode::kCudaError, "cudaGraphExecUpdate refused graph ",
             handle, ", which its executable accepted when it was added");
  }
  executables_[e].exec.launch(stream);
}

void SharedExecutables::clear() {
  executables_.clear();
  graphs_.clear();
  last_joined_.clear();
  refusals_.clear();
}

}  // namespace freezeframe
