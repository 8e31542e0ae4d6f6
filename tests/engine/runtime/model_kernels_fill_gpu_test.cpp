// The model's kernels that are not element-wise maps (model_kernels_gpu_test.cpp has those):
// fill_uniform's counter hash pinned against its documented stream, and every kernel's
// argument errors, thrown before anything is enqueued so that outputs keep their poison.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/model_kernels_test_util.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/element_value.h"
#include "model/rope_frequencies.h"
#include "runtime/model_kernels.h"
#include "support/device_tensor.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

namespace mk = model_kernels;
using testing::close;
using testing::download;
using testing::first_columns;
using testing::poisoned;
using testing::poisoned_tensor;
using testing::unit_roundoff;
using testing::upload;
using testing::upload_vector;

// ---------------------------------------------------------------------------------------------
// fill_uniform

// The kernel's documented stream: element i of seed s is lo + (hi − lo)·u with u the top 24
// bits of SplitMix64's finaliser applied to mix(s) + i·golden, one f32 fma, then one rounding.
// Pinning it here keeps synthetic weights identical across versions and devices.
std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

float expected_uniform(std::uint64_t seed, std::int64_t i, float lo, float hi, DType dtype) {
  const std::uint64_t h =
      splitmix64_mix(splitmix64_mix(seed) + static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull);
  const float u = static_cast<float>(h >> 40) * 0x1.0p-24f;
  return round_through(dtype, std::fma(hi - lo, u, lo));
}

HostTensor run_fill(DType dtype, std::int64_t n, std::uint64_t seed, float lo, float hi) {
  HostTensor t = poisoned_tensor(dtype, {n});
  auto d = upload(t);
  mk::fill_uniform(d.view, seed, lo, hi, nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());
  download(d.view, t);
  return t;
}

struct FillCase {
  const char* name;
  DType dtype;
  std::int64_t numel;
  float lo, hi;
};

std::ostream& operator<<(std::ostream& os, const FillCase& c) { return os << c.name; }

class FillUniform : public ::testing::TestWithParam<FillCase> {};

TEST_P(FillUniform, IsTheCounterHashWithinRangeAndUnbiased) {
  FF_REQUIRE_GPU();
  const FillCase& c = GetParam();
  const std::uint64_t seed = 0x5EED;
  const HostTensor t = run_fill(c.dtype, c.numel, seed, c.lo, c.hi);
  const float lo = round_through(c.dtype, c.lo), hi = round_through(c.dtype, c.hi);
  double sum = 0.0, sum_sq = 0.0;
  for (std::int64_t i = 0; i < c.numel; ++i) {
    const float v = t.get(i);
    ASSERT_EQ(v, expected_uniform(seed, i, c.lo, c.hi, c.dtype)) << "element " << i;
    // Rounding into the dtype is monotonic, so values lie within lo and hi rounded the same
    // way (inclusive: a value just below hi may round onto it, or past an unrepresentable hi).
    ASSERT_TRUE(v >= lo && v <= hi) << "element " << i << " = " << v;
    sum += v;
    sum_sq += double(v) * v;
  }
  // Mean of n uniforms: standard deviation (hi − lo)/√(12n); allow 6 of them plus the dtype's
  // rounding of the largest magnitude (a worst-case bias). Variance (hi − lo)²/12 within 2%.
  const double n = static_cast<double>(c.numel), range = c.hi - c.lo;
  const double mean = sum / n, variance = sum_sq / n - mean * mean;
  const double mean_tol = 6.0 * range / std::sqrt(12.0 * n) +
                          unit_roundoff(c.dtype) * std::max(std::abs(c.lo), std::abs(c.hi));
  EXPECT_NEAR(mean, 0.5 * (c.lo + c.hi), mean_tol);
  EXPECT_NEAR(variance, range * range / 12.0, 0.02 * range * range / 12.0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FillUniform,
    ::testing::Values(FillCase{"f32_tail", DType::kF32, 100003, -1.0f, 1.0f},
                      FillCase{"bf16_tail", DType::kBF16, 100003, -0.05f, 0.05f},
                      FillCase{"f16_tail", DType::kF16, 100005, 0.0f, 2.0f},
                      // More elements than one sweep of the grid covers: the grid-stride loop.
                      FillCase{"bf16_16m", DType::kBF16, (std::int64_t{1} << 24) + 7, -3.0f, 1.0f}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(FillUniformSeeds, SameSeedRepeatsAndAnotherSeedDiffers) {
  FF_REQUIRE_GPU();
  const std::int64_t n = 65536 + 3;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    const HostTensor a = run_fill(dtype, n, 42, -1.0f, 1.0f);
    const HostTensor b = run_fill(dtype, n, 42, -1.0f, 1.0f);
    const HostTensor other = run_fill(dtype, n, 43, -1.0f, 1.0f);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0) << name_of(dtype);
    std::int64_t differ = 0;
    for (std::int64_t i = 0; i < n; ++i) differ += a.get(i) != other.get(i);
    // Independent draws collide only when they round to the same value: never in f32 at this
    // size in practice, about 1% of the time in bf16 (a few hundred values per binade).
    const double min_fraction = dtype == DType::kF32 ? 0.999 : 0.95;
    EXPECT_GE(static_cast<double>(differ), min_fraction * n) << name_of(dtype);
  }
}

TEST(FillUniformSeeds, UnalignedViewTakesTheScalarPathAndStaysInside) {
  FF_REQUIRE_GPU();
  const std::int64_t n = 1000;
  HostTensor t = poisoned_tensor(DType::kBF16, {n + 2});
  auto d = upload(t);
  // Starts 2 bytes into the buffer: not 16-byte aligned.
  const TensorView inner(static_cast<std::uint8_t*>(d.buffer.data()) + 2, DType::kBF16, {n},
                         Device::cuda());
  mk::fill_uniform(inner, 7, -2.0f, 2.0f, nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());
  download(d.view, t);
  EXPECT_TRUE(poisoned(t, 0));
  EXPECT_TRUE(poisoned(t, n + 1));
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(t.get(i + 1), expected_uniform(7, i, -2.0f, 2.0f, DType::kBF16)) << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Argument errors: thrown before anything is enqueued, so outputs keep their poison.

void expect_invalid(const std::string& what, const std::function<void()>& call,
                    const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << what << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what << ": " << e.what();
    EXPECT_NE(e.message().find(needle), std::string::npos)
        << what << ": message \"" << e.message() << "\" lacks \"" << needle << "\"";
  }
}

TEST(ModelKernelErrors, BadArgumentsThrowBeforeLaunch) {
  FF_REQUIRE_GPU();
  const DType bf16 = DType::kBF16;
  HostTensor table(bf16, {50, 64}), weight(bf16, {64}), weight_f16(DType::kF16, {64});
  HostTensor table_f32(DType::kF32, {50, 64}), wide(bf16, {4, 65});
  std::mt19937 rng(6);
  testing::fill_normal(table, rng);
  testing::fill_normal(weight, rng);
  testing::fill_normal(weight_f16, rng);
  HostTensor out = poisoned_tensor(bf16, {4, 64}), out_f16 = poisoned_tensor(DType::kF16, {4, 64});
  HostTensor qkv = poisoned_tensor(bf16, {4, 4 * 64}), ints = poisoned_tensor(DType::kI32, {64});
  auto d_table = upload(table), d_weight = upload(weight), d_weight_f16 = upload(weight_f16),
       d_table_f32 = upload(table_f32), d_wide = upload(wide), d_out = upload(out),
       d_out_f16 = upload(out_f16), d_qkv = upload(qkv), d_ints = upload(ints);
  DeviceBuffer d_ids = upload_vector(std::vector<std::int32_t>{0, 1, 2, 3, 4});
  DeviceBuffer d_positions = upload_vector(std::vector<std::int64_t>{0, 1, 2, 3});
  const auto* ids = static_cast<const std::int32_t*>(d_ids.data());
  const auto* positions = static_cast<const std::int64_t*>(d_positions.data());
  const TensorView o = d_out.view, t = d_table.view, w = d_weight.view;
  // A column stride of 2 (every other element of the [4, 128] qkv buffer).
  const std::int64_t shape[] = {4, 64}, every_other[] = {128, 2};
  const TensorView gapped =
      TensorView::strided(d_qkv.view.data(), bf16, shape, every_other, Device::cuda());

  expect_invalid(
      "f32 table", [&] { mk::embedding(d_table_f32.view, ids, 4, o, nullptr); }, "bf16 or f16");
  expect_invalid(
      "mixed dtypes", [&] { mk::embedding(t, ids, 4, d_out_f16.view, nullptr); }, "is bf16 but");
  expect_invalid(
      "host table", [&] { mk::embedding(table.view(), ids, 4, o, nullptr); }, "device");
  expect_invalid(
      "too many rows", [&] { mk::embedding(t, ids, 5, o, nullptr); }, "fewer than 5 rows");
  expect_invalid(
      "negative rows", [&] { mk::embedding(t, ids, -1, o, nullptr); }, "rows");
  expect_invalid(
      "null ids", [&] { mk::embedding(t, nullptr, 2, o, nullptr); }, "token_ids");
  expect_invalid(
      "width", [&] { mk::embedding(d_wide.view, ids, 2, o, nullptr); }, "differ in width");

  expect_invalid(
      "weight size",
      [&] { mk::rms_norm(t, first_columns(d_wide.view, 65).select(0, 0), 1e-5f, o, 2, nullptr); },
      "weight");
  expect_invalid(
      "weight dtype", [&] { mk::rms_norm(t, d_weight_f16.view, 1e-5f, o, 2, nullptr); },
      "weight is f16");
  expect_invalid(
      "nan eps", [&] { mk::rms_norm(t, w, std::nanf(""), o, 2, nullptr); }, "eps");
  expect_invalid(
      "column stride", [&] { mk::rms_norm(gapped, w, 1e-5f, o, 2, nullptr); }, "unit stride");
  expect_invalid(
      "rows beyond out", [&] { mk::rms_norm(t, w, 1e-5f, o, 5, nullptr); }, "fewer than 5 rows");
  expect_invalid(
      "rows: out rows", [&] { mk::rms_norm_rows(t, ids, 5, w, 1e-5f, o, nullptr); },
      "fewer than 5 rows");
  expect_invalid(
      "rows: null", [&] { mk::rms_norm_rows(t, nullptr, 2, w, 1e-5f, o, nullptr); }, "row_index");

  const TensorView q = d_qkv.view;  // [4, 4·64]: 2 q heads + 2·1 kv heads of 64
  const std::vector<float> f32(32, 0.5f), f31(31, 0.5f), f33(33, 0.5f);
  std::vector<float> f_zero = f32;
  f_zero[7] = 0.0f;
  expect_invalid(
      "odd rotary_dim", [&] { mk::rope_neox(q, positions, 4, 2, 1, 64, 63, f31, nullptr); },
      "rotary_dim");
  expect_invalid(
      "rotary_dim > head", [&] { mk::rope_neox(q, positions, 4, 2, 1, 64, 66, f33, nullptr); },
      "rotary_dim");
  expect_invalid(
      "qkv width", [&] { mk::rope_neox(q, positions, 4, 2, 2, 64, 64, f32, nullptr); }, "is not");
  expect_invalid(
      "inv_freq count", [&] { mk::rope_neox(q, positions, 4, 2, 1, 64, 64, f31, nullptr); },
      "31 inverse frequencies");
  expect_invalid(
      "inv_freq zero", [&] { mk::rope_neox(q, positions, 4, 2, 1, 64, 64, f_zero, nullptr); },
      "inv_freq[7]");
  expect_invalid(
      "null positions", [&] { mk::rope_neox(q, nullptr, 4, 2, 1, 64, 64, f32, nullptr); },
      "positions");

  expect_invalid(
      "silu widths", [&] { mk::silu_and_mul(t, o, 2, nullptr); }, "twice as wide");
  expect_invalid(
      "silu rows", [&] { mk::silu_and_mul(q, o, 5, nullptr); }, "fewer than 5 rows");

  expect_invalid(
      "fill lo > hi", [&] { mk::fill_uniform(o, 1, 1.0f, -1.0f, nullptr); }, "lo");
  expect_invalid(
      "fill strided", [&] { mk::fill_uniform(gapped, 1, 0.0f, 1.0f, nullptr); }, "contiguous");
  expect_invalid(
      "fill i32", [&] { mk::fill_uniform(d_ints.view, 1, 0.0f, 1.0f, nullptr); },
      "bf16, f16, f32 or fp8_e4m3");

  // rows == 0 is a valid no-op, even without index arrays.
  mk::embedding(t, nullptr, 0, o, nullptr);
  mk::rms_norm(t, w, 1e-5f, o, 0, nullptr);
  mk::rms_norm_rows(t, nullptr, 0, w, 1e-5f, o, nullptr);
  mk::rope_neox(q, nullptr, 0, 2, 1, 64, 64, f32, nullptr);
  mk::silu_and_mul(q.reshape({8, 128}), o.reshape({4, 64}), 0, nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());

  HostTensor after_out = out, after_qkv = qkv, after_ints = ints;
  download(d_out.view, after_out);
  download(d_qkv.view, after_qkv);
  download(d_ints.view, after_ints);
  EXPECT_EQ(std::memcmp(after_out.data(), out.data(), out.bytes()), 0) << "out was written";
  EXPECT_EQ(std::memcmp(after_qkv.data(), qkv.data(), qkv.bytes()), 0) << "qkv was written";
  EXPECT_EQ(std::memcmp(after_ints.data(), ints.data(), ints.bytes()), 0) << "ints were written";
}

}  // namespace
}  // namespace freezeframe
