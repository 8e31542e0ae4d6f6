// HostCopy (the step's input upload as a kernel reading pinned memory): it copies exactly the
// length set before it runs, for lengths that are and are not multiples of its 16-byte loads,
// a graph holding it copies, at each replay, the source's bytes and length of that moment, and
// it spreads a table of the shape the source holds at that moment to its fixed row stride.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
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
  for (const std::size_t length :
       {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17},
        std::size_t{4099}, std::size_t{131'073}, kCapacity}) {
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

// A head of 1000 bytes, the table's shape in it at byte 512, its rows back to back from byte
// 1024 in the source and at a stride of 12 int32 from byte 1024 on the device: replays of one
// graph spread tables of other shapes, 16 bytes at a time or (widths not a multiple of 4) 4,
// writing nothing else.
TEST(HostCopy, AGraphSpreadsTheTableOfTheShapeTheSourceHolds) {
  FF_REQUIRE_GPU();
  constexpr std::size_t kHead = 1000, kShape = 512, kTable = 1024;
  constexpr int kStride = 12, kRows = 9;
  PinnedBuffer src(kTable + kRows * kStride * sizeof(int));
  DeviceBuffer dst(src.bytes() + kSlack);
  HostCopy copy(src, dst.data());
  copy.set_length(kHead);
  copy.spread_table(kShape, kTable, kStride, kRows);
  Stream stream = Stream::create();
  const GraphExec exec(capture_graph(stream.get(), [&] { copy.enqueue(stream.get()); }));
  std::mt19937 rng(11);
  auto* bytes = static_cast<std::uint8_t*>(src.data());
  for (const auto& [rows, width] : {std::pair{3, 8}, std::pair{9, 12}, std::pair{5, 3},
                                    std::pair{1, 1}, std::pair{0, 4}, std::pair{9, 5}}) {
    SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(width));
    for (std::size_t i = 0; i < src.bytes(); ++i) bytes[i] = static_cast<std::uint8_t>(rng());
    std::memcpy(bytes + kShape, &rows, sizeof(int));
    std::memcpy(bytes + kShape + sizeof(int), &width, sizeof(int));
    FF_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0xA5, dst.bytes(), stream.get()));
    exec.launch(stream.get());
    stream.synchronize();
    std::vector<std::uint8_t> got(dst.bytes());
    FF_CUDA_CHECK(cudaMemcpy(got.data(), dst.data(), got.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(got.data(), bytes, kHead), 0) << "the head";
    for (std::size_t i = kHead; i < kTable; ++i) ASSERT_EQ(got[i], 0xA5) << "byte " << i;
    const auto* table = reinterpret_cast<const int*>(got.data() + kTable);
    const auto* rows_in = reinterpret_cast<const int*>(bytes + kTable);
    for (int r = 0; r < kRows; ++r) {
      for (int c = 0; c < kStride; ++c) {
        const int v = table[r * kStride + c];
        if (r < rows && c < width) {
          ASSERT_EQ(v, rows_in[r * width + c]) << "row " << r << " column " << c;
        } else {
          ASSERT_EQ(static_cast<unsigned>(v), 0xA5A5A5A5u) << "row " << r << " column " << c;
        }
      }
    }
  }
  EXPECT_THROW(copy.spread_table(kShape, kTable, kStride, kRows + 1), Error) << "past the source";
}

}  // namespace
}  // namespace freezeframe
