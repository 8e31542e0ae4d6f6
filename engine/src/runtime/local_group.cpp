#include "freezeframe/engine/runtime/local_group.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "runtime/local_collective.h"

namespace freezeframe {
namespace {

using E = ErrorCode;
using local_group::Kind;

static_assert(LocalGroup::kMaxRanks == local_group::kMaxRanks);

const char* name_of(Kind kind) {
  switch (kind) {
    case Kind::kAllGather: return "all_gather";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kAllReduce: return "all_reduce";
    case Kind::kAllToAll: return "all_to_all";
  }
  return "collective";
}

/// One rank's call, as the others see it when they meet.
struct Call {
  Kind kind = Kind::kAllGather;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  DType dtype = DType::kF32;
  int group_size = 1;
  std::uint64_t number = 0;  ///< the rank's collectives so far, this one included
  bool capturing = false;    ///< the rank's stream is being captured (refused on every rank)
  bool failed = false;       ///< the rank could not do its part (every rank then throws)
};

std::string describe(const Call& c) {
  std::ostringstream os;
  os << "collective #" << c.number << ", " << name_of(c.kind) << " of " << c.count << " "
     << name_of(c.dtype);
  return os.str();
}

/// The ranks' meeting place on the host: a barrier that carries each rank's call, reports the
/// ranks it waits for, and breaks when a rank leaves with an error.
class Meeting {
 public:
  Meeting(int world, std::chrono::milliseconds report_after)
      : world_(world), report_after_(report_after) {}

  /// Publishes `call` as rank `rank`'s and returns every rank's once all have arrived.
  std::array<Call, LocalGroup::kMaxRanks> meet(int rank, const Call& call) {
    std::unique_lock lock(mutex_);
    throw_if_broken();
    calls_[static_cast<std::size_t>(rank)] = call;
    here_[static_cast<std::size_t>(rank)] = true;
    const std::uint64_t generation = generation_;
    if (++arrived_ == world_) {
      met_ = calls_;
      arrived_ = 0;
      here_.fill(false);
      ++generation_;
      changed_.notify_all();
      return met_;
    }
    const auto start = std::chrono::steady_clock::now();
    while (!changed_.wait_for(lock, report_after_,
                              [&] { return generation_ != generation || !broken_.empty(); })) {
      report_waiting(rank, call, std::chrono::steady_clock::now() - start);
    }
    if (generation_ == generation) throw_if_broken();
    // A meeting done is never undone: met_ changes only once this rank arrives again.
    return met_;
  }

  /// Rank `rank` leaves with `error`: every rank waiting, or coming later, throws.
  void leave(int rank, const std::exception_ptr& error) {
    const std::lock_guard lock(mutex_);
    if (!broken_.empty()) return;
    std::ostringstream why;
    why << "local group: rank " << rank << " left the group with an error";
    code_ = E::kInternal;
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      why << " (" << e.message() << ")";
      code_ = e.code();
    } catch (const std::exception& e) {
      why << " (" << e.what() << ")";
    } catch (...) {
    }
    broken_ = why.str();
    changed_.notify_all();
  }

  /// A new run(): nobody waits, nobody has left.
  void reset() {
    const std::lock_guard lock(mutex_);
    arrived_ = 0;
    here_.fill(false);
    broken_.clear();
  }

 private:
  void throw_if_broken() const {
    if (!broken_.empty()) throw Error(code_, broken_, __FILE__, __LINE__);
  }

  /// Says on stderr which ranks rank `rank` is still waiting for (the mutex is held).
  void report_waiting(int rank, const Call& call, std::chrono::steady_clock::duration waited) {
    std::ostringstream missing;
    for (int r = 0; r < world_; ++r) {
      if (!here_[static_cast<std::size_t>(r)]) missing << (missing.tellp() > 0 ? ", " : "") << r;
    }
    std::fprintf(stderr,
                 "freezeframe local group: rank %d has waited %.1f s in its %s for rank(s) %s, "
                 "which have not come to it\n",
                 rank, std::chrono::duration<double>(waited).count(), describe(call).c_str(),
                 missing.str().c_str());
  }

  const int world_;
  const std::chrono::milliseconds report_after_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::array<Call, LocalGroup::kMaxRanks> calls_{}, met_{};
  std::array<bool, LocalGroup::kMaxRanks> here_{};
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::string broken_;  // why every meeting now throws
  ErrorCode code_ = E::kInternal;
};

}  // namespace

struct LocalGroup::State {
  int world = 1;
  int device = 0;  // the CUDA device the group lives on
  Meeting meeting;
  std::vector<std::unique_ptr<Communicator>> ranks;
  // Each rank's events: its inputs are ready (recorded before the first meeting) and its part
  // is done (before the second). A rank is in one collective at a time, whatever its group.
  std::vector<Event> ready, done;
  std::array<std::uint64_t, kMaxRanks> collectives{};  // each rank's so far

  State(int world_size, std::chrono::milliseconds report_after)
      : world(world_size), meeting(world_size, report_after) {}

  /// Every rank's call, checked alike on every rank: a mismatch is refused on all of them
  /// (none is left waiting for a rank that threw). `own` is this rank's failure to do its part
  /// so far, if any: rethrown here, once every rank knows of it.
  std::array<Call, kMaxRanks> meet_and_check(int rank, Call call,
                                             const std::exception_ptr& own = nullptr) {
    call.failed = own != nullptr;
    const std::array<Call, kMaxRanks> all = meeting.meet(rank, call);
    if (own) std::rethrow_exception(own);
    for (int r = 0; r < world; ++r) {
      FF_CHECK(!all[r].failed, E::kCudaError, "local group: rank ", r, " failed in its ",
               describe(all[r]), " (its error is its own)");
    }
    for (int r = 0; r < world; ++r) {
      FF_CHECK(!all[r].capturing, E::kUnsupported, "local group: rank ", r, "'s ", describe(all[r]),
               " is being captured, and a LocalGroup's collectives run between graphs, ordered "
               "by events (a graph of one rank cannot wait for another's): capture the work "
               "before and after it, as the engine does");
    }
    for (int r = 1; r < world; ++r) {
      const bool same = all[r].kind == all[0].kind && all[r].count == all[0].count &&
                        all[r].dtype == all[0].dtype;
      FF_CHECK(same && all[r].group_size == all[0].group_size, E::kInvalidArgument,
               "local group: rank 0 calls ", describe(all[0]),
               same ? " in groups of " + std::to_string(all[0].group_size) : std::string(),
               " while rank ", r, " calls ", describe(all[r]),
               same ? " in groups of " + std::to_string(all[r].group_size) : std::string(),
               " (every rank calls the same collectives in the same order)");
    }
    const bool reduces = call.kind == Kind::kReduceScatter || call.kind == Kind::kAllReduce;
    FF_CHECK(!reduces || call.dtype == DType::kF32 || call.dtype == DType::kBF16 ||
                 call.dtype == DType::kF16,
             E::kUnsupported, "local group: ", name_of(call.kind), " of ", name_of(call.dtype),
             " (sums are of f32, bf16 or f16)");
    return all;
  }

  /// Rank `rank`'s part of a collective of the ranks [first, first + size), called by every
  /// rank of the group at once (each of its own group's). Nothing here waits for the device.
  void run(int rank, int first, int size, Call call, cudaStream_t stream) {
    const auto mine = static_cast<std::size_t>(rank);
    call.group_size = size;
    call.number = ++collectives[mine];
    // The stream's state and its inputs' event, before the meeting: every rank learns whether
    // any could not get ready, and throws alike.
    std::exception_ptr failed;
    try {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      FF_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
      call.capturing = status != cudaStreamCaptureStatusNone;
      if (!call.capturing) ready[mine].record(stream);
    } catch (...) {
      failed = std::current_exception();
    }
    const std::array<Call, kMaxRanks> all = meet_and_check(rank, call, failed);
    // Every rank's ready event is recorded: each wait below is for work already enqueued.
    try {
      local_group::Collective c;
      c.kind = call.kind;
      c.rank = rank - first;
      c.world = size;
      c.count = call.count;
      c.dtype = call.dtype;
      for (int r = first; r < first + size; ++r) {
        c.send[r - first] = all[r].send;
        c.recv[r - first] = all[r].recv;
        const cudaEvent_t inputs = ready[static_cast<std::size_t>(r)].get();
        if (r != rank) FF_CUDA_CHECK(cudaStreamWaitEvent(stream, inputs));
      }
      local_group::launch(c, stream);
      done[mine].record(stream);
    } catch (...) {
      failed = std::current_exception();
    }
    // Every rank's part is enqueued, its done event recorded: before its next work each rank
    // waits for them all, so none overwrites a buffer another's part still reads, or reads one
    // another's part still writes.
    (void)meet_and_check(rank, call, failed);
    for (int r = first; r < first + size; ++r) {
      const cudaEvent_t part = done[static_cast<std::size_t>(r)].get();
      if (r != rank) FF_CUDA_CHECK(cudaStreamWaitEvent(stream, part));
    }
  }
};

namespace {

/// Rank `rank` of the group's ranks [first, first + size).
class LocalRank final : public Communicator {
 public:
  LocalRank(LocalGroup::State& group, int rank, int first, int size)
      : group_(group), rank_(rank), first_(first), size_(size) {}
  [[nodiscard]] int rank() const override { return rank_ - first_; }
  [[nodiscard]] int world_size() const override { return size_; }
  [[nodiscard]] bool capturable() const override { return false; }

  void all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override {
    group_.run(rank_, first_, size_, {Kind::kAllGather, send, recv, count, dtype}, stream);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      cudaStream_t stream) override {
    group_.run(rank_, first_, size_, {Kind::kReduceScatter, send, recv, count, dtype}, stream);
  }
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override {
    group_.run(rank_, first_, size_, {Kind::kAllReduce, send, recv, count, dtype}, stream);
  }
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override {
    group_.run(rank_, first_, size_, {Kind::kAllToAll, send, recv, count, dtype}, stream);
  }

 private:
  LocalGroup::State& group_;
  int rank_, first_, size_;
};

}  // namespace

void LocalGroup::prepare_process() {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(kConnections).c_str(), 0);
}

LocalGroup::LocalGroup(int world_size, std::chrono::milliseconds report_after) {
  FF_CHECK(world_size >= 1 && world_size <= kMaxRanks, E::kInvalidArgument, "local group of ",
           world_size, " ranks: it holds 1 to ", kMaxRanks);
  FF_CHECK(report_after.count() > 0, E::kInvalidArgument,
           "local group: report_after must be positive, got ", report_after.count(), " ms");
  state_ = std::make_unique<State>(world_size, report_after);
  FF_CUDA_CHECK(cudaGetDevice(&state_->device));
  for (int r = 0; r < world_size; ++r) {
    state_->ready.emplace_back();
    state_->done.emplace_back();
  }
  // Every group of consecutive ranks whose size divides the world's, made here so ranks may
  // ask for theirs from their own threads.
  for (int size = 1; size <= world_size; ++size) {
    if (world_size % size != 0) continue;
    for (int r = 0; r < world_size; ++r) {
      state_->ranks.push_back(std::make_unique<LocalRank>(*state_, r, r - r % size, size));
    }
  }
}

LocalGroup::~LocalGroup() = default;

int LocalGroup::world_size() const { return state_->world; }

Communicator& LocalGroup::rank(int r) { return rank(r, state_->world); }

Communicator& LocalGroup::rank(int r, int group_size) {
  const int world = state_->world;
  FF_CHECK(r >= 0 && r < world, E::kInvalidArgument, "local group: rank ", r, " of ", world);
  FF_CHECK(group_size >= 1 && world % group_size == 0, E::kInvalidArgument,
           "local group: groups of ", group_size, " ranks do not divide its ", world);
  // ranks holds, for each divisor in increasing order, a communicator per rank.
  std::size_t index = 0;
  for (int size = 1; size < group_size; ++size) {
    if (world % size == 0) index += static_cast<std::size_t>(world);
  }
  return *state_->ranks[index + static_cast<std::size_t>(r)];
}

void LocalGroup::run(const std::function<void(int rank)>& body) {
  const int world = state_->world, device = state_->device;
  state_->meeting.reset();
  std::mutex first_mutex;
  std::exception_ptr first;  // the first rank's exception to leave the group
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        FF_CUDA_CHECK(cudaSetDevice(device));
        body(r);
      } catch (...) {
        const std::exception_ptr error = std::current_exception();
        {
          const std::lock_guard lock(first_mutex);
          if (!first) first = error;
        }
        state_->meeting.leave(r, error);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace freezeframe
