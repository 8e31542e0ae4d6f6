#pragma once
// The kernel of a LocalGroup collective (local_group.h): one rank's part, given every rank's
// buffers.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "freezeframe/core/dtype.h"

namespace freezeframe::local_group {

enum class Kind { kAllGather, kReduceScatter, kAllReduce, kAllToAll };

inline constexpr int kMaxRanks = 8;
/// Blocks of one rank's kernel; block b waits only for block b of the other ranks, which
/// handles the same elements.
inline constexpr int kMaxBlocks = 32;

/// One rank's part of a collective that every rank of the group enqueues.
struct Collective {
  Kind kind = Kind::kAllGather;
  int rank = 0;
  int world = 1;
  std::size_t count = 0;  ///< elements of a block of the collective (see Communicator)
  DType dtype = DType::kF32;
  const void* send[kMaxRanks] = {};  ///< every rank's
  void* recv[kMaxRanks] = {};        ///< every rank's
  /// Device flags, each [kMaxRanks][kMaxBlocks]: the epoch each block of each rank has
  /// arrived at, has left, and has finished.
  std::uint32_t* arrived = nullptr;
  std::uint32_t* left = nullptr;
  std::uint32_t* epochs = nullptr;
  std::size_t block_bytes = 0;  ///< count · size of dtype (launch() sets it)
  /// Whether the blocks meet the other ranks' through the flags (a captured collective); an
  /// eager one is launched once the host knows every rank's inputs are written, and is waited
  /// for before any rank writes them again, so it waits for no one.
  bool meet = true;
};

/// Loads the collective kernels into the current context, as the group is made: their first
/// launch must not load them (local_group.h).
void load_kernels();

/// Enqueues rank c.rank's kernel on `stream` (every rank enqueues its own, with the same kind,
/// count and dtype). Reductions of f32, bf16 and f16, summed in f32.
void launch(const Collective& c, cudaStream_t stream);

/// out[i] = Σ over r < world of sends[r][offset + i], i < count, in f32 in rank order and
/// rounded once (as the collective kernel sums), waiting for nothing: LocalGroup::Sync::kHost.
void launch_sum(const void* const* sends, int world, std::size_t offset, std::size_t count,
                DType dtype, void* out, cudaStream_t stream);

}  // namespace freezeframe::local_group
