#pragma once
// LocalGroup: the ranks of a tensor- or decode-context-parallel deployment as threads of one
// process on one GPU, so a deployment of T ranks can be tried, and every path of it tested, on
// a single device. Each rank has its own host thread, stream and graphs, and calls the same
// collectives in the same order as the others, as NCCL ranks do.
//
// The contract (docs/DESIGN.md, "The local group", says why):
// - A collective is ordered by CUDA events, never by a kernel waiting for another: each rank
//   records that its inputs are ready and meets the others on the host; the last to arrive
//   launches every rank's part in one kernel on its stream, after every rank's ready event, and
//   records it done; every rank's stream waits for that before its next work. No device work
//   ever waits for work that is not already enqueued, so no rank can hold the others up on the
//   device, whatever it does between collectives.
// - A collective is not captured: a graph of one rank cannot wait for another rank's. The
//   engine ends its captured pieces at the collectives and runs them between (a capture that
//   reaches one is refused on every rank alike).
// - A DCP group inside the tensor-parallel one is a group of the same LocalGroup
//   (rank(r, size)); every rank of the process meets in every collective, each for its own
//   group's.
// - A rank that waits long for the others reports, every `report_after`, which rank has not
//   come to which collective; a rank whose body throws in run() releases the others, whose
//   collectives then throw.
//
// Sums are taken in f32 and rounded once to the dtype (NCCL adds 16-bit values in their own
// type), so 16-bit results may differ from NCCL's in the last place.

#include <chrono>
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

  /// Asks CUDA for a hardware queue per rank stream (CUDA_DEVICE_MAX_CONNECTIONS=kConnections,
  /// where the environment does not say already), so ranks' work overlaps instead of queueing
  /// behind each other's. Speed only: the group is correct without it. Takes effect only
  /// before the process's first CUDA call.
  static void prepare_process();

  /// A group of `world_size` ranks on the current CUDA device (kInvalidArgument outside
  /// [1, kMaxRanks]). A rank waiting for the others in a collective reports on stderr every
  /// `report_after` (a rank loading a large checkpoint may keep the others waiting a while).
  explicit LocalGroup(int world_size,
                      std::chrono::milliseconds report_after = std::chrono::seconds(20));
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;

  [[nodiscard]] int world_size() const;
  /// Rank r's communicator, valid while the group lives. Each rank's collectives are called
  /// from its own host thread; each returns once every rank has enqueued it.
  [[nodiscard]] Communicator& rank(int r);
  /// Rank r's communicator in the group of `group_size` consecutive ranks that holds it (ranks
  /// r - r % group_size onward): a DCP group inside the tensor-parallel one. Every rank of this
  /// LocalGroup calls each such collective at once (each its own group's, the same kind, count
  /// and dtype), as ranks running one program do. kInvalidArgument unless group_size divides
  /// world_size.
  [[nodiscard]] Communicator& rank(int r, int group_size);
  /// Runs body(r) for every rank r, each on a thread of its own on the group's device, and
  /// returns when all have. A rank whose body throws leaves the group: the others' collectives
  /// throw instead of waiting for it, and run() rethrows the first rank's exception to leave.
  void run(const std::function<void(int rank)>& body);

  struct State;  ///< the ranks' meeting place and events (local_group.cpp)

 private:
  std::unique_ptr<State> state_;
};

}  // namespace freezeframe
