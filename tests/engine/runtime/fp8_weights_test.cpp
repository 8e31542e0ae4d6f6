// engine/: the weights' fp8 quantisation at load (quantize_rows_to_fp8): each row's largest
// magnitude becomes ±448, every value is the nearest e4m3 of itself times 448 / that, a row of
// zeros keeps a scale of 1, and quantising in place gives what quantising elsewhere does; an
// fp8 program's scales are not asked of a checkpoint (match_weights leaves them null).

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "freezeframe/core/element_value.h"
#include "freezeframe/engine/model/checkpoint_weights.h"
#include "freezeframe/engine/model/model_program.h"
#include "runtime/fp8_rows.h"
#include "support/weight_fixtures.h"

namespace freezeframe {
namespace {

TEST(Fp8Weights, RowsQuantiseToTheirOwnScale) {
  constexpr std::int64_t kRows = 9, kCols = 333;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> values(kRows * kCols);
  for (float& v : values) v = normal(rng);
  for (std::int64_t c = 0; c < kCols; ++c) values[3 * kCols + c] = 0.0f;
  values[7 * kCols + 100] = -7.5f;
  std::vector<std::byte> q(kRows * kCols);
  std::vector<float> scales(kRows);
  quantize_rows_to_fp8(values.data(), kRows, kCols, q.data(), scales.data());
  for (std::int64_t r = 0; r < kRows; ++r) {
    SCOPED_TRACE(r);
    float amax = 0.0f, qmax = 0.0f;
    for (std::int64_t c = 0; c < kCols; ++c)
      amax = std::max(amax, std::fabs(values[r * kCols + c]));
    const float inv = amax > 0.0f ? 448.0f / amax : 1.0f;
    for (std::int64_t c = 0; c < kCols; ++c) {
      const float stored = load_as_float(&q[r * kCols + c], DType::kFp8E4M3);
      qmax = std::max(qmax, std::fabs(stored));
      ASSERT_EQ(stored, round_through(DType::kFp8E4M3, values[r * kCols + c] * inv))
          << "column " << c;
    }
    if (r == 3) {
      EXPECT_EQ(scales[r], 1.0f) << "a row of zeros";
      EXPECT_EQ(qmax, 0.0f);
    } else {
      EXPECT_EQ(scales[r], amax / 448.0f);
      EXPECT_EQ(qmax, 448.0f) << "the largest value of a row is e4m3's largest";
    }
  }
  EXPECT_EQ(scales[7], 7.5f / 448.0f);
  // In place, as the upload does it (fp8 bytes over the f32 values they came from).
  std::vector<float> in_place = values;
  std::vector<float> scales2(kRows);
  quantize_rows_to_fp8(in_place.data(), kRows, kCols, reinterpret_cast<std::byte*>(in_place.data()),
                       scales2.data());
  EXPECT_EQ(scales2, scales);
  EXPECT_EQ(std::memcmp(in_place.data(), q.data(), q.size()), 0);
}

TEST(Fp8Weights, ScalesAreComputedNotAskedOfTheCheckpoint) {
  const EngineSpec spec = testing::weights_spec("llama", "  quantization: fp8\n");
  ASSERT_TRUE(spec.model.fp8_linear);
  const ModelProgram program = build_model_program(spec);
  const auto source = WeightSource::open(*spec.model.checkpoint);
  const std::vector<const WeightTensor*> matched = match_weights(*source, program);
  ASSERT_EQ(matched.size(), program.weights.size());
  int scales = 0, fp8 = 0;
  for (std::size_t w = 0; w < program.weights.size(); ++w) {
    const ProgramWeight& weight = program.weights[w];
    if (weight.scales_of >= 0) {
      ++scales;
      EXPECT_EQ(matched[w], nullptr) << weight.name;
    } else {
      ASSERT_NE(matched[w], nullptr) << weight.name;
      fp8 += weight.dtype == DType::kFp8E4M3;
    }
  }
  EXPECT_EQ(scales, 7);
  EXPECT_EQ(fp8, 7) << "q, k, v, o, gate, up, down";
}

}  // namespace
}  // namespace freezeframe
