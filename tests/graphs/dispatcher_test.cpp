// graphs/: the dispatcher's choices and padding, capture keys per mode, and mode lowering.

#include <gtest/gtest.h>

#include "freezeframe/base/error.h"
#include "freezeframe/graphs/capture_sizes.h"
#include "freezeframe/graphs/dispatcher.h"

namespace freezeframe {
namespace {

TEST(CaptureSizes, DefaultLadderMatchesVllm) {
  const auto sizes = default_capture_sizes(512);
  ASSERT_EQ(sizes.size(), 3u + 31u + 17u);
  EXPECT_EQ(sizes[0], 1);
  EXPECT_EQ(sizes[2], 4);
  EXPECT_EQ(sizes[3], 8);
  EXPECT_EQ(sizes[33], 248);
  EXPECT_EQ(sizes[34], 256);
  EXPECT_EQ(sizes.back(), 512);
  EXPECT_EQ(default_capture_sizes(20), (std::vector<int>{1, 2, 4, 8, 16}));
}

TEST(CaptureSizes, PadsToTheSmallestSizeThatHolds) {
  const auto sizes = default_capture_sizes(512);
  const std::pair<int, int> cases[] = {{1, 1},     {3, 4},     {7, 8},     {25, 32},   {45, 48},
                                       {123, 128}, {248, 248}, {249, 256}, {500, 512}, {513, 0}};
  for (auto [tokens, padded] : cases) EXPECT_EQ(padded_size(sizes, tokens), padded) << tokens;
}

TEST(Dispatcher, FullAndPiecewiseRunsUniformDecodesFullAndTheRestPiecewise) {
  const Dispatcher d(CudaGraphMode::kFullAndPiecewise, default_capture_sizes(512));
  const Dispatch decode = d.dispatch(45, 45, true);
  EXPECT_EQ(decode.mode, RuntimeMode::kFull);
  EXPECT_EQ(decode.descriptor, (BatchDescriptor{48, 48, true}));
  const Dispatch mixed = d.dispatch(123, 7, false);
  EXPECT_EQ(mixed.mode, RuntimeMode::kPiecewise);
  EXPECT_EQ(mixed.descriptor, (BatchDescriptor{128, 0, false}));
  const Dispatch big = d.dispatch(600, 600, true);
  EXPECT_EQ(big.mode, RuntimeMode::kEager) << "above the largest capture size";
  EXPECT_EQ(big.descriptor.num_tokens, 600) << "eager batches are not padded";
  EXPECT_EQ(d.full_keys().size(), 51u);
  EXPECT_EQ(d.piecewise_keys().size(), 51u);
  EXPECT_EQ(d.full_keys().front().num_tokens, 512) << "captured largest first";
}

TEST(Dispatcher, FullModeUsesTheRelaxedKeyForAnyBatch) {
  const Dispatcher d(CudaGraphMode::kFull, {1, 2, 4, 8});
  EXPECT_EQ(d.dispatch(3, 2, false).mode, RuntimeMode::kFull);
  EXPECT_EQ(d.dispatch(3, 2, false).descriptor, (BatchDescriptor{4, 0, false}));
  EXPECT_EQ(d.dispatch(3, 3, true).descriptor, (BatchDescriptor{4, 0, false}));
  EXPECT_TRUE(d.piecewise_keys().empty());
}

TEST(Dispatcher, UniformDecodeGraphsStopAtTheRequestLimit) {
  // 256 sequences at most: a uniform decode batch of 264 cannot exist, so neither does its graph.
  const Dispatcher d(CudaGraphMode::kFullAndPiecewise, default_capture_sizes(512), 256);
  EXPECT_EQ(d.full_keys().size(), 35u);  // 1, 2, 4, 8, ..., 248, 256
  EXPECT_EQ(d.full_keys().front(), (BatchDescriptor{256, 256, true}));
  EXPECT_EQ(d.piecewise_keys().size(), 51u);
  const Dispatch decode = d.dispatch(250, 250, true);
  EXPECT_EQ(decode.mode, RuntimeMode::kFull);
  EXPECT_EQ(decode.descriptor, (BatchDescriptor{256, 256, true}));
}

TEST(Dispatcher, FullDecodeOnlyRunsOtherBatchesEagerly) {
  const Dispatcher d(CudaGraphMode::kFullDecodeOnly, {1, 2, 4, 8});
  EXPECT_EQ(d.dispatch(7, 7, true).mode, RuntimeMode::kFull);
  EXPECT_EQ(d.dispatch(7, 3, false).mode, RuntimeMode::kEager);
}

TEST(Dispatcher, PiecewiseAndNone) {
  const Dispatcher piecewise(CudaGraphMode::kPiecewise, {8, 16});
  EXPECT_EQ(piecewise.dispatch(5, 5, true).mode, RuntimeMode::kPiecewise);
  EXPECT_TRUE(piecewise.full_keys().empty());
  const Dispatcher none(CudaGraphMode::kNone, {8, 16});
  EXPECT_EQ(none.dispatch(5, 5, true).mode, RuntimeMode::kEager);
  EXPECT_TRUE(none.capture_sizes().empty());
}

TEST(Dispatcher, RejectsBadSizesAndBatches) {
  EXPECT_THROW(Dispatcher(CudaGraphMode::kFull, {4, 2}), Error);
  EXPECT_THROW(Dispatcher(CudaGraphMode::kFull, {0, 2}), Error);
  const Dispatcher d(CudaGraphMode::kFull, {8});
  EXPECT_THROW((void)d.dispatch(0, 1, false), Error);
  EXPECT_THROW((void)d.dispatch(4, 5, false), Error);
  EXPECT_THROW((void)d.dispatch(4, 2, true), Error) << "uniform decode means one token per request";
}

TEST(GraphMode, WeakestScopeLowersTheMode) {
  using M = CudaGraphMode;
  using S = FullGraphScope;
  EXPECT_EQ(lower_mode(M::kFull, S::kAny), M::kFull);
  EXPECT_EQ(lower_mode(M::kFull, S::kUniformBatch), M::kFullAndPiecewise);
  EXPECT_EQ(lower_mode(M::kFull, S::kUniformSingleTokenDecode), M::kFullAndPiecewise);
  EXPECT_EQ(lower_mode(M::kFullAndPiecewise, S::kNone), M::kPiecewise);
  EXPECT_EQ(lower_mode(M::kFullDecodeOnly, S::kUniformSingleTokenDecode), M::kFullDecodeOnly);
  EXPECT_EQ(lower_mode(M::kPiecewise, S::kNone), M::kPiecewise);
  EXPECT_THROW((void)lower_mode(M::kFull, S::kNone), Error);
  EXPECT_THROW((void)lower_mode(M::kFullDecodeOnly, S::kNone), Error);
  EXPECT_EQ(parse_graph_mode("full_and_piecewise"), M::kFullAndPiecewise);
  EXPECT_FALSE(parse_graph_mode("fullgraph").has_value());
}

}  // namespace
}  // namespace freezeframe
