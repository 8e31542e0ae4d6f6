// The local group: T ranks as threads on one GPU, each with its own stream. Every collective
// against the host's answer, for 2, 3 and 4 ranks, f32 and bf16, counts over many blocks and
// of odd sizes, an all-reduce in place, into poisoned outputs: eagerly, then each rank's
// sequence of collectives captured in its own graph and replayed with new inputs; and eagerly
// in a host-synchronized group; the same for groups inside the group. Ranks that call
// different collectives are refused on every rank.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/error.h"
#include "freezeframe/core/host_tensor.h"
#include "freezeframe/engine/runtime/local_group.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

// What ranks sharing the GPU need of CUDA (LocalGroup::prepare_process), set while the binary's
// statics are made, before any CUDA call.
const bool kPrepared = (LocalGroup::prepare_process(), true);

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

/// Checks what rank `r` received (its recv, or its send for the in-place all-reduce).
void check(Op op, std::size_t count, int world, int r, DType dtype, const Rank& rank,
           const std::vector<HostTensor>& sends, const std::string& what) {
  const std::vector<float> want = expected(op, count, world, r, sends);
  HostTensor got(dtype, {static_cast<std::int64_t>(want.size())});
  const void* from = op == Op::kAllReduceInPlace ? rank.send.data() : rank.recv.data();
  FF_CUDA_CHECK(cudaMemcpy(got.data(), from, got.bytes(), cudaMemcpyDeviceToHost));
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

/// Every collective of `group`'s groups of `group_size` ranks (the whole group by default)
/// eagerly and, with `graphs`, captured and replayed.
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
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const std::size_t count : {std::size_t(1), std::size_t(37), std::size_t(100'003)}) {
      std::vector<Rank> ranks(ranks_in_all);
      const std::size_t most = count * world * size_of(dtype);
      for (Rank& rank : ranks) {
        rank.send = DeviceBuffer(most);
        rank.recv = DeviceBuffer(most);
      }
      // New random sends for `op` on every rank, uploaded on its stream; poisoned receives.
      auto fill = [&](Op op) {
        std::vector<HostTensor> sends;
        for (int r = 0; r < ranks_in_all; ++r) {
          sends.emplace_back(dtype, std::initializer_list<std::int64_t>{static_cast<std::int64_t>(
                                        send_elements(op, count, world))});
          testing::fill_normal(sends.back(), rng);
          FF_CUDA_CHECK(cudaMemcpyAsync(ranks[r].send.data(), sends.back().data(),
                                        sends.back().bytes(), cudaMemcpyHostToDevice,
                                        ranks[r].stream.get()));
          FF_CUDA_CHECK(cudaMemsetAsync(ranks[r].recv.data(), 0xFF, most, ranks[r].stream.get()));
        }
        return sends;
      };
      const std::string what = std::string(name_of(dtype)) + ", " + std::to_string(count) +
                               " elements a block, groups of " + std::to_string(world);

      // Eagerly, one collective at a time.
      for (const Op op : kOps) {
        const std::vector<HostTensor> sends = fill(op);
        group.run([&](int r) {
          run(comm(r), op, ranks[r], count, dtype);
          ranks[r].stream.synchronize();
        });
        for (int r = 0; r < ranks_in_all; ++r) {
          check(op, count, world, r % world, dtype, ranks[r], group_of(sends, r),
                what + ", op " + std::to_string(int(op)) + ", rank " + std::to_string(r));
        }
      }

      // Each rank captures its graph of one collective; replayed three times with new inputs.
      for (const Op op : kOps) {
        if (!graphs) break;
        std::vector<GraphExec> graphs(ranks_in_all);
        group.run([&](int r) {
          graphs[r] = GraphExec(capture_graph(ranks[r].stream.get(),
                                              [&] { run(comm(r), op, ranks[r], count, dtype); }));
        });
        for (int replay = 0; replay < 3; ++replay) {
          const std::vector<HostTensor> sends = fill(op);
          for (int r = 0; r < ranks_in_all; ++r) graphs[r].launch(ranks[r].stream.get());
          for (int r = 0; r < ranks_in_all; ++r) ranks[r].stream.synchronize();
          for (int r = 0; r < ranks_in_all; ++r) {
            check(op, count, world, r % world, dtype, ranks[r], group_of(sends, r),
                  what + ", op " + std::to_string(int(op)) + ", replay " + std::to_string(replay) +
                      ", rank " + std::to_string(r));
          }
        }
      }
    }
  }
}

class LocalGroupRanks : public ::testing::TestWithParam<int> {};

TEST_P(LocalGroupRanks, EveryCollectiveEagerlyAndReplayedFromGraphs) {
  FF_REQUIRE_GPU();
  LocalGroup group(GetParam());
  ASSERT_EQ(group.world_size(), GetParam());
  EXPECT_EQ(group.sync(), LocalGroup::Sync::kDevice);
  check_every_collective(group, /*graphs=*/true);
}

// Host-synchronized (what compute-sanitizer can run): the same results, eagerly; a capture is
// refused on every rank, and the group goes on.
TEST_P(LocalGroupRanks, EveryCollectiveSynchronizedOnTheHost) {
  FF_REQUIRE_GPU();
  LocalGroup group(GetParam(), LocalGroup::Sync::kHost);
  check_every_collective(group, /*graphs=*/false);
  const int world = group.world_size();
  std::vector<Rank> ranks(static_cast<std::size_t>(world));
  for (Rank& rank : ranks) {
    rank.send = DeviceBuffer(1024);
    rank.recv = DeviceBuffer(1024);
  }
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
    EXPECT_NE(m.find("no graph can capture it"), std::string::npos) << m;
  }
  group.run([&](int r) {
    group.rank(r).all_reduce(ranks[r].send.data(), ranks[r].recv.data(), 4, DType::kF32,
                             ranks[r].stream.get());
    ranks[r].stream.synchronize();
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, LocalGroupRanks, ::testing::Values(1, 2, 3, 4));

// Groups inside the group (DCP pairs inside four tensor-parallel ranks): the collectives of
// pairs and of single ranks after the whole group's, on the same flags, eagerly and replayed,
// and host-synchronized; a size that does not divide the group is refused.
TEST(LocalGroup, GroupsInsideTheGroup) {
  FF_REQUIRE_GPU();
  LocalGroup group(4);
  check_every_collective(group, /*graphs=*/true, 4);
  check_every_collective(group, /*graphs=*/true, 2);
  check_every_collective(group, /*graphs=*/true, 1);
  check_every_collective(group, /*graphs=*/true, 4);
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
  LocalGroup on_the_host(4, LocalGroup::Sync::kHost);
  check_every_collective(on_the_host, /*graphs=*/false, 2);
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
    EXPECT_NE(m.find("rank 0 calls all_gather of 10 f32 while rank 1 calls all_gather of 11 f32"),
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

}  // namespace
}  // namespace freezeframe
