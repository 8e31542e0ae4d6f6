// HostCopy (the step's input upload as a kernel reading pinned memory): it copies exactly the
// length set before it runs, for lengths that are and are not multiples of its 16-byte loads,
// and a graph holding it copies, at each replay, the source's bytes and length of that moment.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/error.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "runtime/host_copy.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

constexpr std::size_t kCapacity = 200'000;
constexpr std::size_t kSlack = 256;  // destination bytes past the capacity, which stay poisoned

struct Fixture {
  PinnedBuffer src{kCapacity};
  DeviceBuffer dst{kCapacity + kSlack};
  HostCopy copy{src, dst.data()};
  Stream stream = Stream::create();
  std::mt19937 rng{7};

  void fill_source() {
    auto* bytes = static_cast<std::uint8_t*>(src.data());
    for (std::size_t i = 0; i < kCapacity; ++i) bytes[i] = static_cast<std::uint8_t>(rng());
  }
  void poison() { FF_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0xA5, dst.bytes(), stream.get())); }
  /// The first `length` bytes are the source's, every other one still poison.
  void expect_copied(std::size_t length) {
    stream.synchronize();
    std::vector<std::uint8_t> got(dst.bytes());
    FF_CUDA_CHECK(cudaMemcpy(got.data(), dst.data(), got.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(got.data(), src.data(), length), 0) << "length " << length;
    for (std::size_t i = length; i < got.size(); ++i) {
      ASSERT_EQ(got[i], 0xA5) << "byte " << i << " written, length " << length;
    }
  }
};

TEST(HostCopy, CopiesTheLengthSetBeforeItRuns) {
  FF_REQUIRE_GPU();
  Fixture f;
  for (const std::size_t length : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16},
                                   std::size_t{17}, std::size_t{4099}, std::size_t{131'073},
                                   kCapacity}) {
    f.fill_source();
    f.poison();
    f.copy.set_length(length);
    f.copy.enqueue(f.stream.get());
    f.expect_copied(length);
  }
  EXPECT_THROW(f.copy.set_length(kCapacity + 1), Error);
}

TEST(HostCopy, AGraphCopiesWhatTheSourceHoldsAtReplay) {
  FF_REQUIRE_GPU();
  Fixture f;
  f.copy.set_length(16);
  const GraphExec exec(capture_graph(f.stream.get(), [&] { f.copy.enqueue(f.stream.get()); }));
  for (const std::size_t length : {std::size_t{70'001}, std::size_t{5}, std::size_t{65'536}}) {
    f.fill_source();
    f.poison();
    f.copy.set_length(length);
    exec.launch(f.stream.get());
    f.expect_copied(length);
  }
}

}  // namespace
}  // namespace freezeframe
