// W8A8 projections (model.quantization fp8) on the GPU: quantize_rows_fp8 gives the bytes and
// scales the host's quantize_rows_to_fp8 does (the weights' quantisation at load) for bf16 and
// f32 inputs, strided rows and a row of zeros; the norm and SiLU·mul with the quantisation
// fused give the bytes of the two kernels run in turn; Gemm::linear_fp8 matches the
// double-precision product of the dequantised operands at Llama-3.1-8B's projection shapes, into
// bf16 and into an f32 residual (beta 1), and its graph replay equals the eager GEMM bit for bit.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/element_value.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "runtime/fp8_rows.h"
#include "runtime/gemm.h"
#include "runtime/model_kernels.h"
#include "support/device_tensor.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

using testing::device_bytes;
using testing::download;
using testing::fill_normal;
using testing::to_doubles;
using testing::upload;

/// `values` [rows, cols] quantised on the host: fp8 bytes and a scale per row.
struct Quantised {
  HostTensor q;
  std::vector<float> scales;
};

Quantised quantise(const std::vector<float>& values, std::int64_t rows, std::int64_t cols) {
  Quantised out{HostTensor(DType::kFp8E4M3, {rows, cols}), std::vector<float>(rows)};
  quantize_rows_to_fp8(values.data(), rows, cols, reinterpret_cast<std::byte*>(out.q.data()),
                       out.scales.data());
  return out;
}

std::vector<float> normal(std::mt19937& rng, std::int64_t n, float stddev) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

DeviceBuffer upload_floats(const std::vector<float>& v) {
  DeviceBuffer b(v.size() * sizeof(float));
  FF_CUDA_CHECK(cudaMemcpy(b.data(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return b;
}

std::vector<float> download_floats(const void* device, std::size_t n) {
  std::vector<float> v(n);
  FF_CUDA_CHECK(cudaMemcpy(v.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

TEST(Fp8Linear, QuantizeRowsGivesTheHostsBytesAndScales) {
  FF_REQUIRE_GPU();
  std::mt19937 rng(11);
  for (const DType dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(std::string(name_of(dtype)));
    const std::int64_t rows = 37, width = 4096, stride = 4096 + 64;  // a column slice's rows
    HostTensor in(dtype, {rows, stride});
    fill_normal(in, rng, 3.0f);
    for (std::int64_t c = 0; c < stride; ++c) in.set(5 * stride + c, 0.0f);  // a row of zeros
    in.set(9 * stride + 17, 2000.0f);  // an outlier: its row's scale follows it
    const testing::DeviceTensor device_in = upload(in);
    const TensorView narrowed = device_in.view.narrow(1, 0, width);
    HostTensor out(DType::kFp8E4M3, {rows, width});
    out.fill_bytes(0x7F);  // NaN poison
    testing::DeviceTensor device_out = upload(out);
    DeviceBuffer scales(rows * sizeof(float));
    FF_CUDA_CHECK(cudaMemset(scales.data(), 0xFF, rows * sizeof(float)));
    model_kernels::quantize_rows_fp8(narrowed, device_out.view, static_cast<float*>(scales.data()),
                                     static_cast<int>(rows), nullptr);
    FF_CUDA_CHECK(cudaDeviceSynchronize());
    download(device_out.view, out);
    const std::vector<float> got_scales = download_floats(scales.data(), rows);

    std::vector<float> values(rows * width);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < width; ++c) values[r * width + c] = in.get(r * stride + c);
    }
    const Quantised want = quantise(values, rows, width);
    EXPECT_EQ(got_scales, want.scales);
    EXPECT_EQ(got_scales[5], 1.0f) << "a row of zeros keeps a scale of 1";
    EXPECT_EQ(got_scales[9], 2000.0f / 448.0f);
    EXPECT_EQ(std::memcmp(out.data(), want.q.data(), out.bytes()), 0);
  }
}

/// Fresh fp8 rows and scales, poisoned (NaN bytes, NaN scales) so unwritten ones show.
struct PoisonedFp8Rows {
  testing::DeviceTensor rows;
  DeviceBuffer scales;
  PoisonedFp8Rows(std::int64_t n, std::int64_t width) : scales(n * sizeof(float)) {
    HostTensor q(DType::kFp8E4M3, {n, width});
    q.fill_bytes(0x7F);
    rows = upload(q);
    FF_CUDA_CHECK(cudaMemset(scales.data(), 0xFF, n * sizeof(float)));
  }
  model_kernels::Fp8RowsOut out() { return {rows.view, static_cast<float*>(scales.data())}; }
  std::vector<float> got_scales() const {
    return download_floats(scales.data(), rows.view.size(0));
  }
};

struct FusedCase {
  std::int64_t rows, width;
  DType in;
  const char* name;
};

TEST(Fp8Linear, FusedNormAndSiluQuantiseAsTheTwoKernelsDo) {
  FF_REQUIRE_GPU();
  std::mt19937 rng(17);
  for (const FusedCase c : {FusedCase{3, 4096, DType::kBF16, "a few rows, 1024-thread CTAs"},
                            FusedCase{300, 4096, DType::kF32, "many rows, an f32 residual"},
                            FusedCase{5, 100, DType::kBF16, "a width not of whole packs"}}) {
    SCOPED_TRACE(c.name);
    const std::int64_t n = c.rows, w = c.width;
    // RMS norm: rms_norm then quantize_rows_fp8, against rms_norm_fp8 with and without its
    // 16-bit output.
    HostTensor in(c.in, {n, w}), weight(DType::kBF16, {w});
    fill_normal(in, rng, 2.0f);
    fill_normal(weight, rng, 1.0f);
    for (std::int64_t i = 0; i < w; ++i) in.set(i, 0.0f);  // row 0: zeros (scale 1)
    const testing::DeviceTensor d_in = upload(in), d_weight = upload(weight);
    HostTensor poison(DType::kBF16, {n, w});
    poison.fill_bytes(0xFF);
    testing::DeviceTensor normed = upload(poison), fused_normed = upload(poison);
    PoisonedFp8Rows want(n, w), fused(n, w), fused_alone(n, w);
    const int rows = static_cast<int>(n);
    model_kernels::rms_norm(d_in.view, d_weight.view, 1e-5f, normed.view, rows, nullptr);
    model_kernels::quantize_rows_fp8(normed.view, want.rows.view,
                                     static_cast<float*>(want.scales.data()), rows, nullptr);
    model_kernels::rms_norm_fp8(d_in.view, d_weight.view, 1e-5f, fused_normed.view, fused.out(),
                                rows, nullptr);
    model_kernels::rms_norm_fp8(d_in.view, d_weight.view, 1e-5f, TensorView(), fused_alone.out(),
                                rows, nullptr);
    FF_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(device_bytes(fused_normed.view), device_bytes(normed.view));
    EXPECT_EQ(device_bytes(fused.rows.view), device_bytes(want.rows.view));
    EXPECT_EQ(device_bytes(fused_alone.rows.view), device_bytes(want.rows.view));
    EXPECT_EQ(fused.got_scales(), want.got_scales());
    EXPECT_EQ(fused_alone.got_scales(), want.got_scales());
    EXPECT_EQ(want.got_scales()[0], 1.0f);

    // SiLU·mul: gate and up side by side, `w` wide each.
    HostTensor gate_up(DType::kBF16, {n, 2 * w});
    fill_normal(gate_up, rng, 3.0f);
    const testing::DeviceTensor d_gate_up = upload(gate_up);
    testing::DeviceTensor act = upload(poison), fused_act = upload(poison);
    PoisonedFp8Rows want_act(n, w), fused_q(n, w), fused_q_alone(n, w);
    model_kernels::silu_and_mul(d_gate_up.view, act.view, rows, nullptr);
    model_kernels::quantize_rows_fp8(act.view, want_act.rows.view,
                                     static_cast<float*>(want_act.scales.data()), rows, nullptr);
    model_kernels::silu_and_mul_fp8(d_gate_up.view, fused_act.view, fused_q.out(), rows, nullptr);
    model_kernels::silu_and_mul_fp8(d_gate_up.view, TensorView(), fused_q_alone.out(), rows,
                                    nullptr);
    FF_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(device_bytes(fused_act.view), device_bytes(act.view));
    EXPECT_EQ(device_bytes(fused_q.rows.view), device_bytes(want_act.rows.view));
    EXPECT_EQ(device_bytes(fused_q_alone.rows.view), device_bytes(want_act.rows.view));
    EXPECT_EQ(fused_q.got_scales(), want_act.got_scales());
    EXPECT_EQ(fused_q_alone.got_scales(), want_act.got_scales());
  }
}

TEST(Fp8Linear, FusedQuantisationRefusesWhatItCannotWrite) {
  FF_REQUIRE_GPU();
  std::mt19937 rng(19);
  HostTensor in(DType::kBF16, {4, 64}), weight(DType::kBF16, {64});
  fill_normal(in, rng);
  fill_normal(weight, rng);
  const testing::DeviceTensor d_in = upload(in), d_weight = upload(weight);
  PoisonedFp8Rows narrow(4, 32), few(2, 64);
  EXPECT_THROW(model_kernels::rms_norm_fp8(d_in.view, d_weight.view, 1e-5f, TensorView(),
                                           narrow.out(), 4, nullptr),
               Error);
  EXPECT_THROW(model_kernels::rms_norm_fp8(d_in.view, d_weight.view, 1e-5f, TensorView(), few.out(),
                                           4, nullptr),
               Error);
  EXPECT_THROW(model_kernels::rms_norm_fp8(d_in.view, d_weight.view, 1e-5f, d_in.view,
                                           PoisonedFp8Rows(4, 64).out(), 4, nullptr),
               Error)
      << "in place: the fp8 pass would read the overwritten rows";
  EXPECT_THROW(model_kernels::silu_and_mul_fp8(d_in.view, TensorView(),
                                               PoisonedFp8Rows(4, 64).out(), 4, nullptr),
               Error)
      << "SiLU·mul's rows are half as wide as gate_up";
}

struct Case {
  int n, k, rows;
  DType out;
  float beta;
  const char* name;
  int column = 0;  ///< the output is columns [column, column + n) of rows `wide` wide
  int wide = 0;    ///< 0: n
};

TEST(Fp8Linear, MatchesTheDequantisedProductAndCapturesBitForBit) {
  FF_REQUIRE_GPU();
  const std::int64_t ws_bytes = std::int64_t(32) << 20;
  DeviceBuffer workspace(static_cast<std::size_t>(ws_bytes));
  const std::int64_t ws_shape[] = {ws_bytes};
  Gemm gemm(TensorView(workspace.data(), DType::kU8, ws_shape, Device::cuda(0)));
  std::mt19937 rng(13);
  for (const Case c : {Case{4096, 4096, 1, DType::kBF16, 0.0f, "o_proj, one token"},
                       Case{6144, 4096, 64, DType::kBF16, 0.0f, "qkv, 64 tokens"},
                       Case{4096, 14336, 8, DType::kF32, 1.0f, "down_proj into an f32 residual"},
                       Case{96, 64, 300, DType::kBF16, 1.0f, "small, into a bf16 residual"},
                       // A tiny model's GEMMs whose scales do not lie back to back: each
                       // weight's into its columns of the fused output.
                       Case{32, 32, 14, DType::kBF16, 0.0f, "k_proj into qkv's columns", 64, 128},
                       Case{16, 32, 14, DType::kBF16, 0.0f, "up_proj into gate_up's", 16, 32},
                       Case{32, 16, 14, DType::kF32, 1.0f, "down_proj of 16 into a residual"}}) {
    SCOPED_TRACE(c.name);
    const int wide = c.wide > 0 ? c.wide : c.n;
    const Quantised w = quantise(normal(rng, std::int64_t(c.n) * c.k, 0.02f), c.n, c.k);
    const Quantised x = quantise(normal(rng, std::int64_t(c.rows) * c.k, 1.0f), c.rows, c.k);
    const testing::DeviceTensor weight = upload(w.q), input = upload(x.q);
    const DeviceBuffer w_scale = upload_floats(w.scales), x_scale = upload_floats(x.scales);
    HostTensor y(c.out, {c.rows, wide});
    fill_normal(y, rng);
    const std::vector<double> y0 = to_doubles(y);
    testing::DeviceTensor whole = upload(y);
    const TensorView out = whole.view.narrow(1, c.column, c.n);
    const Stream stream = Stream::create();
    gemm.linear_fp8(input.view, static_cast<const float*>(x_scale.data()), weight.view,
                    static_cast<const float*>(w_scale.data()), out, c.rows, c.beta, stream.get());
    stream.synchronize();
    download(whole.view, y);
    const std::vector<double> yd = to_doubles(y);
    for (int r = 0; r < c.rows; ++r) {
      for (int col = 0; col < wide; ++col) {
        if (col >= c.column && col < c.column + c.n) continue;
        ASSERT_EQ(yd[std::size_t(r) * wide + col], y0[std::size_t(r) * wide + col])
            << "row " << r << ", column " << col << " outside the output";
      }
    }
    // The dequantised operands in double, at 64 random columns of every row.
    auto value = [](const Quantised& t, std::int64_t row, std::int64_t col, std::int64_t cols) {
      return double(load_as_float(t.q.data() + row * cols + col, DType::kFp8E4M3)) *
             t.scales[static_cast<std::size_t>(row)];
    };
    // Hopper's fp8 tensor cores accumulate with fewer bits than f32 between cuBLASLt's
    // promotions: 2.3e-4 off measured over k = 14336.
    const double tolerance = c.out == DType::kF32 ? 5e-4 : 1e-2;
    for (int s = 0; s < 64; ++s) {
      const int col = static_cast<int>(rng() % c.n);
      for (int r = 0; r < c.rows; ++r) {
        const std::size_t at = std::size_t(r) * wide + c.column + col;
        double want = c.beta * y0[at];
        for (int i = 0; i < c.k; ++i) want += value(x, r, i, c.k) * value(w, col, i, c.k);
        ASSERT_NEAR(yd[at], want, tolerance * (1.0 + std::abs(want)))
            << "row " << r << ", column " << col;
      }
    }
    if (c.beta != 0.0f) continue;  // the replay check needs the output's start state
    const std::vector<std::uint8_t> eager = device_bytes(whole.view);
    const CudaGraph graph = capture_graph(stream.get(), [&] {
      gemm.linear_fp8(input.view, static_cast<const float*>(x_scale.data()), weight.view,
                      static_cast<const float*>(w_scale.data()), out, c.rows, 0.0f, stream.get());
    });
    EXPECT_EQ(allocation_nodes(graph).count, 0);
    const GraphExec exec(graph);
    FF_CUDA_CHECK(cudaMemsetAsync(whole.view.data(), 0xFF, whole.view.span_bytes(), stream.get()));
    exec.launch(stream.get());
    stream.synchronize();
    const std::vector<std::uint8_t> replayed = device_bytes(whole.view);
    // The output's columns, row by row.
    const std::size_t element = size_of(c.out), row_bytes = element * wide;
    for (int r = 0; r < c.rows; ++r) {
      const std::size_t first = r * row_bytes + element * c.column;
      EXPECT_EQ(std::memcmp(replayed.data() + first, eager.data() + first, element * c.n), 0)
          << "row " << r << ": the replay differs from the eager GEMM";
    }
  }
}

}  // namespace
}  // namespace freezeframe
