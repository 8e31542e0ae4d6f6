#pragma once
// LocalGroup: the ranks of a tensor- or decode-context-parallel deployment run as threads of one
// process on one GPU, so a deployment of T ranks can be tried, and every path of it tested, on a
// single device.
//
// Each rank has its own host thread, stream and graphs, and calls the same collectives in the
// same order as the others, as NCCL ranks do. A DCP group inside the tensor-parallel one is a
// group of the same LocalGroup (rank(r, size)): every rank of the process takes part in every
// collective's meeting, each for its own group.
// A collective meets the other ranks on the host when it is enqueued (eagerly or while a graph
// is captured): before, to learn their buffers' addresses, and after, so no rank goes on before
// every rank's collective is in its stream. Run eagerly, the ranks also wait for their
// collectives to finish and meet once more: what a rank does next may load kernels (its own on
// a first launch under CUDA's lazy loading; cuBLAS loads its kernels on first use whatever
// CUDA_MODULE_LOADING says), a load waits for the device and holds back launches, and a
// collective spinning then for a rank whose kernel is held back would wait for ever (measured:
// four tensor-parallel ranks of an MLA model stopped, one rank inside cuLibraryLoadData under
// cublasGemmEx, the others' collectives spinning). A replayed graph's collectives meet no
// host, so between a graph's pieces (attention, eager) a rank must launch only loaded kernels:
// the warm-up before capture launches each once, and CUDA_MODULE_LOADING=EAGER loads the rest.
// A replayed collective also needs its rank's stream on a hardware queue of its own: CUDA maps
// streams onto CUDA_DEVICE_MAX_CONNECTIONS queues (8 unless set), work on one queue starts in
// order, and a rank's collective queued behind another rank's spinning one never starts
// (measured: four ranks stopped in replayed graphs, three collectives spinning and the fourth
// rank's stream idle with its collective enqueued). prepare_process() sets both before a
// process's first CUDA call (`freezeframe bench` calls it for a spec of several ranks, the
// tests for theirs). The group's own kernels are loaded when it is made.
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
  /// The hardware queues prepare_process asks for (CUDA's most).
  static constexpr int kConnections = 32;

  /// Sets what a process that runs several ranks on one GPU needs of CUDA, where the
  /// environment does not say already: CUDA_MODULE_LOADING=EAGER and
  /// CUDA_DEVICE_MAX_CONNECTIONS=kConnections (see above). Takes effect only if called before
  /// the process's first CUDA call. A group of several ranks made without it warns once.
  static void prepare_process();

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
  /// from its own host thread: a collective returns once every rank has enqueued it, and, run
  /// eagerly, once every rank's has finished.
  [[nodiscard]] Communicator& rank(int r);
  /// Rank r's communicator in the group of `group_size` consecutive ranks that holds it (ranks
  /// r - r % group_size onward): a DCP group inside the tensor-parallel one. Every rank of this
  /// LocalGroup calls each such collective at once (each its own group's, the same kind, count
  /// and dtype), as ranks running one program do. kInvalidArgument unless group_size divides
  /// world_size.
  [[nodiscard]] Communicator& rank(int r, int group_size);
  /// Runs body(r) for every rank r, each on a thread of its own on the group's device, and
  /// returns when all have; rethrows the first rank's exception. A rank that throws before a
  /// collective leaves the others waiting in it until they give up (20 s), so every rank should
  /// fail alike (checks on what every rank shares) or not at all. Between a replayed graph's
  /// collectives and the next a rank must not make a call that may wait for the whole device
  /// (a synchronous cudaMemcpy, a cudaFree) while another rank's collective may be waiting for
  /// it on the device: meet on the host first (a std::barrier after each step, as the tests do).
  void run(const std::function<void(int rank)>& body);

  struct State;  ///< the ranks' meeting place and the device flags (local_group.cpp)

 private:
  std::unique_ptr<State> state_;
};

}  // namespace freezeframe
