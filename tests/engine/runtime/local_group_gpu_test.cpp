// The local group: T ranks as threads on one GPU, each with its own stream. Every collective
// against the host's answer, for 1 to 4 ranks, f32 and bf16, counts over many blocks and of odd
// sizes, an all-reduce in place, into poisoned outputs; one rank's inputs late on the device
// each time (a long copy ahead of them on its stream), and every rank poisoning its send and
// reading its receive right after the collective, with no host synchronization between: the
// events must order it all. Then every collective in sequence, enqueued back to back; groups
// inside the group; between graphs that write the sends and read the receives. Refused on
// every rank alike: different collectives, a capture. A rank that throws releases the others;
// a rank kept waiting says for whom.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/host_tensor.h"
#include "freezeframe/engine/runtime/local_group.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

enum class Op { kAllGather, kReduceScatter, kAllReduce, kAllReduceInPlace, kAllToAll };
constexpr Op kOps[] = {Op::kAllGather, Op::kReduceScatter, Op::kAllReduce, Op::kAllReduceInPlace,
                       Op::kAllToAll};

/// Elements each rank sends for `op` with a per-rank block of `count`.
std::size_t send_elements(Op op, std::size_t count, int world) {
  return op == Op::kAllGather || op == Op::kAllReduce || op == Op::kAllReduceInPlace
             ? count
             : count * world;
}
std::size_t recv_elements(Op op, std::size_t count, int world) {
  return op == Op::kAllGather || op == Op::kAllToAll ? count * world : count;
}

/// What rank `rank` must receive, from every rank's send.
std::vector<float> expected(Op op, std::size_t count, int world, int rank,
                            const std::vector<HostTensor>& sends) {
  std::vector<float> want(recv_elements(op, count, world));
  for (std::size_t i = 0; i < want.size(); ++i) {
    switch (op) {
      case Op::kAllGather: want[i] = sends[i / count].get(std::int64_t(i % count)); break;
      case Op::kAllToAll:
        want[i] = sends[i / count].get(std::int64_t(rank * count + i % count));
        break;
      case Op::kReduceScatter:
      case Op::kAllReduce:
      case Op::kAllReduceInPlace: {
        const std::size_t from = op == Op::kReduceScatter ? rank * count + i : i;
        float sum = 0.0f;  // in rank order, in f32, as the kernel adds
        for (int r = 0; r < world; ++r) sum += sends[r].get(std::int64_t(from));
        want[i] = sum;
        break;
      }
    }
  }
  return want;
}

struct Rank {
  Stream stream = Stream::create();
  DeviceBuffer send, recv;
  DeviceBuffer result;  // the receive (or the in-place send) as the collective left it
};

/// A long copy (64 MiB) on a stream: whatever follows on it comes late to the device.
struct Delay {
  DeviceBuffer from{std::size_t(64) << 20}, to{std::size_t(64) << 20};
  void operator()(cudaStream_t stream) const {
    FF_CUDA_CHECK(
        cudaMemcpyAsync(to.data(), from.data(), from.bytes(), cudaMemcpyDeviceToDevice, stream));
  }
};

void run(Communicator& comm, Op op, Rank& rank, std::size_t count, DType dtype) {
  const cudaStream_t s = rank.stream.get();
  switch (op) {
    case Op::kAllGather:
      comm.all_gather(rank.send.data(), rank.recv.data(), count, dtype, s);
      break;
    case Op::kReduceScatter:
      comm.reduce_scatter(rank.send.data(), rank.recv.data(), count, dtype, s);
      break;
    case Op::kAllReduce:
      comm.all_reduce(rank.send.data(), rank.recv.data(), count, dtype, s);
      break;
    case Op::kAllReduceInPlace:
      comm.all_reduce(rank.send.data(), rank.send.data(), count, dtype, s);
      break;
    case Op::kAllToAll: comm.all_to_all(rank.send.data(), rank.recv.data(), count, dtype, s); break;
  }
}

/// The collective, then on the rank's stream at once: its result kept, its send and receive
/// poisoned (had another rank's part not finished, it would read or write poison).
void run_and_poison(Communicator& comm, Op op, Rank& rank, std::size_t count, DType dtype) {
  run(comm, op, rank, count, dtype);
  const cudaStream_t s = rank.stream.get();
  const void* from = op == Op::kAllReduceInPlace ? rank.send.data() : rank.recv.data();
  FF_CUDA_CHECK(
      cudaMemcpyAsync(rank.result.data(), from, rank.result.bytes(), cudaMemcpyDeviceToDevice, s));
  FF_CUDA_CHECK(cudaMemsetAsync(rank.send.data(), 0xFF, rank.send.bytes(), s));
  FF_CUDA_CHECK(cudaMemsetAsync(rank.recv.data(), 0xFF, rank.recv.bytes(), s));
}

/// Checks what rank `r` received (run_and_poison kept it).
void check(Op op, std::size_t count, int world, int r, DType dtype, const Rank& rank,
           const std::vector<HostTensor>& sends, const std::string& what) {
  const std::vector<float> want = expected(op, count, world, r, sends);
  HostTensor got(dtype, {static_cast<std::int64_t>(want.size())});
  FF_CUDA_CHECK(cudaMemcpy(got.data(), rank.result.data(), got.bytes(), cudaMemcpyDeviceToHost));
  // bf16: the kernel rounds the same f32 sum once, so within half a bf16 step of it.
  const double tolerance = dtype == DType::kF32 ? 0.0 : 1.0 / 256;
  int wrong = 0;
  for (std::size_t i = 0; i < want.size() && wrong < 5; ++i) {
    const double g = got.get(std::int64_t(i)), w = want[i];
    if (!(std::abs(g - w) <= tolerance * std::abs(w))) {
      ADD_FAILURE() << what << ", rank " << r << ", element " << i << ": " << g << ", expected "
                    << w;
      ++wrong;
    }
  }
}

/// Every collective of `group`'s groups of `group_size` ranks (the whole group by default):
/// one at a time, one rank's inputs late each time; then all of them back to back; with
/// `graphs`, each rank's sends written and receives read by graphs replayed around them.
void check_every_collective(LocalGroup& group, bool graphs, int group_size = 0) {
  const int ranks_in_all = group.world_size();
  const int world = group_size > 0 ? group_size : ranks_in_all;
  auto comm = [&](int r) -> Communicator& { return group.rank(r, world); };
  // Rank r's group's sends, of all ranks'.
  auto group_of = [&](const std::vector<HostTensor>& all, int r) {
    const int first = r - r % world;
    return std::vector<HostTensor>(all.begin() + first, all.begin() + first + world);
  };
  std::mt19937 rng(static_cast<unsigned>(ranks_in_all * 10 + world));
  const Delay delay;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const std::size_t count : {std::size_t(1), std::size_t(37), std::size_t(100'003)}) {
      const std::size_t most = count * world * size_of(dtype);
      auto make_ranks = [&] {
        std::vector<Rank> ranks(static_cast<std::size_t>(ranks_in_all));
        for (Rank& rank : ranks) {
          rank.send = DeviceBuffer(most);
          rank.recv = DeviceBuffer(most);
          rank.result = DeviceBuffer(most);
        }
        return ranks;
      };
      // New random sends for `op` on every rank (host values), poisoned receives.
      auto new_sends = [&](Op op) {
        std::vector<HostTensor> sends;
        for (int r = 0; r < ranks_in_all; ++r) {
          sends.emplace_back(dtype, std::initializer_list<std::int64_t>{static_cast<std::int64_t>(
                                        send_elements(op, count, world))});
          testing::fill_normal(sends.back(), rng);
        }
        return sends;
      };
      auto upload = [&](Rank& rank, const HostTensor& send) {
        FF_CUDA_CHECK(cudaMemcpyAsync(rank.send.data(), send.data(), send.bytes(),
                                      cudaMemcpyHostToDevice, rank.stream.get()));
        FF_CUDA_CHECK(cudaMemsetAsync(rank.recv.data(), 0xFF, most, rank.stream.get()));
      };
      auto check_all = [&](std::vector<Rank>& ranks, Op op, const std::vector<HostTensor>& sends,
                           const std::string& what) {
        for (int r = 0; r < ranks_in_all; ++r) {
          check(op, count, world, r % world, dtype, ranks[r], group_of(sends, r),
                what + ", op " + std::to_string(int(op)) + ", rank " + std::to_string(r));
        }
      };
      const std::string what = std::string(name_of(dtype)) + ", " + std::to_string(count) +
                               " elements a block, groups of " + std::to_string(world);

      // One at a time, rank (op mod T)'s inputs late on the device.
      std::vector<Rank> ranks = make_ranks();
      for (const Op op : kOps) {
        const std::vector<HostTensor> sends = new_sends(op);
        group.run([&](int r) {
          if (r == int(op) % ranks_in_all) delay(ranks[r].stream.get());
          upload(ranks[r], sends[r]);
          run_and_poison(comm(r), op, ranks[r], count, dtype);
          ranks[r].stream.synchronize();
        });
        check_all(ranks, op, sends, what);
      }

      // Every collective back to back, each rank with its buffers, synchronized once.
      std::vector<std::vector<Rank>> per_op;
      std::vector<std::vector<HostTensor>> sends;
      for (const Op op : kOps) {
        per_op.push_back(make_ranks());
        sends.push_back(new_sends(op));
      }
      group.run([&](int r) {
        for (std::size_t o = 0; o < std::size(kOps); ++o) {
          Rank& rank = per_op[o][static_cast<std::size_t>(r)];
          if (r == 0) delay(rank.stream.get());
          upload(rank, sends[o][static_cast<std::size_t>(r)]);
          run_and_poison(comm(r), kOps[o], rank, count, dtype);
        }
        for (auto& op_ranks : per_op) op_ranks[static_cast<std::size_t>(r)].stream.synchronize();
      });
      for (std::size_t o = 0; o < std::size(kOps); ++o) {
        check_all(per_op[o], kOps[o], sends[o], what + ", back to back");
      }

      // Graphs around the collective: one copies the send from a staging buffer, one keeps the
      // result; replayed three times with new staged sends.
      if (!graphs) continue;
      for (const Op op : kOps) {
        std::vector<DeviceBuffer> staged;
        for (int r = 0; r < ranks_in_all; ++r) staged.emplace_back(most);
        std::vector<GraphExec> before(ranks_in_all), after(ranks_in_all);
        group.run([&](int r) {
          Rank& rank = ranks[r];
          const cudaStream_t s = rank.stream.get();
          before[r] = GraphExec(capture_graph(s, [&] {
            FF_CUDA_CHECK(cudaMemcpyAsync(rank.send.data(), staged[r].data(), most,
                                          cudaMemcpyDeviceToDevice, s));
          }));
          after[r] = GraphExec(capture_graph(s, [&] {
            const void* from = op == Op::kAllReduceInPlace ? rank.send.data() : rank.recv.data();
            FF_CUDA_CHECK(
                cudaMemcpyAsync(rank.result.data(), from, most, cudaMemcpyDeviceToDevice, s));
            FF_CUDA_CHECK(cudaMemsetAsync(rank.send.data(), 0xFF, most, s));
          }));
        });
        for (int replay = 0; replay < 3; ++replay) {
          const std::vector<HostTensor> replay_sends = new_sends(op);
          for (int r = 0; r < ranks_in_all; ++r) {
            FF_CUDA_CHECK(cudaMemcpy(staged[r].data(), replay_sends[r].data(),
                                     replay_sends[r].bytes(), cudaMemcpyHostToDevice));
          }
          // A copy from pageable memory may return before its DMA lands, and the ranks'
          // streams do not wait for the legacy stream: wait for the device.
          FF_CUDA_CHECK(cudaDeviceSynchronize());
          group.run([&](int r) {
            const cudaStream_t s = ranks[r].stream.get();
            if (r == replay % ranks_in_all) delay(s);
            before[r].launch(s);
            run(comm(r), op, ranks[r], count, dtype);
            after[r].launch(s);
            ranks[r].stream.synchronize();
          });
          check_all(ranks, op, replay_sends,
                    what + ", between graphs, replay " + std::to_string(replay));
        }
      }
    }
  }
}

class LocalGroupRanks : public ::testing::TestWithParam<int> {};

TEST_P(LocalGroupRanks, EveryCollectiveOrderedByTheStreams) {
  FF_REQUIRE_GPU();
  LocalGroup group(GetParam());
  ASSERT_EQ(group.world_size(), GetParam());
  check_every_collective(group, /*graphs=*/true);
}

// A capture of a collective is refused on every rank alike, naming why; the group goes on.
TEST_P(LocalGroupRanks, CapturesAreRefusedOnEveryRank) {
  FF_REQUIRE_GPU();
  LocalGroup group(GetParam());
  const int world = group.world_size();
  std::vector<Rank> ranks(static_cast<std::size_t>(world));
  for (Rank& rank : ranks) {
    rank.send = DeviceBuffer(1024);
    rank.recv = DeviceBuffer(1024);
  }
  EXPECT_FALSE(group.rank(0).capturable());
  std::vector<std::string> messages(static_cast<std::size_t>(world));
  group.run([&](int r) {
    try {
      (void)capture_graph(ranks[r].stream.get(), [&] {
        group.rank(r).all_reduce(ranks[r].send.data(), ranks[r].recv.data(), 4, DType::kF32,
                                 ranks[r].stream.get());
      });
    } catch (const Error& e) {
      messages[r] = e.message();
    }
  });
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("rank 0's collective #1, all_reduce of 4 f32 is being captured"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("run between graphs"), std::string::npos) << m;
  }
  group.run([&](int r) {
    group.rank(r).all_reduce(ranks[r].send.data(), ranks[r].recv.data(), 4, DType::kF32,
                             ranks[r].stream.get());
    ranks[r].stream.synchronize();
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, LocalGroupRanks, ::testing::Values(1, 2, 3, 4));

// Groups inside the group (DCP pairs inside four tensor-parallel ranks): the collectives of
// pairs and of single ranks after the whole group's, on the same events; a size that does not
// divide the group is refused.
TEST(LocalGroup, GroupsInsideTheGroup) {
  FF_REQUIRE_GPU();
  LocalGroup group(4);
  check_every_collective(group, /*graphs=*/false, 4);
  check_every_collective(group, /*graphs=*/true, 2);
  check_every_collective(group, /*graphs=*/false, 1);
  check_every_collective(group, /*graphs=*/false, 4);
  EXPECT_EQ(group.rank(3, 2).rank(), 1);
  EXPECT_EQ(group.rank(3, 2).world_size(), 2);
  EXPECT_EQ(&group.rank(2, 4), &group.rank(2));
  try {
    (void)group.rank(0, 3);
    ADD_FAILURE() << "groups of 3 inside 4 ranks were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("groups of 3 ranks do not divide its 4"), std::string::npos)
        << e.message();
  }
}

TEST(LocalGroup, RanksCallingDifferentCollectivesAreRefusedOnEveryRank) {
  FF_REQUIRE_GPU();
  LocalGroup group(2);
  std::vector<Rank> ranks(2);
  for (Rank& rank : ranks) {
    rank.send = DeviceBuffer(1024);
    rank.recv = DeviceBuffer(1024);
  }
  std::vector<std::string> messages(2);
  group.run([&](int r) {
    try {
      group.rank(r).all_gather(ranks[r].send.data(), ranks[r].recv.data(), r == 0 ? 10 : 11,
                               DType::kF32, ranks[r].stream.get());
    } catch (const Error& e) {
      messages[r] = e.message();
    }
  });
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("rank 0 calls collective #1, all_gather of 10 f32 while rank 1 calls "
                     "collective #1, all_gather of 11 f32"),
              std::string::npos)
        << m;
  }
  // The group goes on: the next matching collective runs.
  group.run([&](int r) {
    group.rank(r).all_reduce(ranks[r].send.data(), ranks[r].recv.data(), 4, DType::kF32,
                             ranks[r].stream.get());
    ranks[r].stream.synchronize();
  });
  EXPECT_THROW((void)LocalGroup(9), Error);
  EXPECT_THROW((void)group.rank(2), Error);
}

// A rank that throws before a collective releases the others: theirs throw, naming it, and
// run() rethrows its own error. The group runs again afterwards.
TEST(LocalGroup, ARankThatThrowsReleasesTheOthers) {
  FF_REQUIRE_GPU();
  LocalGroup group(3);
  std::vector<Rank> ranks(3);
  for (Rank& rank : ranks) {
    rank.send = DeviceBuffer(1024);
    rank.recv = DeviceBuffer(1024);
  }
  std::vector<std::string> messages(3);
  try {
    group.run([&](int r) {
      if (r == 1) FF_THROW(ErrorCode::kInvalidArgument, "rank 1 found a bad input");
      try {
        group.rank(r).all_reduce(ranks[r].send.data(), ranks[r].recv.data(), 4, DType::kF32,
                                 ranks[r].stream.get());
      } catch (const Error& e) {
        messages[r] = e.message();
        throw;
      }
    });
    ADD_FAILURE() << "run() returned although rank 1 threw";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "rank 1 found a bad input");
  }
  for (const int r : {0, 2}) {
    EXPECT_NE(messages[r].find("rank 1 left the group with an error (rank 1 found a bad input)"),
              std::string::npos)
        << messages[r];
  }
  group.run([&](int r) {
    group.rank(r).all_reduce(ranks[r].send.data(), ranks[r].recv.data(), 4, DType::kF32,
                             ranks[r].stream.get());
    ranks[r].stream.synchronize();
  });
}

// A rank kept waiting says, every report_after, which rank has not come to which collective,
// and goes on waiting.
TEST(LocalGroup, ARankKeptWaitingSaysForWhom) {
  FF_REQUIRE_GPU();
  LocalGroup group(2, std::chrono::milliseconds(50));
  std::vector<Rank> ranks(2);
  for (Rank& rank : ranks) {
    rank.send = DeviceBuffer(1024);
    rank.recv = DeviceBuffer(1024);
  }
  ::testing::internal::CaptureStderr();
  group.run([&](int r) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    group.rank(r).all_gather(ranks[r].send.data(), ranks[r].recv.data(), 8, DType::kBF16,
                             ranks[r].stream.get());
    ranks[r].stream.synchronize();
  });
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("rank 0 has waited"), std::string::npos) << said;
  EXPECT_NE(said.find("collective #1, all_gather of 8 bf16 for rank(s) 1, which have not come"),
            std::string::npos)
      << said;
}

}  // namespace
}  // namespace freezeframe
