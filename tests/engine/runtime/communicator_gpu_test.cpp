// The NCCL communicator of one rank on one GPU: each collective of a group of one gives its
// input back (an all-gather, reduce-scatter, all-reduce and all-to-all of a single rank are
// copies), eagerly and replayed from a captured CUDA graph, into poisoned outputs, for bf16 and
// f32. Groups of several GPUs run where a machine has them.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/engine/runtime/nccl_communicator.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

enum class Collective { kAllGather, kReduceScatter, kAllReduce, kAllToAll };

void run(Communicator& comm, Collective c, const void* send, void* recv, std::size_t count,
         DType dtype, cudaStream_t stream) {
  switch (c) {
    case Collective::kAllGather: comm.all_gather(send, recv, count, dtype, stream); return;
    case Collective::kReduceScatter: comm.reduce_scatter(send, recv, count, dtype, stream); return;
    case Collective::kAllReduce: comm.all_reduce(send, recv, count, dtype, stream); return;
    case Collective::kAllToAll: comm.all_to_all(send, recv, count, dtype, stream); return;
  }
}

TEST(NcclCommunicator, OneRankGivesItsInputBackEagerAndInAGraph) {
  FF_REQUIRE_GPU();
  NcclCommunicator comm(NcclGroupId::create(), 0, 1);
  ASSERT_EQ(comm.rank(), 0);
  ASSERT_EQ(comm.world_size(), 1);
  Stream stream = Stream::create();
  std::mt19937 rng(3);
  constexpr std::size_t kCount = 100'003;  // not a multiple of any vector width
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    const std::size_t bytes = kCount * size_of(dtype);
    std::vector<std::uint8_t> input(bytes);
    for (auto& b : input) b = static_cast<std::uint8_t>(rng() & 0x3F);  // finite values
    DeviceBuffer send(bytes), recv(bytes);
    FF_CUDA_CHECK(cudaMemcpy(send.data(), input.data(), bytes, cudaMemcpyHostToDevice));
    for (const Collective c : {Collective::kAllGather, Collective::kReduceScatter,
                               Collective::kAllReduce, Collective::kAllToAll}) {
      for (const bool graph : {false, true}) {
        SCOPED_TRACE(testing::Message() << name_of(dtype) << " collective " << int(c)
                                        << (graph ? " in a graph" : " eagerly"));
        FF_CUDA_CHECK(cudaMemsetAsync(recv.data(), 0xFF, bytes, stream.get()));
        if (graph) {
          const GraphExec exec(capture_graph(stream.get(), [&] {
            run(comm, c, send.data(), recv.data(), kCount, dtype, stream.get());
          }));
          exec.launch(stream.get());
        } else {
          run(comm, c, send.data(), recv.data(), kCount, dtype, stream.get());
        }
        stream.synchronize();
        std::vector<std::uint8_t> output(bytes);
        FF_CUDA_CHECK(cudaMemcpy(output.data(), recv.data(), bytes, cudaMemcpyDeviceToHost));
        EXPECT_EQ(std::memcmp(output.data(), input.data(), bytes), 0);
      }
    }
  }
}

TEST(NcclCommunicator, RefusesARankOutsideTheGroup) {
  FF_REQUIRE_GPU();
  EXPECT_THROW(NcclCommunicator(NcclGroupId::create(), 1, 1), Error);
  EXPECT_THROW(NcclCommunicator(NcclGroupId::create(), -1, 2), Error);
}

}  // namespace
}  // namespace freezeframe
