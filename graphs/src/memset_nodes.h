#pragma once
// Memset nodes of a captured graph rewritten as kernel nodes.

#include <cuda_runtime_api.h>

namespace freezeframe {

/// Replaces every memset node of `graph` by a kernel node that writes the same values, with
/// the same dependencies. CUDA refuses to update some memset nodes to another destination
/// (measured: cuBLAS's 4-byte split-K semaphores, at each layer's GEMM), where a kernel
/// node's new arguments are always taken, so graphs that differ only there can then share
/// an executable. Returns how many nodes it replaced.
int memsets_to_kernels(cudaGraph_t graph);

}  // namespace freezeframe
