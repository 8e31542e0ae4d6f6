// Gemm (the built-in model's GEMMs through cuBLAS) at Llama-3.1-8B's decode shapes: it matches
// a double-precision host product, and it captures into a CUDA graph without allocating
// (cuBLAS keeps to the planned workspace even on a stream it has not run on before) whose
// replay equals the eager result bit for bit.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "runtime/gemm.h"
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

struct Shape {
  int n, k;
  const char* name;
};

TEST(Gemm, MatchesHostAndCapturesWithoutAllocatingAtModelShapes) {
  FF_REQUIRE_GPU();
  DeviceBuffer workspace(std::size_t(32) << 20);
  const std::int64_t ws_shape[] = {std::int64_t(32) << 20};
  Gemm gemm(TensorView(workspace.data(), DType::kU8, ws_shape, Device::cuda(0)));
  std::mt19937 rng(7);
  // The o_proj and down_proj GEMMs of Llama-3.1-8B (large K over few rows: cuBLAS splits K
  // and wants workspace for it).
  for (const Shape shape : {Shape{4096, 4096, "o_proj"}, Shape{4096, 14336, "down_proj"}}) {
    HostTensor w(DType::kBF16, {shape.n, shape.k});
    fill_normal(w, rng, 1.0f / std::sqrt(static_cast<float>(shape.k)));
    const testing::DeviceTensor weight = upload(w);
    const std::vector<double> wd = to_doubles(w);
    for (const int rows : {1, 8, 64}) {
      SCOPED_TRACE(std::string(shape.name) + ", rows " + std::to_string(rows));
      HostTensor x(DType::kBF16, {rows, shape.k});
      fill_normal(x, rng);
      const testing::DeviceTensor input = upload(x);
      HostTensor y(DType::kBF16, {rows, shape.n});  // as the model writes it
      testing::DeviceTensor out = upload(y);
      const Stream eager_stream = Stream::create();
      // NaN poison, on the stream that writes next (non-blocking streams do not wait for
      // the legacy stream a plain cudaMemset runs on).
      FF_CUDA_CHECK(
          cudaMemsetAsync(out.view.data(), 0xFF, out.view.span_bytes(), eager_stream.get()));
      gemm.linear(input.view, weight.view, out.view, rows, 0.0f, eager_stream.get());
      eager_stream.synchronize();
      const std::vector<std::uint8_t> eager = device_bytes(out.view);

      // Against the host in double, at 64 random columns of every row.
      download(out.view, y);
      const std::vector<double> xd = to_doubles(x), yd = to_doubles(y);
      for (int c = 0; c < 64; ++c) {
        const int col = static_cast<int>(rng() % shape.n);
        for (int r = 0; r < rows; ++r) {
          double want = 0.0;
          for (int i = 0; i < shape.k; ++i) {
            want += xd[std::size_t(r) * shape.k + i] * wd[std::size_t(col) * shape.k + i];
          }
          ASSERT_NEAR(yd[std::size_t(r) * shape.n + col], want, 1e-2 * (1.0 + std::abs(want)))
              << "row " << r << ", column " << col;
        }
      }

      // Captured on another stream (cuBLAS resets a handle's workspace when its stream
      // changes): capture_graph refuses a graph that allocates.
      const Stream capture_stream = Stream::create();
      const CudaGraph graph = capture_graph(capture_stream.get(), [&] {
        gemm.linear(input.view, weight.view, out.view, rows, 0.0f, capture_stream.get());
      });
      EXPECT_EQ(allocation_nodes(graph).count, 0);
      const GraphExec exec(graph);
      FF_CUDA_CHECK(
          cudaMemsetAsync(out.view.data(), 0xFF, out.view.span_bytes(), capture_stream.get()));
      exec.launch(capture_stream.get());
      capture_stream.synchronize();
      EXPECT_EQ(device_bytes(out.view), eager) << "the replay differs from the eager GEMM";
    }
  }
}

}  // namespace
}  // namespace freezeframe
