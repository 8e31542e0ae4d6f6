// The MLA projections on tensor cores (backend "mla") against double precision on the host:
// batched, strided, transposed weights, edges that are no multiple of a tile, loads in 16-byte
// pieces and element by element, every dtype combination, into poisoned outputs; and the
// query absorption, its rotary part copied.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "freezeframe/core/cuda_handles.h"
#include "mla_decode/tensor_core_projection.h"
#include "support/device_tensor.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

using testing::download;
using testing::relative_l2;
using testing::upload;

struct ProjectionCase {
  const char* name;
  DType x, w, out;
  int batch, rows, n, k;
  bool interleaved = false;   ///< x and out as [rows, batch, ·] (heads inside a token's row)
  bool transposed_w = false;  ///< w stored [k, n] per batch entry
  double tolerance = 1e-4;
};

std::ostream& operator<<(std::ostream& os, const ProjectionCase& c) { return os << c.name; }

class TensorCoreProjection : public ::testing::TestWithParam<ProjectionCase> {};

TEST_P(TensorCoreProjection, MatchesDoublePrecision) {
  FF_REQUIRE_GPU();
  const ProjectionCase& c = GetParam();
  std::mt19937 rng(7);
  HostTensor x(c.x, {c.batch * c.rows * c.k}), w(c.w, {c.batch * c.n * c.k}),
      out(c.out, {c.batch * c.rows * c.n});
  testing::fill_normal(x, rng);
  testing::fill_normal(w, rng, 1.0f / std::sqrt(static_cast<float>(c.k)));
  out.fill_bytes(0xFF);

  reference::Projection p;
  p.x_dtype = c.x;
  p.w_dtype = c.w;
  p.out_dtype = c.out;
  p.batch = c.batch;
  p.rows = c.rows;
  p.n_out = c.n;
  p.k = c.k;
  p.x_stride_batch = c.interleaved ? c.k : std::int64_t(c.rows) * c.k;
  p.x_stride_row = c.interleaved ? std::int64_t(c.batch) * c.k : c.k;
  p.out_stride_batch = c.interleaved ? c.n : std::int64_t(c.rows) * c.n;
  p.out_stride_row = c.interleaved ? std::int64_t(c.batch) * c.n : c.n;
  p.w_stride_batch = std::int64_t(c.n) * c.k;
  p.w_stride_n = c.transposed_w ? 1 : c.k;
  const std::int64_t w_stride_k = c.transposed_w ? c.n : 1;

  std::vector<double> want(static_cast<std::size_t>(out.numel()));
  for (int b = 0; b < c.batch; ++b) {
    for (int r = 0; r < c.rows; ++r) {
      for (int n = 0; n < c.n; ++n) {
        double sum = 0.0;
        for (int k = 0; k < c.k; ++k) {
          sum += double(x.get(b * p.x_stride_batch + r * p.x_stride_row + k)) *
                 double(w.get(b * p.w_stride_batch + n * p.w_stride_n + k * w_stride_k));
        }
        want[static_cast<std::size_t>(b * p.out_stride_batch + r * p.out_stride_row + n)] = sum;
      }
    }
  }

  auto d_x = upload(x), d_w = upload(w), d_out = upload(out);
  p.x = d_x.view.data();
  p.w = d_w.view.data();
  p.out = d_out.view.data();
  Stream stream = Stream::create();
  mla_decode::launch_tensor_core_projection(p, stream.get(), w_stride_k);
  stream.synchronize();
  download(d_out.view, out);
  std::vector<double> got(want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    got[i] = out.get(static_cast<std::int64_t>(i));
    ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " unwritten";
  }
  EXPECT_LE(relative_l2(got, want), c.tolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TensorCoreProjection,
    ::testing::Values(
        // The query projection: 16-bit x, f32 out; no edge a multiple of a tile.
        ProjectionCase{"q_proj_bf16", DType::kBF16, DType::kBF16, DType::kF32, 1, 37, 300, 200},
        ProjectionCase{"q_proj_f16", DType::kF16, DType::kF16, DType::kF32, 3, 1, 65, 24},
        // The output's up-projection: f32 x rounded to the weight's type, heads interleaved.
        ProjectionCase{"up_proj_bf16", DType::kF32, DType::kBF16, DType::kBF16, 16, 70, 128, 512,
                       true, false, 8e-3},
        ProjectionCase{"up_proj_f16", DType::kF32, DType::kF16, DType::kF16, 4, 9, 96, 256, true,
                       false, 4e-3},
        // The absorption: W_UK read transposed, f32 in and out.
        ProjectionCase{"absorb_bf16", DType::kF32, DType::kBF16, DType::kF32, 4, 17, 512, 128, true,
                       true, 5e-3},
        ProjectionCase{"absorb_f16", DType::kF32, DType::kF16, DType::kF32, 2, 65, 130, 40, true,
                       true, 2e-3},
        // k in no whole 16-byte pieces: every load element by element.
        ProjectionCase{"odd_k_bf16", DType::kBF16, DType::kBF16, DType::kF32, 2, 5, 70, 30},
        ProjectionCase{"odd_k_f32", DType::kF32, DType::kBF16, DType::kBF16, 3, 66, 10, 30, true,
                       false, 8e-3}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(TensorCoreAbsorb, MatchesDoublePrecisionAndCopiesTheRotaryPart) {
  FF_REQUIRE_GPU();
  MlaParams p;
  p.num_heads = 4;
  p.kv_lora_rank = 512;
  p.qk_nope_head_dim = 128;
  p.qk_rope_head_dim = 64;
  p.v_head_dim = 128;
  const int rows = 11, h = p.num_heads, nope = 128, rope = 64, rank = 512, v = 128;
  std::mt19937 rng(3);
  HostTensor q(DType::kF32, {rows, h, nope + rope}), kv_b(DType::kBF16, {h * (nope + v), rank}),
      q_abs(DType::kF32, {rows, h, rank + rope});
  testing::fill_normal(q, rng);
  testing::fill_normal(kv_b, rng, 1.0f / std::sqrt(static_cast<float>(nope)));
  q_abs.fill_bytes(0xFF);
  auto d_q = upload(q), d_kv_b = upload(kv_b), d_q_abs = upload(q_abs);
  Stream stream = Stream::create();
  mla_decode::launch_tensor_core_absorb_query(p, d_q.view, d_kv_b.view, d_q_abs.view, rows,
                                              stream.get());
  stream.synchronize();
  download(d_q_abs.view, q_abs);
  std::vector<double> got, want;
  for (int t = 0; t < rows; ++t) {
    for (int head = 0; head < h; ++head) {
      const std::int64_t in = (std::int64_t(t) * h + head) * (nope + rope);
      const std::int64_t at = (std::int64_t(t) * h + head) * (rank + rope);
      for (int c = 0; c < rank; ++c) {
        double sum = 0.0;
        for (int d = 0; d < nope; ++d) {
          sum += double(q.get(in + d)) * kv_b.get((std::int64_t(head) * (nope + v) + d) * rank + c);
        }
        want.push_back(sum);
        got.push_back(q_abs.get(at + c));
      }
      for (int i = 0; i < rope; ++i) {
        ASSERT_EQ(q_abs.get(at + rank + i), q.get(in + nope + i)) << "rotary part, row " << t;
      }
    }
  }
  for (const double g : got) ASSERT_TRUE(std::isfinite(g)) << "q_abs unwritten";
  EXPECT_LE(relative_l2(got, want), 5e-3) << "the query rounded to bf16, f32 accumulation";
}

}  // namespace
}  // namespace freezeframe
