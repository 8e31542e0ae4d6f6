#pragma once
// The kernel of a LocalGroup collective (local_group.h): one rank's part, given every rank's
// buffers (one GPU, one address space).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "freezeframe/base/dtype.h"

namespace freezeframe::local_group {

enum class Kind { kAllGather, kReduceScatter, kAllReduce, kAllToAll };

inline constexpr int kMaxRanks = 8;

/// A collective of one group: every rank's part, launched once every rank's inputs are
/// written (LocalGroup orders the ranks' streams with events); it waits for no one.
struct Collective {
  Kind kind = Kind::kAllGather;
  int world = 1;
  std::size_t count = 0;  ///< elements of a block of the collective (see Communicator)
  DType dtype = DType::kF32;
  const void* send[kMaxRanks] = {};  ///< every rank's
  void* recv[kMaxRanks] = {};        ///< every rank's
  std::size_t block_bytes = 0;       ///< count · size of dtype (launch() sets it)
};

/// Enqueues every rank's part on `stream`, in one launch (blockIdx.y is the rank): all-gather,
/// all-to-all and reduce-scatter write the rank's own receive; all-reduce sums the rank's slice
/// of the elements into every rank's receive (only that part touches that slice of any buffer,
/// so a receive may be its send). Sums of f32, bf16 and f16, in f32.
void launch(const Collective& c, cudaStream_t stream);

}  // namespace freezeframe::local_group
