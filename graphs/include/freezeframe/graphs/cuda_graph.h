#pragma once
// Move-only owners of a captured CUDA graph and of its executable, and the capture itself.
//
// capture_graph always ends the capture it began: when the work throws, or when something
// inside it is not capturable (a host synchronisation, an allocation), the capture is ended
// and discarded, the stream's error state is cleared and the stream is usable again; the
// caller gets an Error naming what failed. Graphs own no memory of their own: every buffer a
// captured kernel touches belongs to someone else (the engine's arena), so a capture that
// allocates, even stream-ordered (cudaMallocAsync, which CUDA would capture), fails.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

namespace freezeframe {

class CudaGraph {
 public:
  CudaGraph() = default;
  /// Takes ownership of `graph`.
  explicit CudaGraph(cudaGraph_t graph) : graph_(graph) {}
  CudaGraph(CudaGraph&& other) noexcept : graph_(other.graph_) { other.graph_ = nullptr; }
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph();

  [[nodiscard]] cudaGraph_t get() const { return graph_; }
  [[nodiscard]] bool empty() const { return graph_ == nullptr; }
  /// Nodes in the graph (kernels, copies, memsets, ...).
  [[nodiscard]] std::size_t node_count() const;

 private:
  cudaGraph_t graph_ = nullptr;
};

class GraphExec {
 public:
  GraphExec() = default;
  /// Instantiates `graph` (which may be destroyed afterwards).
  explicit GraphExec(const CudaGraph& graph);
  GraphExec(GraphExec&& other) noexcept : exec_(other.exec_) { other.exec_ = nullptr; }
  GraphExec& operator=(GraphExec&& other) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec();

  [[nodiscard]] cudaGraphExec_t get() const { return exec_; }
  [[nodiscard]] bool empty() const { return exec_ == nullptr; }
  /// Moves the executable's resources to the device ahead of the first launch, so that
  /// launch does not pay for it.
  void upload(cudaStream_t stream) const;
  /// Enqueues one replay on `stream`.
  void launch(cudaStream_t stream) const;

 private:
  cudaGraphExec_t exec_ = nullptr;
};

/// The stream-ordered allocations a graph holds (allocation nodes) and their bytes.
struct AllocationNodes {
  int count = 0;
  std::size_t bytes = 0;
};
[[nodiscard]] AllocationNodes allocation_nodes(const CudaGraph& graph);

/// Captures what `work` enqueues on `stream` (which must not be capturing already) into a
/// graph. `mode` decides which CUDA calls on other streams or threads may break the capture
/// (cudaStreamCaptureModeThreadLocal: only this thread's). Throws an Error (kCuda, or what
/// `work` threw, with the capture's failure appended) and leaves `stream` usable when the
/// capture fails, or when the captured work allocated device memory.
[[nodiscard]] CudaGraph capture_graph(
    cudaStream_t stream, const std::function<void()>& work,
    cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal);

}  // namespace freezeframe
