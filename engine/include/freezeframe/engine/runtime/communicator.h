#pragma once
// Communicator: the collectives tensor- and decode-context-parallel ranks run, each enqueued on
// a stream and, where capturable() says so, captured in CUDA graphs (every pointer a rank
// passes is a plan buffer, fixed for the engine's life). Counts are elements of `dtype`. Sums of
// 16-bit values may differ between implementations in the last place (NCCL adds in the dtype,
// LocalGroup in f32). Every rank of a group calls the same collectives in the same order.

#include <cuda_runtime_api.h>

#include <cstddef>

#include "freezeframe/base/dtype.h"

namespace freezeframe {

class Communicator {
 public:
  virtual ~Communicator() = default;

  [[nodiscard]] virtual int rank() const = 0;
  [[nodiscard]] virtual int world_size() const = 0;
  /// Whether a graph may capture this communicator's collectives (NCCL's: yes). The engine
  /// runs those that may not between its captured pieces, in every graph mode.
  [[nodiscard]] virtual bool capturable() const { return true; }

  /// recv[r · count, (r + 1) · count) = rank r's send[0, count), for every rank r.
  virtual void all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                          cudaStream_t stream) = 0;
  /// recv[0, count) = Σ over ranks r of r's send[rank() · count, (rank() + 1) · count): send
  /// holds world_size() · count elements.
  virtual void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                              cudaStream_t stream) = 0;
  /// recv[0, count) = Σ over ranks of send[0, count); recv may be send.
  virtual void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                          cudaStream_t stream) = 0;
  /// recv[r · count, (r + 1) · count) = rank r's send[rank() · count, (rank() + 1) · count):
  /// block r of this rank's send goes to rank r.
  virtual void all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                          cudaStream_t stream) = 0;
};

}  // namespace freezeframe
