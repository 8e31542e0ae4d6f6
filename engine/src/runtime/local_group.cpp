#include "freezeframe/engine/runtime/local_group.h"

#include <array>
#include <barrier>
#include <cstdint>
#include <exception>
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
  /// is left waiting for a rank that threw).
  std::array<Call, kMaxRanks> meet_and_check(int rank, const Call& call) {
    const std::array<Call, kMaxRanks> all = meet(rank, call);
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

  void run(int rank, const Call& call, cudaStream_t stream) {
    if (sync == Sync::kHost) return run_on_host(rank, call, stream);
    const std::array<Call, kMaxRanks> all = meet_and_check(rank, call);
    local_group::Collective c;
    c.kind = call.kind;
    c.rank = rank;
    c.world = world;
    c.count = call.count;
    c.dtype = call.dtype;
    for (int r = 0; r < world; ++r) {
      c.send[r] = all[r].send;
      c.recv[r] = all[r].recv;
    }
    c.arrived = flag_array(0);
    c.left = flag_array(1);
    c.epochs = flag_array(2);
    std::exception_ptr failed;
    try {
      local_group::launch(c, stream);
    } catch (...) {
      failed = std::current_exception();
    }
    // Nobody launches its next kernel before every rank's collective is in its stream. The
    // ranks share one CUDA context, where loading a kernel on its first launch (CUDA's lazy
    // module loading, the default) waits for the device: a rank loading one while its
    // collective spins for a rank that has not yet launched its own would wait forever.
    meeting.arrive_and_wait();
    if (failed) std::rethrow_exception(failed);
  }

  /// Sync::kHost: no kernel waits for another rank's (local_group.h).
  void run_on_host(int rank, const Call& call, cudaStream_t stream) {
    // Every rank of a group captures the same collectives, so each refuses alike here.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    FF_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    FF_CHECK(capturing == cudaStreamCaptureStatusNone, E::kUnsupported,
             "local group: ", name_of(call.kind),
             " waits for the host in a host-synchronized group (LocalGroup::Sync::kHost), so no "
             "graph can capture it");
    FF_CUDA_CHECK(cudaStreamSynchronize(stream));  // this rank's send is written
    const std::array<Call, kMaxRanks> all = meet_and_check(rank, call);
    const std::size_t block = call.count * size_of(call.dtype);
    const std::size_t result =
        call.kind == Kind::kAllGather || call.kind == Kind::kAllToAll ? block * world : block;
    DeviceBuffer& out = scratch[static_cast<std::size_t>(rank)];
    std::exception_ptr failed;
    try {
      if (out.bytes() < result) out = DeviceBuffer(result);
      auto* dst = static_cast<std::uint8_t*>(out.data());
      const void* sends[kMaxRanks] = {};
      for (int r = 0; r < world; ++r) sends[r] = all[r].send;
      switch (call.kind) {
        case Kind::kAllGather:
        case Kind::kAllToAll:
          for (int r = 0; r < world; ++r) {
            const std::size_t from = call.kind == Kind::kAllToAll ? rank * block : 0;
            FF_CUDA_CHECK(cudaMemcpyAsync(dst + r * block,
                                          static_cast<const std::uint8_t*>(sends[r]) + from, block,
                                          cudaMemcpyDeviceToDevice, stream));
          }
          break;
        case Kind::kReduceScatter:
        case Kind::kAllReduce: {
          const std::size_t offset = call.kind == Kind::kReduceScatter ? rank * call.count : 0;
          local_group::launch_sum(sends, world, offset, call.count, call.dtype, dst, stream);
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

class LocalRank final : public Communicator {
 public:
  LocalRank(LocalGroup::State& group, int rank) : group_(group), rank_(rank) {}
  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] int world_size() const override { return group_.world; }

  void all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override {
    group_.run(rank_, {Kind::kAllGather, send, recv, count, dtype}, stream);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, DType dtype,
                      cudaStream_t stream) override {
    group_.run(rank_, {Kind::kReduceScatter, send, recv, count, dtype}, stream);
  }
  void all_reduce(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override {
    group_.run(rank_, {Kind::kAllReduce, send, recv, count, dtype}, stream);
  }
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                  cudaStream_t stream) override {
    group_.run(rank_, {Kind::kAllToAll, send, recv, count, dtype}, stream);
  }

 private:
  LocalGroup::State& group_;
  int rank_;
};

}  // namespace

LocalGroup::LocalGroup(int world_size, Sync sync) {
  FF_CHECK(world_size >= 1 && world_size <= kMaxRanks, E::kInvalidArgument, "local group of ",
           world_size, " ranks: it holds 1 to ", kMaxRanks);
  state_ = std::make_unique<State>(world_size, sync);
  FF_CUDA_CHECK(cudaGetDevice(&state_->device));
  const std::size_t bytes = 3 * sizeof(std::uint32_t) * kMaxRanks * local_group::kMaxBlocks;
  state_->flags = DeviceBuffer(bytes);
  FF_CUDA_CHECK(cudaMemset(state_->flags.data(), 0, bytes));
  for (int r = 0; r < world_size; ++r) {
    state_->ranks.push_back(std::make_unique<LocalRank>(*state_, r));
  }
}

LocalGroup::~LocalGroup() = default;

int LocalGroup::world_size() const { return state_->world; }

LocalGroup::Sync LocalGroup::sync() const { return state_->sync; }

Communicator& LocalGroup::rank(int r) {
  FF_CHECK(r >= 0 && r < state_->world, E::kInvalidArgument, "local group: rank ", r, " of ",
           state_->world);
  return *state_->ranks[static_cast<std::size_t>(r)];
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
