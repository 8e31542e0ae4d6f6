#include "freezeframe/engine/runtime/local_group.h"

#include <algorithm>
#include <array>
#include <atomic>
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
#include <utility>
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
  bool failed = false;       ///< the rank could not get ready (every rank then throws)
};
using Calls = std::array<Call, LocalGroup::kMaxRanks>;

std::string describe(const Call& c) {
  std::ostringstream os;
  os << "collective #" << c.number << ", " << name_of(c.kind) << " of " << c.count << " "
     << name_of(c.dtype);
  return os.str();
}

/// Why the ranks' calls cannot run, the same on every rank, or nothing (on the step path: no
/// text is made unless there is a problem).
std::optional<std::pair<ErrorCode, std::string>> problem_of(const Calls& all, int world) {
  using detail::concat;
  for (int r = 0; r < world; ++r) {
    if (all[r].failed) {
      return std::pair{E::kCudaError, concat("local group: rank ", r, " failed before its ",
                                             describe(all[r]), " (its error is its own)")};
    }
  }
  for (int r = 0; r < world; ++r) {
    if (all[r].capturing) {
      return std::pair{
          E::kUnsupported,
          concat("local group: rank ", r, "'s ", describe(all[r]),
                 " is being captured, and a LocalGroup's collectives run between graphs, ordered "
                 "by events (a graph of one rank cannot wait for another's): capture the work "
                 "before and after it, as the engine does")};
    }
  }
  for (int r = 1; r < world; ++r) {
    const bool same =
        all[r].kind == all[0].kind && all[r].count == all[0].count && all[r].dtype == all[0].dtype;
    if (!same || all[r].group_size != all[0].group_size) {
      const auto groups = [&](int rank) {
        return same ? concat(" in groups of ", all[rank].group_size) : std::string();
      };
      return std::pair{E::kInvalidArgument,
                       concat("local group: rank 0 calls ", describe(all[0]), groups(0),
                              " while rank ", r, " calls ", describe(all[r]), groups(r),
                              " (every rank calls the same collectives in the same order)")};
    }
  }
  const Call& c = all[0];
  const bool reduces = c.kind == Kind::kReduceScatter || c.kind == Kind::kAllReduce;
  if (reduces && c.dtype != DType::kF32 && c.dtype != DType::kBF16 && c.dtype != DType::kF16) {
    return std::pair{E::kUnsupported, concat("local group: ", name_of(c.kind), " of ",
                                             name_of(c.dtype), " (sums are of f32, bf16 or f16)")};
  }
  return std::nullopt;
}

/// The ranks' meeting place on the host: a barrier that carries each rank's call, runs the
/// collective's completion on the last rank to arrive, reports the ranks it waits for, and
/// breaks when a rank leaves with an error. A rank waiting spins a little before it sleeps: a
/// meeting is a few microseconds when every rank is on its way (ranks of one step run the same
/// program), where a sleeping wait would take tens.
class Meeting {
 public:
  Meeting(int world, std::chrono::milliseconds report_after)
      : world_(world), report_after_(report_after) {}

  struct Met {
    Calls calls;
    std::string failure;  ///< what the completion reported, if it failed
  };

  /// Publishes `call` as rank `rank`'s; the last rank to arrive runs complete(calls), which
  /// returns an empty string or why it failed, before anyone goes on. Returns every rank's call.
  template <typename Complete>
  Met meet(int rank, const Call& call, Complete&& complete) {
    std::unique_lock lock(mutex_);
    throw_if_broken();
    calls_[static_cast<std::size_t>(rank)] = call;
    here_[static_cast<std::size_t>(rank)] = true;
    const std::uint64_t generation = generation_.load(std::memory_order_relaxed);
    if (++arrived_ == world_) {
      met_.calls = calls_;
      met_.failure = complete(met_.calls);
      arrived_ = 0;
      here_.fill(false);
      generation_.store(generation + 1, std::memory_order_release);
      if (sleepers_ > 0) changed_.notify_all();
      return met_;
    }
    lock.unlock();
    spin_while(generation);
    lock.lock();
    const auto start = std::chrono::steady_clock::now();
    ++sleepers_;
    while (!changed_.wait_for(lock, report_after_, [&] {
      return generation_.load(std::memory_order_relaxed) != generation || !broken_.empty();
    })) {
      report_waiting(rank, call, std::chrono::steady_clock::now() - start);
    }
    --sleepers_;
    if (generation_.load(std::memory_order_relaxed) == generation) throw_if_broken();
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
    is_broken_.store(true, std::memory_order_release);
    changed_.notify_all();
  }

  /// A new run(): nobody waits, nobody has left.
  void reset() {
    const std::lock_guard lock(mutex_);
    arrived_ = 0;
    here_.fill(false);
    broken_.clear();
    is_broken_.store(false, std::memory_order_release);
  }

 private:
  /// Spins (without the lock) while the meeting of `generation` is still open, for a while.
  void spin_while(std::uint64_t generation) const {
    constexpr auto kSpin = std::chrono::microseconds(200);
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0;; ++i) {
      if (generation_.load(std::memory_order_acquire) != generation ||
          is_broken_.load(std::memory_order_acquire)) {
        return;
      }
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return;
      std::this_thread::yield();
    }
  }

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
  Calls calls_{};
  Met met_;
  std::array<bool, LocalGroup::kMaxRanks> here_{};
  int arrived_ = 0;
  int sleepers_ = 0;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> is_broken_{false};
  std::string broken_;  // why every meeting now throws
  ErrorCode code_ = E::kInternal;
};

}  // namespace

struct LocalGroup::State {
  int world = 1;
  int device = 0;  // the CUDA device the group lives on
  Meeting meeting;
  std::vector<std::unique_ptr<Communicator>> ranks;
  // Each rank's inputs are ready (recorded before it meets the others); the collective is done
  // (recorded by the rank that launched it, before the others leave the meeting). A rank is in
  // one collective at a time, whatever its group, so one of each serves every collective.
  std::vector<Event> ready;
  Event done;
  std::array<std::uint64_t, kMaxRanks> collectives{};  // each rank's so far

  State(int world_size, std::chrono::milliseconds report_after)
      : world(world_size), meeting(world_size, report_after) {}

  /// The collective of every group, on `stream` (the last rank to arrive's), once every rank's
  /// inputs are written: each group's parts in one launch, then the done event.
  void launch_all(int rank, const Calls& all, cudaStream_t stream) {
    for (int r = 0; r < world; ++r) {
      if (r != rank)
        FF_CUDA_CHECK(cudaStreamWaitEvent(stream, ready[static_cast<std::size_t>(r)].get()));
    }
    const int size = all[0].group_size;
    for (int first = 0; first < world; first += size) {
      local_group::Collective c;
      c.kind = all[0].kind;
      c.world = size;
      c.count = all[0].count;
      c.dtype = all[0].dtype;
      for (int r = 0; r < size; ++r) {
        c.send[r] = all[first + r].send;
        c.recv[r] = all[first + r].recv;
      }
      local_group::launch(c, stream);
    }
    done.record(stream);
  }

  /// Rank `rank`'s part of a collective of groups of `size` consecutive ranks, called by every
  /// rank of the group at once (each for its own group). The last rank to arrive launches the
  /// collective on its stream; every rank's stream then waits for it. Nothing here waits for
  /// the device, and every wait a stream is given is for work already enqueued.
  void run(int rank, int size, Call call, cudaStream_t stream) {
    const auto mine = static_cast<std::size_t>(rank);
    call.group_size = size;
    call.number = ++collectives[mine];
    std::exception_ptr own;
    try {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      FF_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
      call.capturing = status != cudaStreamCaptureStatusNone;
      if (!call.capturing) ready[mine].record(stream);
    } catch (...) {
      own = std::current_exception();
      call.failed = true;
    }
    const Meeting::Met met = meeting.meet(rank, call, [&](const Calls& all) -> std::string {
      if (problem_of(all, world)) return {};  // every rank throws it below
      try {
        launch_all(rank, all, stream);
      } catch (const Error& e) {
        return "local group: rank " + std::to_string(rank) + " could not launch the " +
               describe(call) + ": " + e.message();
      }
      return {};
    });
    if (own) std::rethrow_exception(own);
    if (const auto problem = problem_of(met.calls, world)) {
      throw Error(problem->first, problem->second, __FILE__, __LINE__);
    }
    FF_CHECK(met.failure.empty(), E::kCudaError, met.failure);
    FF_CUDA_CHECK(cudaStreamWaitEvent(stream, done.get()));
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
    group_.run(rank_, size_, {Kind::kAllGather, send, recv, count, dtype}, stream);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      cudaStream_t stream) override {
    group_.run(rank_, size_, {Kind::kReduceScatter, send, recv, count, dtype}, stream);
  }
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override {
    group_.run(rank_, size_, {Kind::kAllReduce, send, recv, count, dtype}, stream);
  }
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override {
    group_.run(rank_, size_, {Kind::kAllToAll, send, recv, count, dtype}, stream);
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
  for (int r = 0; r < world_size; ++r) state_->ready.emplace_back();
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
