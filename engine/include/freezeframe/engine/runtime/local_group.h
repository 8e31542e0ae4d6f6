#pragma once
// LocalGroup: the ranks of a tensor- or decode-context-parallel deployment run as threads of one
// process on one GPU, so a deployment of T ranks can be tried, and every path of it tested, on a
// single device.
//
// Each rank has its own host thread, stream and graphs, and calls the same collectives in the
// same order as the others, as NCCL ranks do. A collective meets the other ranks on the host
// when it is enqueued (eagerly or while a graph is captured): before, to learn their buffers'
// addresses, and after, so no rank goes on before every rank's collective is in its stream
// (the ranks share one CUDA context, where a kernel's first launch loads it and waits for the
// device, which would wait forever behind a collective spinning for a rank not yet there).
// That barrier covers one group's ranks only: where ranks belong to several groups (a DCP
// group inside the tensor-parallel one), a rank of another group may load a kernel while this
// group's collective spins for a rank whose launch that load holds up (measured: one run of
// four ranks in DCP pairs stopped on the flags' 20-second limit). A process that runs ranks in
// more than one group loads its kernels up front: CUDA_MODULE_LOADING=EAGER, set before its
// first CUDA call (`freezeframe bench` does so for a spec of several ranks).
// The kernel each rank enqueues reads and writes the other ranks' buffers directly (one GPU,
// one address space) and waits for them through flags in device memory, each of its blocks
// counting its collectives in a device counter, so a replayed graph runs them with no host
// involved. The flags (a few KiB) are the group's own allocation, made once.
//
// Sums are taken in f32 and rounded once to the dtype (NCCL adds 16-bit values in their own
// type), so 16-bit results may differ from NCCL's in the last place.
//
// Sync::kHost is for tools that run kernels one at a time, such as compute-sanitizer, under
// which ranks waiting for each other inside their kernels would never meet: each collective
// waits for the rank's stream, meets the other ranks on the host, computes the rank's result
// into a scratch buffer of the group's (plain copies and a summing kernel that waits for no
// one), meets them again once every rank has read the sends, and copies the result into the
// receive. Eager only: it waits for the host, so a capture is refused (on every rank alike);
// the scratch grows with the largest collective, the one allocation this mode makes per step.

#include <functional>
#include <memory>

#include "freezeframe/engine/runtime/communicator.h"

namespace freezeframe {

class LocalGroup {
 public:
  /// The largest group: a deployment of more ranks than this on one GPU is no trial of anything.
  static constexpr int kMaxRanks = 8;

  /// How the ranks' collectives wait for each other: in their kernels, on the device (graphs
  /// replay them; the default), or on the host between the ranks' streams (eager only).
  enum class Sync { kDevice, kHost };

  /// A group of `world_size` ranks on the current CUDA device (kInvalidArgument outside
  /// [1, kMaxRanks]).
  explicit LocalGroup(int world_size, Sync sync = Sync::kDevice);
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  [[nodiscard]] int world_size() const;
  [[nodiscard]] Sync sync() const;
  /// Rank r's communicator, valid while the group lives. Each rank's collectives are called
  /// from its own host thread: a collective returns once every rank has enqueued it.
  [[nodiscard]] Communicator& rank(int r);
  /// Runs body(r) for every rank r, each on a thread of its own on the group's device, and
  /// returns when all have; rethrows the first rank's exception. A rank that throws before a
  /// collective leaves the others waiting in it until they give up (20 s), so every rank should
  /// fail alike (checks on what every rank shares) or not at all. Between collectives a rank
  /// must not make a call that may wait for the whole device (a synchronous cudaMemcpy, a
  /// cudaFree) while another rank's collective may be waiting for it on the device: meet on
  /// the host first (a std::barrier after each step, as the tests do).
  void run(const std::function<void(int rank)>& body);

  struct State;  ///< the ranks' meeting place and the device flags (local_group.cpp)

 private:
  std::unique_ptr<State> state_;
};

}  // namespace freezeframe
