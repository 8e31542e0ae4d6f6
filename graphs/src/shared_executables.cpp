#include "freezeframe/graphs/shared_executables.h"

#include "freezeframe/core/error.h"

namespace freezeframe {

bool SharedExecutables::try_update(int e, int handle) {
  Executable& x = executables_[e];
  cudaGraphExecUpdateResultInfo info{};
  const cudaError_t status = cudaGraphExecUpdate(x.exec.get(), graphs_[handle].graph.get(), &info);
  if (status == cudaErrorGraphExecUpdateFailure) {
    (void)cudaGetLastError();  // not sticky: clear it so the next call does not report it
    x.holds = -1;              // what a failed update leaves behind is not relied on
    return false;
  }
  FF_CUDA_CHECK(status);
  x.holds = handle;
  ++updates_;
  return true;
}

int SharedExecutables::add(int group, CudaGraph graph, cudaStream_t stream) {
  FF_CHECK(!graph.empty(), ErrorCode::kInvalidArgument, "SharedExecutables::add of an empty graph");
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
  if (first >= 0 && try_update(first, handle)) return join(first);
  for (int e = 0; e < num_executables(); ++e) {
    if (e != first && executables_[e].group == group && try_update(e, handle)) return join(e);
  }
  Executable x;
  x.exec = GraphExec(graphs_[handle].graph);
  x.exec.upload(stream);
  x.group = group;
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
}

}  // namespace freezeframe
