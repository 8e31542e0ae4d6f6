// core/: dtypes, tensor views, errors, device probing.

#include <gtest/gtest.h>

#include <cmath>
#include <type_traits>

#include "freezeframe/base/dtype.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/device.h"
#include "freezeframe/core/element_value.h"
#include "freezeframe/core/host_tensor.h"
#include "freezeframe/core/tensor.h"

namespace freezeframe {
namespace {

TEST(DType, SizesAndNamesRoundTrip) {
  const DType all[] = {DType::kF32,     DType::kF16, DType::kBF16, DType::kFp8E4M3,
                       DType::kFp8E5M2, DType::kI32, DType::kI64,  DType::kU8};
  const std::size_t sizes[] = {4, 2, 2, 1, 1, 4, 8, 1};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(size_of(all[i]), sizes[i]) << name_of(all[i]);
    EXPECT_EQ(parse_dtype(name_of(all[i])), all[i]) << name_of(all[i]);
  }
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_FALSE(parse_dtype("f8").has_value());
}

TEST(DType, HostConversionsRoundAsTheFormatsDo) {
  EXPECT_EQ(round_through(DType::kBF16, 1.0f + 1.0f / 256), 1.0f);  // below bf16's 8-bit mantissa
  EXPECT_EQ(round_through(DType::kF16, 1.0f + 1.0f / 1024), 1.0f + 1.0f / 1024);
  EXPECT_EQ(round_through(DType::kFp8E4M3, 1000.0f), 448.0f) << "e4m3 saturates at 448";
  EXPECT_EQ(round_through(DType::kFp8E4M3, 1.0625f), 1.0f) << "ties round to even";
  EXPECT_EQ(round_through(DType::kFp8E5M2, 1.25f), 1.25f);
  EXPECT_EQ(round_through(DType::kI32, -7.0f), -7.0f);
}

TEST(TensorView, ContiguousStridesSelectAndReshape) {
  float data[2 * 3 * 4];
  TensorView t(data, DType::kF32, {2, 3, 4}, Device::cpu());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.span_bytes(), 96);
  const TensorView s = t.select(0, 1);
  EXPECT_EQ(s.dim(), 2);
  EXPECT_EQ(s.data(), data + 12);
  const TensorView r = t.reshape({6, 4});
  EXPECT_EQ(r.size(0), 6);
  EXPECT_EQ(t.describe(), "f32[2, 3, 4]");
  EXPECT_THROW((void)t.reshape({5, 5}), Error);
  EXPECT_THROW((void)t.size(3), Error);
}

TEST(TensorView, StridedViewReportsItsSpan) {
  float data[64];
  const std::int64_t shape[] = {4, 2};
  const std::int64_t strides[] = {8, 1};
  const TensorView t = TensorView::strided(data, DType::kF32, shape, strides, Device::cpu());
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.span_bytes(), (3 * 8 + 1 + 1) * 4);
}

// Columns of each row (q, k, v inside a qkv tensor) and rows, the strides kept; a range past
// the dimension refused.
TEST(TensorView, NarrowKeepsTheStrides) {
  float data[5 * 12];
  const TensorView qkv(data, DType::kF32, {5, 12}, Device::cpu());
  const TensorView k = qkv.narrow(1, 8, 2);
  EXPECT_EQ(k.data(), data + 8);
  EXPECT_EQ(k.size(0), 5);
  EXPECT_EQ(k.size(1), 2);
  EXPECT_EQ(k.stride(0), 12);
  EXPECT_FALSE(k.is_contiguous());
  EXPECT_EQ(k.span_bytes(), (4 * 12 + 1 + 1) * 4);
  const TensorView rows = qkv.narrow(0, 1, 3);
  EXPECT_EQ(rows.data(), data + 12);
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(qkv.narrow(1, 12, 0).size(1), 0) << "an empty range at the end";
  EXPECT_THROW((void)qkv.narrow(1, 10, 3), Error);
  EXPECT_THROW((void)qkv.narrow(1, -1, 2), Error);
  EXPECT_THROW((void)qkv.narrow(2, 0, 1), Error);
}

// A row's heads: [T, H·D] → [T, H, D] on a strided view (the k heads inside qkv).
TEST(TensorView, UnflattenSplitsADimensionKeepingTheStrides) {
  float data[5 * 12];
  const TensorView qkv(data, DType::kF32, {5, 12}, Device::cpu());
  const TensorView k = qkv.narrow(1, 4, 6).unflatten(1, 3);
  EXPECT_EQ(k.data(), data + 4);
  ASSERT_EQ(k.dim(), 3);
  EXPECT_EQ(k.size(0), 5);
  EXPECT_EQ(k.size(1), 3);
  EXPECT_EQ(k.size(2), 2);
  EXPECT_EQ(k.stride(0), 12);
  EXPECT_EQ(k.stride(1), 2);
  EXPECT_EQ(k.stride(2), 1);
  const TensorView rows = qkv.unflatten(0, 5);
  EXPECT_EQ(rows.size(1), 1);
  EXPECT_EQ(rows.stride(0), 12);
  EXPECT_TRUE(qkv.unflatten(1, 4).is_contiguous());
  EXPECT_THROW((void)qkv.unflatten(1, 5), Error) << "12 is not a multiple of 5";
  EXPECT_THROW((void)qkv.unflatten(1, 0), Error);
  EXPECT_THROW((void)qkv.unflatten(2, 1), Error);
}

TEST(Error, CarriesCodeFileLineAndMessage) {
  try {
    FF_CHECK(1 + 1 == 3, ErrorCode::kInvalidArgument, "num_heads (", 7, ") is odd");
    FAIL() << "FF_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.message(), "num_heads (7) is odd");
    EXPECT_NE(std::string(e.what()).find("core_test.cpp:"), std::string::npos) << e.what();
    EXPECT_GT(e.line(), 0);
  }
}

TEST(Error, CudaCheckNamesTheStatement) {
  try {
    FF_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "FF_CUDA_CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCudaError);
    EXPECT_NE(e.message().find("cudaErrorInvalidValue"), std::string::npos) << e.message();
  }
}

TEST(Handles, AreMoveOnly) {
  static_assert(!std::is_copy_constructible_v<DeviceBuffer>);
  static_assert(!std::is_copy_constructible_v<Stream>);
  static_assert(!std::is_copy_constructible_v<Event>);
  static_assert(!std::is_copy_constructible_v<PinnedBuffer>);
  static_assert(std::is_nothrow_move_constructible_v<DeviceBuffer>);
  DeviceBuffer empty;  // no allocation for an empty buffer
  EXPECT_EQ(empty.data(), nullptr);
  DeviceBuffer moved = std::move(empty);
  EXPECT_EQ(moved.bytes(), 0u);
}

TEST(Device, ProbeNeverThrows) {
  const bool gpu = has_gpu();
  EXPECT_FALSE(gpu_status().empty());
  if (gpu) {
    DeviceBuffer buffer(1024);
    EXPECT_NE(buffer.data(), nullptr);
    EXPECT_GE(allocation_counters().device_allocations, 1u);
  }
}

TEST(HostTensor, PoisonAndElementAccess) {
  HostTensor t(DType::kBF16, {3, 5});
  t.fill_bytes(0xFF);
  EXPECT_TRUE(std::isnan(t.get(4)));
  t.set(4, 2.5f);
  EXPECT_EQ(t.get(4), 2.5f);
  EXPECT_THROW(t.set(15, 0.0f), Error);
}

}  // namespace
}  // namespace freezeframe
