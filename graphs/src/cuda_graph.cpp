#include "freezeframe/graphs/cuda_graph.h"

#include <string>
#include <vector>

#include "freezeframe/core/cuda_check.h"

namespace freezeframe {

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    if (graph_ != nullptr) FF_CUDA_WARN(cudaGraphDestroy(graph_));
    graph_ = other.graph_;
    other.graph_ = nullptr;
  }
  return *this;
}

CudaGraph::~CudaGraph() {
  if (graph_ != nullptr) FF_CUDA_WARN(cudaGraphDestroy(graph_));
}

std::size_t CudaGraph::node_count() const {
  FF_CHECK(graph_ != nullptr, ErrorCode::kInvalidArgument, "node_count of an empty CudaGraph");
  std::size_t count = 0;
  FF_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &count));
  return count;
}

GraphExec::GraphExec(const CudaGraph& graph) {
  FF_CHECK(!graph.empty(), ErrorCode::kInvalidArgument, "cannot instantiate an empty CudaGraph");
  FF_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec_, graph.get(), 0));
}

GraphExec& GraphExec::operator=(GraphExec&& other) noexcept {
  if (this != &other) {
    if (exec_ != nullptr) FF_CUDA_WARN(cudaGraphExecDestroy(exec_));
    exec_ = other.exec_;
    other.exec_ = nullptr;
  }
  return *this;
}

GraphExec::~GraphExec() {
  if (exec_ != nullptr) FF_CUDA_WARN(cudaGraphExecDestroy(exec_));
}

void GraphExec::upload(cudaStream_t stream) const {
  FF_CHECK(exec_ != nullptr, ErrorCode::kInvalidArgument, "upload of an empty GraphExec");
  FF_CUDA_CHECK(cudaGraphUpload(exec_, stream));
}

void GraphExec::launch(cudaStream_t stream) const {
  FF_CHECK(exec_ != nullptr, ErrorCode::kInvalidArgument, "launch of an empty GraphExec");
  FF_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

namespace {

/// Ends a capture that went wrong: discards whatever was captured and clears the error the
/// failure left behind (capture errors are not sticky), so the stream can be used again.
/// Returns the status of ending the capture, to report alongside the first failure.
cudaError_t abandon_capture(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t ended = cudaSuccess;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
      status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    ended = cudaStreamEndCapture(stream, &partial);
    if (partial != nullptr) FF_CUDA_WARN(cudaGraphDestroy(partial));
  }
  (void)cudaGetLastError();
  return ended;
}

}  // namespace

CudaGraph capture_graph(cudaStream_t stream, const std::function<void()>& work,
                        cudaStreamCaptureMode mode) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FF_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  FF_CHECK(status == cudaStreamCaptureStatusNone, ErrorCode::kInvalidArgument,
           "capture_graph: the stream is already capturing");
  FF_CUDA_CHECK(cudaStreamBeginCapture(stream, mode));
  try {
    work();
  } catch (const Error& e) {
    const cudaError_t ended = abandon_capture(stream);
    throw Error(e.code(),
                e.message() + " (during CUDA graph capture; the capture was discarded" +
                    (ended == cudaSuccess ? std::string(")")
                                          : std::string(": ") + cudaGetErrorString(ended) + ")"),
                e.file(), e.line());
  } catch (...) {
    abandon_capture(stream);
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) FF_CUDA_WARN(cudaGraphDestroy(graph));
    (void)cudaGetLastError();
    FF_THROW(ErrorCode::kCudaError, "CUDA graph capture failed: ", cudaGetErrorString(ended),
             " (something inside the captured work is not capturable, e.g. a host "
             "synchronisation or an allocation)");
  }
  CudaGraph captured(graph);
  // Stream-ordered allocations (cudaMallocAsync) are capturable: they become allocation
  // nodes, and the graph then owns device memory, kept for it from instantiation on. Graphs
  // here own none (a library that allocates needs a workspace of its own instead).
  const AllocationNodes allocations = allocation_nodes(captured);
  FF_CHECK(allocations.count == 0, ErrorCode::kCudaError,
           "CUDA graph capture: the captured work "
           "allocated device memory (",
           allocations.count, " stream-ordered allocations, ", allocations.bytes,
           " bytes); graphs may only use memory that is already allocated");
  return captured;
}

AllocationNodes allocation_nodes(const CudaGraph& graph) {
  FF_CHECK(!graph.empty(), ErrorCode::kInvalidArgument, "allocation_nodes of an empty CudaGraph");
  std::size_t n = 0;
  FF_CUDA_CHECK(cudaGraphGetNodes(graph.get(), nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) FF_CUDA_CHECK(cudaGraphGetNodes(graph.get(), nodes.data(), &n));
  AllocationNodes result;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    FF_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeMemAlloc) continue;
    cudaMemAllocNodeParams params{};
    FF_CUDA_CHECK(cudaGraphMemAllocNodeGetParams(node, &params));
    ++result.count;
    result.bytes += params.bytesize;
  }
  return result;
}

}  // namespace freezeframe
