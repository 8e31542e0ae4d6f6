#include "freezeframe/engine/runtime/local_group.h"

#include <array>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/error.h"
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
  bool failed = false;  ///< the rank could not get its stream ready (every rank then throws)
};

}  // namespace

struct LocalGroup::State {
  int world = 1;
  Sync sync = Sync::kDevice;
  DeviceBuffer flags;  // arrived, left, epochs: [kMaxRanks][kMaxBlocks] each
  std::barrier<> meeting;
  std::array<Call, kMaxRanks> calls{};
  std::vector<std::unique_ptr<Communicator>> ranks;
  std::array<DeviceBuffer, kMaxRanks> scratch;  // Sync::kHost: each rank's result before its copy

  int device = 0;  // the CUDA device the group lives on

  State(int world_size, Sync how) : world(world_size), sync(how), meeting(world_size) {}

  [[nodiscard]] std::uint32_t* flag_array(int which) const {
    return static_cast<std::uint32_t*>(flags.data()) +
           static_cast<std::size_t>(which) * kMaxRanks * local_group::kMaxBlocks;
  }

  /// Publishes `call` as rank `rank`'s and returns every rank's.
  std::array<Call, kMaxRanks> meet(int rank, const Call& call) {
    calls[static_cast<std::size_t>(rank)] = call;
    meeting.arrive_and_wait();
    const std::array<Call, kMaxRanks> all = calls;
    meeting.arrive_and_wait();  // nobody publishes its next call before all have read this one
    return all;
  }

  /// Every rank's call, checked alike on every rank: a mismatch is refused on all of them (none
  /// is left waiting for a rank that threw). `before` is this rank's failure to get ready for
  /// it, if any: rethrown here, once every rank knows.
  std::array<Call, kMaxRanks> meet_and_check(int rank, Call call,
                                             const std::exception_ptr& before = nullptr) {
    call.failed = before != nullptr;
    const std::array<Call, kMaxRanks> all = meet(rank, call);
    if (before) std::rethrow_exception(before);
    for (int r = 0; r < world; ++r) {
      FF_CHECK(!all[r].failed, E::kCudaError, "local group: rank ", r, " failed before its ",
               name_of(all[r].kind), " (its error is its own)");
    }
    for (int r = 1; r < world; ++r) {
      FF_CHECK(all[r].kind == all[0].kind && all[r].count == all[0].count &&
                   all[r].dtype == all[0].dtype,
               E::kInvalidArgument, "local group: rank 0 calls ", name_of(all[0].kind), " of ",
               all[0].count, " ", name_of(all[0].dtype), " while rank ", r, " calls ",
               name_of(all[r].kind), " of ", all[r].count, " ", name_of(all[r].dtype),
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
  /// rank of the group at once (each of its own group's).
  void run(int rank, int first, int size, const Call& call, cudaStream_t stream) {
    if (sync == Sync::kHost) return run_on_host(rank, first, size, call, stream);
    // Run eagerly, a collective waits for no one on the device: every rank's stream is drained
    // before the ranks meet (their sends are written, their receives free), each rank's kernel
    // then reads the others' sends as they stand, and the ranks meet again once every kernel
    // has finished (nobody overwrites a send another still reads). No kernel ever spins while a
    // rank is outside a collective, where it may load kernels (cuBLAS loads its own on first
    // use, whatever CUDA_MODULE_LOADING says; a load waits for the device) or run kernels that
    // need SMs a spinning collective would hold. A captured collective is replayed with no
    // host: its blocks meet the other ranks' through the flags.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    std::exception_ptr failed;
    try {
      FF_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
      if (capturing == cudaStreamCaptureStatusNone) FF_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (...) {
      failed = std::current_exception();
    }
    const bool eager = capturing == cudaStreamCaptureStatusNone;
    const std::array<Call, kMaxRanks> all = meet_and_check(rank, call, failed);
    try {
      local_group::Collective c;
      c.kind = call.kind;
      c.rank = rank - first;
      c.world = size;
      c.count = call.count;
      c.dtype = call.dtype;
      c.meet = !eager;
      for (int r = 0; r < size; ++r) {
        c.send[r] = all[first + r].send;
        c.recv[r] = all[first + r].recv;
      }
      // The group's rows of the flags: its ranks' blocks meet each other only.
      const std::size_t rows = static_cast<std::size_t>(first) * local_group::kMaxBlocks;
      c.arrived = flag_array(0) + rows;
      c.left = flag_array(1) + rows;
      c.epochs = flag_array(2) + rows;
      local_group::launch(c, stream);
      if (eager) FF_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (...) {
      failed = std::current_exception();
    }
    // Eagerly, every rank's kernel has finished; captured, every rank's is in its graph.
    meeting.arrive_and_wait();
    if (failed) std::rethrow_exception(failed);
  }

  /// Sync::kHost: no kernel waits for another rank's (local_group.h).
  void run_on_host(int rank, int first, int size, const Call& call, cudaStream_t stream) {
    // Every rank of a group captures the same collectives, so each refuses alike here.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    FF_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    FF_CHECK(capturing == cudaStreamCaptureStatusNone, E::kUnsupported,
             "local group: ", name_of(call.kind),
             " waits for the host in a host-synchronized group (LocalGroup::Sync::kHost), so no "
             "graph can capture it");
    std::exception_ptr before;
    try {
      FF_CUDA_CHECK(cudaStreamSynchronize(stream));  // this rank's send is written
    } catch (...) {
      before = std::current_exception();
    }
    const std::array<Call, kMaxRanks> all = meet_and_check(rank, call, before);
    const std::size_t block = call.count * size_of(call.dtype);
    const std::size_t result =
        call.kind == Kind::kAllGather || call.kind == Kind::kAllToAll ? block * size : block;
    const int me = rank - first;
    DeviceBuffer& out = scratch[static_cast<std::size_t>(rank)];
    std::exception_ptr failed;
    try {
      if (out.bytes() < result) out = DeviceBuffer(result);
      auto* dst = static_cast<std::uint8_t*>(out.data());
      const void* sends[kMaxRanks] = {};
      for (int r = 0; r < size; ++r) sends[r] = all[first + r].send;
      switch (call.kind) {
        case Kind::kAllGather:
        case Kind::kAllToAll:
          for (int r = 0; r < size; ++r) {
            const std::size_t from = call.kind == Kind::kAllToAll ? me * block : 0;
            FF_CUDA_CHECK(cudaMemcpyAsync(dst + r * block,
                                          static_cast<const std::uint8_t*>(sends[r]) + from, block,
                                          cudaMemcpyDeviceToDevice, stream));
          }
          break;
        case Kind::kReduceScatter:
        case Kind::kAllReduce: {
          const std::size_t offset = call.kind == Kind::kReduceScatter ? me * call.count : 0;
          local_group::launch_sum(sends, size, offset, call.count, call.dtype, dst, stream);
          break;
        }
      }
      FF_CUDA_CHECK(cudaStreamSynchronize(stream));
    } catch (...) {
      failed = std::current_exception();
    }
    meeting.arrive_and_wait();  // every rank has read the sends: receives may be overwritten
    if (failed) std::rethrow_exception(failed);
    if (result > 0) {
      FF_CUDA_CHECK(
          cudaMemcpyAsync(call.recv, out.data(), result, cudaMemcpyDeviceToDevice, stream));
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
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(kConnections).c_str(), 0);
}

LocalGroup::LocalGroup(int world_size, Sync sync) {
  FF_CHECK(world_size >= 1 && world_size <= kMaxRanks, E::kInvalidArgument, "local group of ",
           world_size, " ranks: it holds 1 to ", kMaxRanks);
  state_ = std::make_unique<State>(world_size, sync);
  FF_CUDA_CHECK(cudaGetDevice(&state_->device));
  const std::size_t bytes = 3 * sizeof(std::uint32_t) * kMaxRanks * local_group::kMaxBlocks;
  state_->flags = DeviceBuffer(bytes);
  FF_CUDA_CHECK(cudaMemset(state_->flags.data(), 0, bytes));
  // Every group of consecutive ranks whose size divides the world's, made here so ranks may
  // ask for theirs from their own threads.
  for (int size = 1; size <= world_size; ++size) {
    if (world_size % size != 0) continue;
    for (int r = 0; r < world_size; ++r) {
      state_->ranks.push_back(std::make_unique<LocalRank>(*state_, r, r - r % size, size));
    }
  }
  local_group::load_kernels();
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  static std::once_flag warned;
  if (world_size > 1 && sync == Sync::kDevice &&
      (connections == nullptr || std::atoi(connections) < 2 * world_size)) {
    std::call_once(warned, [&] {
      std::fprintf(
          stderr,
          "freezeframe warning: a local group of %d ranks on CUDA_DEVICE_MAX_CONNECTIONS=%s "
          "hardware queues: ranks' streams sharing one may stop a replayed collective "
          "(call LocalGroup::prepare_process() before the first CUDA call)\n",
          world_size, connections == nullptr ? "8 (unset)" : connections);
    });
  }
}

LocalGroup::~LocalGroup() = default;

int LocalGroup::world_size() const { return state_->world; }

LocalGroup::Sync LocalGroup::sync() const { return state_->sync; }

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
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        FF_CUDA_CHECK(cudaSetDevice(device));
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace freezeframe
