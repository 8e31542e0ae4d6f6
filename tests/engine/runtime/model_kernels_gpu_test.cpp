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

}  // namespace
}  // namespace freezeframe
