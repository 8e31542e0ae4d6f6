#pragma once
// Executables shared by graphs of one shape.
//
// A piece of the model captured for every batch size, or a decoder's middle piece captured for
// every layer, gives graphs that often differ only in their nodes' parameters (grid sizes,
// pointers), and each executable costs device memory (measured on the H200: about 110 KiB
// each, plus 3 KiB a kernel node, 5 KiB a cuBLAS GEMM node). Graphs added under one group share
// an executable when every kernel node runs the same function with the same cluster shape and
// cudaGraphExecUpdate accepts them (a batch size for which cuBLAS picks other kernels gets an
// executable of its own: see KernelKey); launching a graph that
// its executable does not hold updates the executable first (tens of µs for a dozen nodes),
// launching the one it holds costs a plain launch. Updates leave launches already enqueued
// untouched, so nothing waits for the device. A graph of another shape is told apart by the
// update CUDA refuses (cudaErrorGraphExecUpdateFailure, cleared at once), which
// compute-sanitizer lists as an API error.

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "freezeframe/graphs/cuda_graph.h"

namespace freezeframe {

class SharedExecutables {
 public:
  SharedExecutables() = default;
  SharedExecutables(SharedExecutables&&) noexcept = default;
  SharedExecutables& operator=(SharedExecutables&&) noexcept = default;

  /// Keeps `graph` and returns its handle for launch(). It joins the first executable of
  /// `group` that accepts it; when none does it gets a new one, uploaded on `stream`. Graphs
  /// of different groups never share.
  int add(int group, CudaGraph graph, cudaStream_t stream);

  /// Enqueues graph `handle` on `stream`.
  void launch(int handle, cudaStream_t stream);

  [[nodiscard]] int num_graphs() const { return static_cast<int>(graphs_.size()); }
  [[nodiscard]] int num_executables() const { return static_cast<int>(executables_.size()); }
  [[nodiscard]] std::size_t node_count(int handle) const {
    return graphs_.at(handle).graph.node_count();
  }
  /// Updates of an executable to another graph since construction (at add() and launch()).
  [[nodiscard]] long long updates() const { return updates_; }
  /// Why add() found executables that would not take a graph: CUDA's reason and the node it
  /// names ("function changed at kernel node <name>"), with how often each was seen.
  [[nodiscard]] const std::map<std::string, int>& refusals() const { return refusals_; }

  void clear();

 private:
  /// What an update must not change in a kernel node, node by node in the graph's order: its
  /// function and its cluster shape. cudaGraphExecUpdate accepts a kernel node whose function
  /// changed, but executables so updated from one batch size's cuBLAS kernels to another's
  /// computed wrong results on the H200 (CUDA 13.0; tests/engine/reference_logits_gpu_test),
  /// so a graph joins an executable only when an update changes its arguments and grids alone.
  struct KernelKey {
    const void* function = nullptr;
    unsigned cluster[3] = {0, 0, 0};
    bool operator==(const KernelKey&) const = default;
  };
  static std::vector<KernelKey> kernel_keys(const CudaGraph& graph);

  struct Executable {
    GraphExec exec;
    int group = 0;
    std::size_t nodes = 0;           ///< a graph of another node count cannot fit
    std::vector<KernelKey> kernels;  ///< those of the graph it was made from
    int holds = -1;  ///< handle of the graph the executable was last set to; −1 unknown
  };
  struct Entry {
    CudaGraph graph;
    int executable = -1;
  };
  /// Sets executable `e` to graph `handle`; false (and `e` holds nothing known) when the
  /// graph's shape does not fit it. `group_latest` marks a refusal by the executable the
  /// group's previous graph joined, in refusals().
  bool try_update(int e, int handle, bool group_latest = false);

  std::vector<Executable> executables_;
  std::vector<Entry> graphs_;
  std::unordered_map<int, int> last_joined_;  ///< group → executable its latest graph joined
  std::map<std::string, int> refusals_;
  long long updates_ = 0;
};

}  // namespace freezeframe
