// The model's element-wise kernels against double-precision host references: bf16 and f16,
// vector (16-byte) and scalar paths, row-strided views, and outputs poisoned with NaN bytes so
// that an element written by mistake, or not written, shows. Rows at and beyond `rows` must
// keep their poison (or, for the in-place rotary embedding, their input).
//
// Tolerances are stated against u, the unit roundoff of the output dtype (bf16 2^-8, f16
// 2^-11): the kernels compute in f32 (relative error ~1e-6) and round once into the dtype, so
// each element is within u·|exact| of the exact value, plus f32 noise. The checks allow 2u.

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
// embedding

struct EmbeddingCase {
  const char* name;
  DType dtype;
  int vocab, width, out_cols;    // out is the first `width` columns of [rows + 2, out_cols]
  DType out_dtype = DType::kU8;  // kU8: the table's; f32: a residual stream kept in f32
};

std::ostream& operator<<(std::ostream& os, const EmbeddingCase& c) { return os << c.name; }

class Embedding : public ::testing::TestWithParam<EmbeddingCase> {};

TEST_P(Embedding, CopiesRowsAndZeroesOutOfRangeIds) {
  FF_REQUIRE_GPU();
  const EmbeddingCase& c = GetParam();
  std::mt19937 rng(1);
  HostTensor table(c.dtype, {c.vocab, c.width});
  testing::fill_normal(table, rng);
  // -1 and vocab are out of range: zero rows.
  const std::vector<std::int32_t> ids = {5, -1, c.vocab - 1, c.vocab, 0, 5, 3};
  const int rows = static_cast<int>(ids.size()), out_rows = rows + 2;
  HostTensor out =
      poisoned_tensor(c.out_dtype == DType::kU8 ? c.dtype : c.out_dtype, {out_rows, c.out_cols});

  auto d_table = upload(table), d_out = upload(out);
  DeviceBuffer d_ids = upload_vector(ids);
  mk::embedding(d_table.view, static_cast<const std::int32_t*>(d_ids.data()), rows,
                first_columns(d_out.view, c.width), nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());
  download(d_out.view, out);

  for (int r = 0; r < out_rows; ++r) {
    for (int col = 0; col < c.out_cols; ++col) {
      const std::int64_t i = std::int64_t(r) * c.out_cols + col;
      if (r >= rows || col >= c.width) {
        ASSERT_TRUE(poisoned(out, i)) << "row " << r << " col " << col << " was written";
      } else if (ids[r] < 0 || ids[r] >= c.vocab) {
        ASSERT_EQ(out.get(i), 0.0f) << "row " << r << " col " << col;
      } else {
        ASSERT_EQ(out.get(i), table.get(std::int64_t(ids[r]) * c.width + col))
            << "row " << r << " col " << col;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Embedding,
    ::testing::Values(
        EmbeddingCase{"bf16_w4096", DType::kBF16, 300, 4096, 4096},
        EmbeddingCase{"f16_w4096_slice", DType::kF16, 50, 4096, 4104},
        EmbeddingCase{"bf16_w1001_scalar", DType::kBF16, 70, 1001, 1001},
        EmbeddingCase{"f16_w64_odd_out_stride", DType::kF16, 20, 64, 67},
        EmbeddingCase{"bf16_w4096_into_f32", DType::kBF16, 300, 4096, 4096, DType::kF32},
        EmbeddingCase{"f16_w576_into_f32_slice", DType::kF16, 40, 576, 584, DType::kF32},
        EmbeddingCase{"bf16_w1001_into_f32_scalar", DType::kBF16, 70, 1001, 1001, DType::kF32}),
    [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// rope_neox

struct RopeCase {
  const char* name;
  DType dtype;
  int num_heads, num_kv_heads, head_size, rotary_dim;
  float theta;
  std::optional<Llama3RopeScaling> scaling;
};

/// Llama-3.1-8B's rope_scaling.
constexpr Llama3RopeScaling kLlama31Scaling{8.0, 1.0, 4.0, 8192};

std::ostream& operator<<(std::ostream& os, const RopeCase& c) { return os << c.name; }

class RopeNeox : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeNeox, RotatesQAndKHeadsOnly) {
  FF_REQUIRE_GPU();
  const RopeCase& c = GetParam();
  const std::vector<std::int64_t> positions = {0, 1, 17, 4095, 8191, 100000, 131070, 131071};
  const int rows = static_cast<int>(positions.size()), total = rows + 2;
  const int heads = c.num_heads + 2 * c.num_kv_heads, width = heads * c.head_size;
  const int half = c.rotary_dim / 2;
  std::mt19937 rng(4);
  HostTensor qkv(c.dtype, {total, width});
  testing::fill_normal(qkv, rng);

  // The frequencies the engine hands the kernel (their values are checked on the CPU, in
  // rope_frequencies_test); here the kernel must rotate by exactly them.
  const std::vector<float> inv_freq = rope_inv_frequencies(c.theta, c.rotary_dim, c.scaling, {});
  auto d_qkv = upload(qkv);
  DeviceBuffer d_positions = upload_vector(positions);
  mk::rope_neox(d_qkv.view, static_cast<const std::int64_t*>(d_positions.data()), rows, c.num_heads,
                c.num_kv_heads, c.head_size, c.rotary_dim, inv_freq, nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());
  HostTensor out(c.dtype, {total, width});
  download(d_qkv.view, out);

  auto unchanged = [&](std::int64_t i) {
    return std::memcmp(out.data() + i * size_of(c.dtype), qkv.data() + i * size_of(c.dtype),
                       size_of(c.dtype)) == 0;
  };
  for (int r = 0; r < total; ++r) {
    for (int h = 0; h < heads; ++h) {
      const std::int64_t head = std::int64_t(r) * width + std::int64_t(h) * c.head_size;
      const bool rotates = r < rows && h < c.num_heads + c.num_kv_heads;
      for (int d = rotates ? c.rotary_dim : 0; d < c.head_size; ++d) {
        ASSERT_TRUE(unchanged(head + d)) << "row " << r << " head " << h << " dim " << d;
      }
      if (!rotates) continue;
      for (int i = 0; i < half; ++i) {
        // The kernel's angle is the f32 product position · inv_freq[i] (the models'
        // convention). At position 131071 one f32 rounding of that angle is up to 2^-8 rad, as
        // large as the bf16 rounding itself, so the reference takes the same f32 angle and
        // evaluates cos/sin in double. What remains is sincosf (≤ 2 ulp of f32) and the
        // output rounding, relative to |x| + |y| since x·cos − y·sin can cancel.
        const float angle = static_cast<float>(positions[r]) * inv_freq[i];
        const double cos_a = std::cos(static_cast<double>(angle));
        const double sin_a = std::sin(static_cast<double>(angle));
        const double x = qkv.get(head + i), y = qkv.get(head + half + i);
        const double scale = std::abs(x) + std::abs(y);
        ASSERT_TRUE(close(out.get(head + i), x * cos_a - y * sin_a, c.dtype, scale))
            << "row " << r << " (position " << positions[r] << ") head " << h << " pair " << i;
        ASSERT_TRUE(close(out.get(head + half + i), y * cos_a + x * sin_a, c.dtype, scale))
            << "row " << r << " (position " << positions[r] << ") head " << h << " pair " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RopeNeox,
    ::testing::Values(
        RopeCase{"bf16_llama3_theta500k", DType::kBF16, 8, 2, 128, 128, 500000.0f, {}},
        RopeCase{"f16_llama3_theta500k", DType::kF16, 8, 2, 128, 128, 500000.0f, {}},
        RopeCase{"bf16_llama31_scaled", DType::kBF16, 8, 2, 128, 128, 500000.0f, kLlama31Scaling},
        RopeCase{"f16_partial_rotary_64_of_128", DType::kF16, 4, 1, 128, 64, 10000.0f, {}},
        // 20 pairs per head: not a multiple of 8, the scalar path.
        RopeCase{"bf16_partial_rotary_40_of_80_scalar", DType::kBF16, 4, 2, 80, 40, 10000.0f, {}},
        RopeCase{"bf16_q_only", DType::kBF16, 3, 0, 64, 64, 10000.0f, {}}),
    [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// silu_and_mul

struct SiluCase {
  const char* name;
  DType dtype;
  int rows, extra_rows, inter;
  int in_cols, out_cols;  // gate_up: first 2·inter columns of [.., in_cols]; out likewise
};

std::ostream& operator<<(std::ostream& os, const SiluCase& c) { return os << c.name; }

class SiluAndMul : public ::testing::TestWithParam<SiluCase> {};

TEST_P(SiluAndMul, MatchesHost) {
  FF_REQUIRE_GPU();
  const SiluCase& c = GetParam();
  const int total = c.rows + c.extra_rows;
  std::mt19937 rng(5);
  HostTensor gate_up(c.dtype, {total, c.in_cols});
  testing::fill_normal(gate_up, rng, 3.0f);
  HostTensor out = poisoned_tensor(c.dtype, {total, c.out_cols});

  auto d_gate_up = upload(gate_up), d_out = upload(out);
  mk::silu_and_mul(first_columns(d_gate_up.view, 2 * c.inter), first_columns(d_out.view, c.inter),
                   c.rows, nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());
  download(d_out.view, out);

  for (int r = 0; r < total; ++r) {
    for (int col = 0; col < c.out_cols; ++col) {
      const std::int64_t i = std::int64_t(r) * c.out_cols + col;
      if (r >= c.rows || col >= c.inter) {
        ASSERT_TRUE(poisoned(out, i)) << "row " << r << " col " << col << " was written";
        continue;
      }
      const double g = gate_up.get(std::int64_t(r) * c.in_cols + col);
      const double u = gate_up.get(std::int64_t(r) * c.in_cols + c.inter + col);
      const double want = g / (1.0 + std::exp(-g)) * u;
      ASSERT_TRUE(close(out.get(i), want, c.dtype, want)) << "row " << r << " col " << col;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SiluAndMul,
    ::testing::Values(SiluCase{"bf16_i4096", DType::kBF16, 4, 2, 4096, 8192, 4096},
                      // One row of 14336: several CTAs share the row.
                      SiluCase{"f16_i14336_one_row", DType::kF16, 1, 1, 14336, 28672, 14336},
                      SiluCase{"bf16_i1003_scalar", DType::kBF16, 3, 1, 1003, 2006, 1003},
                      SiluCase{"f16_i512_slices", DType::kF16, 5, 2, 512, 1040, 520},
                      SiluCase{"bf16_i96_odd_strides", DType::kBF16, 3, 2, 96, 197, 99}),
    [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// add_bias

struct BiasCase {
  const char* name;
  DType dtype;
  int rows, extra_rows, width;
  int first_col, y_cols;  // y: columns [first_col, first_col + width) of [.., y_cols]
};

std::ostream& operator<<(std::ostream& os, const BiasCase& c) { return os << c.name; }

class AddBias : public ::testing::TestWithParam<BiasCase> {};

TEST_P(AddBias, AddsToItsColumnsOnly) {
  FF_REQUIRE_GPU();
  const BiasCase& c = GetParam();
  const int total = c.rows + c.extra_rows;
  std::mt19937 rng(9);
  HostTensor y(c.dtype, {total, c.y_cols});
  testing::fill_normal(y, rng, 2.0f);
  HostTensor bias(c.dtype, {c.width});
  testing::fill_normal(bias, rng, 1.0f);
  const HostTensor before = y;

  auto d_y = upload(y), d_bias = upload(bias);
  const TensorView& full = d_y.view;
  const std::int64_t shape[] = {total, c.width};
  const std::int64_t strides[] = {full.stride(0), 1};
  const TensorView cols = TensorView::strided(
      static_cast<std::byte*>(full.data()) + c.first_col * std::int64_t(size_of(c.dtype)), c.dtype,
      shape, strides, full.device());
  mk::add_bias(cols, d_bias.view, c.rows, nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());
  download(d_y.view, y);

  for (int r = 0; r < total; ++r) {
    for (int col = 0; col < c.y_cols; ++col) {
      const std::int64_t i = std::int64_t(r) * c.y_cols + col;
      const bool inside = r < c.rows && col >= c.first_col && col < c.first_col + c.width;
      if (!inside) {
        ASSERT_EQ(y.get(i), before.get(i)) << "row " << r << " col " << col << " changed";
        continue;
      }
      const double want = double(before.get(i)) + bias.get(col - c.first_col);
      ASSERT_TRUE(close(y.get(i), want, c.dtype, want)) << "row " << r << " col " << col;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AddBias,
    ::testing::Values(BiasCase{"bf16_q_of_qkv", DType::kBF16, 4, 2, 896, 0, 1152},
                      BiasCase{"f16_v_of_qkv", DType::kF16, 3, 1, 128, 1024, 1152},
                      BiasCase{"bf16_one_wide_row", DType::kBF16, 1, 1, 14336, 0, 14336},
                      BiasCase{"f16_odd_offset_scalar", DType::kF16, 5, 2, 37, 3, 45}),
    [](const auto& info) { return std::string(info.param.name); });

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
      "bf16, f16 or f32");

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
