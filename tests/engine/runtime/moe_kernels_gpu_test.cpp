// The routed experts' kernels against the host in double precision on random inputs: the
// router's top-k (greedy and group-limited, scaled), the sort by expert (every row once, the
// experts ascending), and the whole layer (route, sort, the grouped GEMMs with SiLU·mul
// between, the weighted sum into a bf16 or f32 residual) over shapes whose widths are not
// whole tiles, with scratch poisoned so rows left unwritten show; a graph replay of the layer
// gives the eager bits.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "runtime/model_kernels.h"
#include "runtime/moe_kernels.h"
#include "support/device_tensor.h"
#include "support/gpu.h"
#include "support/random.h"

namespace freezeframe {
namespace {

namespace mk = model_kernels;
using testing::download;
using testing::fill_normal;
using testing::relative_l2;
using testing::upload;

HostTensor host_of(const TensorView& device, DType dtype) {
  std::vector<std::int64_t> shape;
  for (int d = 0; d < device.dim(); ++d) shape.push_back(device.size(d));
  HostTensor h(dtype, shape);
  download(device, h);
  return h;
}

/// The host's top k of softmax(logits[r]) under `routing`: (expert, weight), highest first.
std::vector<std::pair<int, double>> host_route(const HostTensor& logits, std::int64_t r,
                                               const mk::MoeRouting& routing) {
  const std::int64_t e_count = logits.shape()[1];
  std::vector<double> p(static_cast<std::size_t>(e_count));
  double top = -INFINITY, sum = 0;
  for (std::int64_t e = 0; e < e_count; ++e)
    top = std::max(top, double(logits.get(r * e_count + e)));
  for (std::int64_t e = 0; e < e_count; ++e)
    sum += p[e] = std::exp(logits.get(r * e_count + e) - top);
  for (double& x : p) x /= sum;
  std::vector<double> candidates = p;
  if (routing.num_groups > 1) {
    const std::int64_t size = e_count / routing.num_groups;
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < routing.num_groups; ++g) {
      groups.push_back({*std::max_element(p.begin() + g * size, p.begin() + (g + 1) * size), -g});
    }
    std::sort(groups.rbegin(), groups.rend());
    for (std::size_t i = routing.top_groups; i < groups.size(); ++i) {
      const int g = -groups[i].second;
      std::fill(candidates.begin() + g * size, candidates.begin() + (g + 1) * size, 0.0);
    }
  }
  std::vector<std::pair<int, double>> chosen;
  for (int j = 0; j < routing.experts_per_token; ++j) {
    const auto best = std::max_element(candidates.begin(), candidates.end()) - candidates.begin();
    chosen.push_back({static_cast<int>(best), candidates[best] * routing.scaling});
    candidates[best] = -INFINITY;
  }
  return chosen;
}

struct RouteCase {
  int rows, experts;
  mk::MoeRouting routing;
  const char* name;
};

TEST(MoeKernels, RouteTakesTheTopKOfTheSoftmax) {
  FF_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (const RouteCase c : {RouteCase{1, 64, {6, 1, 1, 1.0f}, "V2-Lite, one token"},
                            RouteCase{37, 160, {6, 8, 3, 16.0f}, "V2's groups, scaled"},
                            RouteCase{300, 8, {2, 1, 1, 1.0f}, "8 experts"}}) {
    SCOPED_TRACE(c.name);
    HostTensor logits(DType::kF32, {c.rows, c.experts});
    fill_normal(logits, rng, 2.0f);
    const auto d_logits = upload(logits);
    HostTensor ids(DType::kI32, {c.rows, c.routing.experts_per_token});
    HostTensor weights(DType::kF32, {c.rows, c.routing.experts_per_token});
    ids.fill_bytes(0xFF);
    weights.fill_bytes(0xFF);
    auto d_ids = upload(ids), d_weights = upload(weights);
    mk::moe_route(d_logits.view, c.routing, d_ids.view, d_weights.view, c.rows, nullptr);
    FF_CUDA_CHECK(cudaDeviceSynchronize());
    download(d_ids.view, ids);
    download(d_weights.view, weights);
    for (int r = 0; r < c.rows; ++r) {
      const auto want = host_route(logits, r, c.routing);
      for (int j = 0; j < c.routing.experts_per_token; ++j) {
        const std::int64_t i = std::int64_t(r) * c.routing.experts_per_token + j;
        ASSERT_EQ(static_cast<int>(ids.get(i)), want[j].first) << "row " << r << ", slot " << j;
        EXPECT_NEAR(weights.get(i), want[j].second, 1e-5 * want[j].second + 1e-9);
      }
    }
  }
}

TEST(MoeKernels, SortPlacesEveryRowOnceByExpert) {
  FF_REQUIRE_GPU();
  std::mt19937 rng(5);
  for (const auto& [rows, k, experts] :
       {std::tuple{1, 6, 64}, std::tuple{999, 6, 160}, std::tuple{8192, 6, 64}}) {
    HostTensor ids(DType::kI32, {rows, k});
    std::uniform_int_distribution<int> pick(0, experts - 1);
    for (std::int64_t i = 0; i < std::int64_t(rows) * k; ++i) ids.set(i, float(pick(rng)));
    const auto d_ids = upload(ids);
    HostTensor sorted(DType::kI32, {rows, k});
    sorted.fill_bytes(0xFF);
    auto d_sorted_ids = upload(sorted), d_sorted_rows = upload(sorted);
    mk::moe_sort(d_ids.view, experts, d_sorted_ids.view, d_sorted_rows.view, rows, nullptr);
    FF_CUDA_CHECK(cudaDeviceSynchronize());
    const HostTensor got_ids = host_of(d_sorted_ids.view, DType::kI32);
    const HostTensor got_rows = host_of(d_sorted_rows.view, DType::kI32);
    std::vector<bool> seen(static_cast<std::size_t>(rows) * k, false);
    for (std::int64_t p = 0; p < std::int64_t(rows) * k; ++p) {
      const auto row = static_cast<std::int64_t>(got_rows.get(p));
      ASSERT_TRUE(row >= 0 && row < std::int64_t(rows) * k && !seen[row]) << "position " << p;
      seen[row] = true;
      EXPECT_EQ(got_ids.get(p), ids.get(row)) << "position " << p;
      if (p > 0) EXPECT_LE(got_ids.get(p - 1), got_ids.get(p)) << "position " << p;
    }
  }
}

struct LayerCase {
  int rows, hidden, inter, experts;
  mk::MoeRouting routing;
  DType residual;
  bool accumulate;
  const char* name;
};

/// The device buffers of one MoE layer and its run, eager or captured.
struct Layer {
  LayerCase c;
  testing::DeviceTensor x, router_logits, ids, weights, sorted_ids, sorted_rows, gate_up, act, out,
      hidden;
  std::vector<testing::DeviceTensor> gate_up_w, down_w;  // per expert: [2I, h], [h, I]
  std::vector<const void*> gate_up_ptrs, down_ptrs;

  void run(cudaStream_t stream) {
    const int k = c.routing.experts_per_token, count = c.rows * k;
    mk::moe_route(router_logits.view, c.routing, ids.view, weights.view, c.rows, stream);
    mk::moe_sort(ids.view, c.experts, sorted_ids.view, sorted_rows.view, c.rows, stream);
    mk::moe_grouped_gemm(x.view, k, sorted_ids.view, sorted_rows.view, count, gate_up_ptrs,
                         2 * c.inter, c.hidden, gate_up.view, stream);
    mk::silu_and_mul(gate_up.view, act.view, count, stream);
    mk::moe_grouped_gemm(act.view, 1, sorted_ids.view, sorted_rows.view, count, down_ptrs, c.hidden,
                         c.inter, out.view, stream);
    mk::moe_combine(out.view, weights.view, k, hidden.view, c.accumulate, c.rows, stream);
  }
};

TEST(MoeKernels, ALayerMatchesTheHostAndReplaysItsBits) {
  FF_REQUIRE_GPU();
  std::mt19937 rng(7);
  for (const LayerCase c :
       {LayerCase{1, 256, 128, 16, {4, 1, 1, 1.0f}, DType::kBF16, true, "decode, one token"},
        LayerCase{
            5, 256, 40, 16, {4, 4, 2, 2.5f}, DType::kF32, true, "groups; widths not whole tiles"},
        LayerCase{300,
                  128,
                  96,
                  64,
                  {6, 1, 1, 1.0f},
                  DType::kBF16,
                  false,
                  "300 tokens written, not added"}}) {
    SCOPED_TRACE(c.name);
    const int k = c.routing.experts_per_token, count = c.rows * k;
    Layer layer{c};
    HostTensor x(DType::kBF16, {c.rows, c.hidden}), logits(DType::kF32, {c.rows, c.experts});
    fill_normal(x, rng, 1.0f);
    fill_normal(logits, rng, 3.0f);
    layer.x = upload(x);
    layer.router_logits = upload(logits);
    HostTensor poison_i32(DType::kI32, {c.rows, k}), poison_f32(DType::kF32, {c.rows, k});
    poison_i32.fill_bytes(0xFF);
    poison_f32.fill_bytes(0xFF);
    layer.ids = upload(poison_i32);
    layer.sorted_ids = upload(poison_i32);
    layer.sorted_rows = upload(poison_i32);
    layer.weights = upload(poison_f32);
    auto poisoned = [](std::int64_t r, std::int64_t w) {
      HostTensor t(DType::kBF16, {r, w});
      t.fill_bytes(0xFF);
      return upload(t);
    };
    layer.gate_up = poisoned(count, 2 * c.inter);
    layer.act = poisoned(count, c.inter);
    layer.out = poisoned(count, c.hidden);
    HostTensor hidden0(c.residual, {c.rows, c.hidden});
    fill_normal(hidden0, rng, 1.0f);
    layer.hidden = upload(hidden0);
    std::vector<HostTensor> gate_up_w, down_w;
    for (int e = 0; e < c.experts; ++e) {
      gate_up_w.emplace_back(DType::kBF16, std::vector<std::int64_t>{2 * c.inter, c.hidden});
      down_w.emplace_back(DType::kBF16, std::vector<std::int64_t>{c.hidden, c.inter});
      fill_normal(gate_up_w.back(), rng, 1.0f / std::sqrt(float(c.hidden)));
      fill_normal(down_w.back(), rng, 1.0f / std::sqrt(float(c.inter)));
      layer.gate_up_w.push_back(upload(gate_up_w.back()));
      layer.down_w.push_back(upload(down_w.back()));
      layer.gate_up_ptrs.push_back(layer.gate_up_w.back().view.data());
      layer.down_ptrs.push_back(layer.down_w.back().view.data());
    }
    layer.run(nullptr);
    FF_CUDA_CHECK(cudaDeviceSynchronize());
    const HostTensor got = host_of(layer.hidden.view, c.residual);
    const HostTensor ids = host_of(layer.ids.view, DType::kI32);
    const HostTensor weights = host_of(layer.weights.view, DType::kF32);

    // The host: the experts the kernel chose (route is checked above), in double.
    std::vector<double> want(static_cast<std::size_t>(c.rows) * c.hidden), got_d(want.size());
    for (int t = 0; t < c.rows; ++t) {
      const auto chosen = host_route(logits, t, c.routing);
      for (int j = 0; j < k; ++j) {
        const int e = static_cast<int>(ids.get(std::int64_t(t) * k + j));
        ASSERT_EQ(e, chosen[j].first) << "token " << t << ", slot " << j;
        std::vector<double> act(static_cast<std::size_t>(c.inter));
        for (int i = 0; i < c.inter; ++i) {
          double g = 0, u = 0;
          for (int h = 0; h < c.hidden; ++h) {
            g += double(x.get(std::int64_t(t) * c.hidden + h)) *
                 gate_up_w[e].get(std::int64_t(i) * c.hidden + h);
            u += double(x.get(std::int64_t(t) * c.hidden + h)) *
                 gate_up_w[e].get(std::int64_t(c.inter + i) * c.hidden + h);
          }
          act[i] = g / (1 + std::exp(-g)) * u;
        }
        for (int h = 0; h < c.hidden; ++h) {
          double y = 0;
          for (int i = 0; i < c.inter; ++i)
            y += act[i] * down_w[e].get(std::int64_t(h) * c.inter + i);
          want[std::size_t(t) * c.hidden + h] += chosen[j].second * y;
        }
      }
      for (int h = 0; h < c.hidden; ++h) {
        const std::size_t i = std::size_t(t) * c.hidden + h;
        if (c.accumulate) want[i] += hidden0.get(static_cast<std::int64_t>(i));
        got_d[i] = got.get(static_cast<std::int64_t>(i));
      }
    }
    for (const double v : got_d) ASSERT_TRUE(std::isfinite(v)) << "an unwritten or poisoned value";
    EXPECT_LE(relative_l2(got_d, want), 1e-2);

    // Captured and replayed over the same inputs: the same bits.
    layer.hidden = upload(hidden0);
    const Stream stream = Stream::create();
    const CudaGraph graph = capture_graph(stream.get(), [&] { layer.run(stream.get()); });
    const GraphExec exec(graph);
    exec.launch(stream.get());
    stream.synchronize();
    const HostTensor replayed = host_of(layer.hidden.view, c.residual);
    EXPECT_EQ(std::memcmp(replayed.data(), got.data(), got.bytes()), 0) << "graph replay";
  }
}

// What the kernels cannot run is refused before anything is enqueued, naming it.
TEST(MoeKernels, RefuseWhatTheyCannotRun) {
  FF_REQUIRE_GPU();
  auto device = [](DType dtype, std::int64_t rows, std::int64_t cols) {
    HostTensor t(dtype, {rows, cols});
    t.fill_bytes(0);
    return upload(t);
  };
  const auto many = device(DType::kF32, 4, 300), logits = device(DType::kF32, 4, 8);
  const auto ids = device(DType::kI32, 4, 2), weights = device(DType::kF32, 4, 2);
  auto refused = [](const std::function<void()>& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "accepted; wanted a refusal naming " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    }
  };
  refused(
      [&] {
        mk::moe_route(many.view, {2, 1, 1, 1.0f}, ids.view, weights.view, 4, nullptr);
      },
      "300 experts; up to 256");
  refused(
      [&] {
        mk::moe_route(logits.view, {9, 1, 1, 1.0f}, ids.view, weights.view, 4, nullptr);
      },
      "9 experts a token of 8");
  refused(
      [&] {
        mk::moe_route(logits.view, {2, 3, 1, 1.0f}, ids.view, weights.view, 4, nullptr);
      },
      "3 groups (1 chosen) cannot hold 2 of 8 experts");
  refused(
      [&] {
        mk::moe_route(logits.view, {2, 1, 1, 0.0f}, ids.view, weights.view, 4, nullptr);
      },
      "the scaling must be finite and > 0");
  const auto sorted = device(DType::kI32, 4, 2);
  refused([&] { mk::moe_sort(ids.view, 0, sorted.view, sorted.view, 4, nullptr); },
          "0 experts; up to 256");
  const auto x = device(DType::kBF16, 4, 12), out = device(DType::kBF16, 8, 16);
  const void* w[] = {x.view.data()};
  refused(
      [&] {
        mk::moe_grouped_gemm(x.view, 2, sorted.view, sorted.view, 8, w, 16, 12, out.view, nullptr);
      },
      "needs k a multiple of 8");
  const auto hidden = device(DType::kBF16, 4, 16), narrow = device(DType::kBF16, 8, 8);
  refused([&] { mk::moe_combine(narrow.view, weights.view, 2, hidden.view, true, 4, nullptr); },
          "is not 16 wide");
}

}  // namespace
}  // namespace freezeframe
