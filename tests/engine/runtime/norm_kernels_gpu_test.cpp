// The RMS norm kernels against double-precision host norms: every row of a step, and chosen
// rows (the LM head's); bf16 and f16, from inputs of that dtype or f32 (a residual stream kept
// in f32), vector and scalar paths, outputs poisoned with NaN bytes.
// Tolerances as in model_kernels_gpu_test.cpp (2u of the output dtype).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/model_kernels_test_util.h"
#include "freezeframe/core/cuda_check.h"
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
using testing::upload;
using testing::upload_vector;

// ---------------------------------------------------------------------------------------------
// rms_norm

struct RmsNormCase {
  const char* name;
  DType dtype;
  int rows, extra_rows;          // tensors have rows + extra_rows rows
  int width, in_cols, out_cols;  // in / out: the first `width` columns of [.., *_cols]
  bool in_place;                 // out is in
  DType in_dtype = DType::kU8;   // kU8: the output's dtype
};

std::ostream& operator<<(std::ostream& os, const RmsNormCase& c) { return os << c.name; }

class RmsNorm : public ::testing::TestWithParam<RmsNormCase> {};

TEST_P(RmsNorm, MatchesHostNorm) {
  FF_REQUIRE_GPU();
  const RmsNormCase& c = GetParam();
  const int total = c.rows + c.extra_rows;
  const float eps = 1e-5f;
  std::mt19937 rng(2);
  const DType in_dtype = c.in_dtype == DType::kU8 ? c.dtype : c.in_dtype;
  HostTensor in(in_dtype, {total, c.in_cols}), weight(c.dtype, {c.width});
  testing::fill_normal(in, rng, 2.0f);
  testing::fill_uniform(weight, rng, 0.5f, 1.5f);
  const int out_cols = c.in_place ? c.in_cols : c.out_cols;
  HostTensor out = c.in_place ? in : poisoned_tensor(c.dtype, {total, out_cols});

  auto d_in = upload(in), d_weight = upload(weight);
  auto d_out = c.in_place ? testing::DeviceTensor{} : upload(out);
  const TensorView in_view = first_columns(d_in.view, c.width);
  const TensorView out_view = c.in_place ? in_view : first_columns(d_out.view, c.width);
  mk::rms_norm(in_view, d_weight.view, eps, out_view, c.rows, nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());
  download(c.in_place ? d_in.view : d_out.view, out);

  for (int r = 0; r < total; ++r) {
    double sum_sq = 0.0;
    for (int col = 0; col < c.width; ++col) {
      const double x = in.get(std::int64_t(r) * c.in_cols + col);
      sum_sq += x * x;
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / c.width + eps);
    for (int col = 0; col < out_cols; ++col) {
      const std::int64_t i = std::int64_t(r) * out_cols + col;
      if (r >= c.rows || col >= c.width) {
        if (c.in_place) {
          ASSERT_EQ(std::memcmp(out.data() + i * size_of(c.dtype), in.data() + i * size_of(c.dtype),
                                size_of(c.dtype)),
                    0)
              << "row " << r << " col " << col << " was written";
        } else {
          ASSERT_TRUE(poisoned(out, i)) << "row " << r << " col " << col << " was written";
        }
        continue;
      }
      const double want = in.get(std::int64_t(r) * c.in_cols + col) * inv_rms * weight.get(col);
      ASSERT_TRUE(close(out.get(i), want, c.dtype, want)) << "row " << r << " col " << col;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RmsNorm,
    ::testing::Values(
        RmsNormCase{"bf16_w4096_decode", DType::kBF16, 3, 2, 4096, 4096, 4096, false},
        RmsNormCase{"f16_w4096_decode", DType::kF16, 4, 1, 4096, 4096, 4096, false},
        RmsNormCase{"f16_w8192_one_row", DType::kF16, 1, 1, 8192, 8192, 8192, false},
        RmsNormCase{"bf16_w4096_300_rows", DType::kBF16, 300, 4, 4096, 4096, 4096, false},
        // MLA: the 512 latent columns of the [rows, 576] kv_a output, into a compact tensor.
        RmsNormCase{"bf16_latent_slice_of_576", DType::kBF16, 5, 3, 512, 576, 512, false},
        RmsNormCase{"f16_latent_slice_of_576", DType::kF16, 5, 3, 512, 576, 512, false},
        RmsNormCase{"bf16_w1003_scalar", DType::kBF16, 3, 1, 1003, 1003, 1003, false},
        RmsNormCase{"f16_w96_odd_strides_scalar", DType::kF16, 4, 2, 96, 101, 99, false},
        RmsNormCase{"bf16_w2048_in_place", DType::kBF16, 6, 2, 2048, 2048, 2048, true},
        // An f32 residual stream normed into the model dtype.
        RmsNormCase{"f32_in_bf16_w4096_300_rows", DType::kBF16, 300, 4, 4096, 4096, 4096, false,
                    DType::kF32},
        RmsNormCase{"f32_in_f16_w576_decode", DType::kF16, 3, 2, 576, 576, 576, false, DType::kF32},
        RmsNormCase{"f32_in_bf16_w96_odd_strides_scalar", DType::kBF16, 4, 2, 96, 101, 99, false,
                    DType::kF32}),
    [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// rms_norm_rows

struct LastTokensCase {
  const char* name;
  DType dtype;
  int width;
  DType in_dtype = DType::kU8;  // kU8: the output's dtype
};

std::ostream& operator<<(std::ostream& os, const LastTokensCase& c) { return os << c.name; }

class RmsNormLastTokens : public ::testing::TestWithParam<LastTokensCase> {};

TEST_P(RmsNormLastTokens, NormsEachRequestsLastTokenAndZeroesEmptyRequests) {
  FF_REQUIRE_GPU();
  const LastTokensCase& c = GetParam();
  const float eps = 1e-6f;
  // The last tokens of requests of 4, 1, 6 new tokens; −1 (a padded request) and an index
  // outside the input give zero rows; repeated and out-of-order indices are fine.
  const std::vector<std::int32_t> row_index = {3, -1, 4, 10, 3, -1, 13};
  const int rows = static_cast<int>(row_index.size()), out_rows = rows + 2;
  const int tokens = 13;
  std::mt19937 rng(3);
  HostTensor in(c.in_dtype == DType::kU8 ? c.dtype : c.in_dtype, {tokens, c.width}),
      weight(c.dtype, {c.width});
  testing::fill_normal(in, rng);
  testing::fill_uniform(weight, rng, -1.5f, -0.5f);
  HostTensor out = poisoned_tensor(c.dtype, {out_rows, c.width});

  auto d_in = upload(in), d_weight = upload(weight), d_out = upload(out);
  DeviceBuffer d_rows = upload_vector(row_index);
  mk::rms_norm_rows(d_in.view, static_cast<const std::int32_t*>(d_rows.data()), rows, d_weight.view,
                    eps, d_out.view, nullptr);
  FF_CUDA_CHECK(cudaDeviceSynchronize());
  download(d_out.view, out);

  for (int r = 0; r < out_rows; ++r) {
    const std::int64_t src = r < rows ? row_index[r] : -1;
    const bool empty = r < rows && (src < 0 || src >= tokens);
    double inv_rms = 0.0;
    if (r < rows && !empty) {
      double sum_sq = 0.0;
      for (int col = 0; col < c.width; ++col) sum_sq += std::pow(in.get(src * c.width + col), 2);
      inv_rms = 1.0 / std::sqrt(sum_sq / c.width + eps);
    }
    for (int col = 0; col < c.width; ++col) {
      const std::int64_t i = std::int64_t(r) * c.width + col;
      if (r >= rows) {
        ASSERT_TRUE(poisoned(out, i)) << "row " << r << " col " << col << " was written";
      } else if (empty) {
        ASSERT_EQ(out.get(i), 0.0f) << "empty row " << r << " col " << col;
      } else {
        const double want = in.get(src * c.width + col) * inv_rms * weight.get(col);
        ASSERT_TRUE(close(out.get(i), want, c.dtype, want)) << "row " << r << " col " << col;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RmsNormLastTokens,
                         ::testing::Values(LastTokensCase{"bf16_w4096", DType::kBF16, 4096},
                                           LastTokensCase{"f16_w4096", DType::kF16, 4096},
                                           LastTokensCase{"bf16_w1003_scalar", DType::kBF16, 1003},
                                           LastTokensCase{"f32_in_bf16_w4096", DType::kBF16, 4096,
                                                          DType::kF32}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace freezeframe
