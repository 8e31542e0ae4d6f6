// decode_bench: achieved KV-read bandwidth of the paged backend, per batch × context.
//
// Each configuration runs one decode forward (cache write of the new token included) over a
// paged cache with a shuffled block table. Forwards are captured into a CUDA graph (as the
// engine runs them) cycling among disjoint caches so that the bytes a forward reads are not in
// the L2 cache, and the graph is replayed back to back between CUDA events (graph_timings):
// min, median and max per forward over the replays, the PyTorch anchors timed the same way.
// Bandwidth = bytes of K and V read ÷ time. A device-to-device copy (bytes read + written ÷ time)
// is measured in the same run as the ceiling.
//
// The block table's rows are as wide as the deployment's (--max-model-len, Llama-3.1-8B's 131072
// positions by default, as configs/llama-3.1-8b.yaml deploys it): the kernel picks its split
// count from that width, as it does in the engine.
//
// usage: decode_bench [--json FILE] [--quick] [--only BATCH:CONTEXT] [--max-model-len N]
//   (--only: one shape's rows, for a profiler; --max-model-len 0: rows as wide as the context)

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_support.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/backends/synthetic_batch.h"
#include "freezeframe/base/error.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/device.h"

namespace ff = freezeframe;

namespace {

struct Config {
  int batch, context, heads, kv_heads, head_size, block_size;
  ff::DType cache_dtype;
};

struct Result {
  Config config;
  int copies;
  double median_us, min_us, max_us, kv_bytes;
};

constexpr std::size_t kL2Defeat = 512ull << 20;  // rotate until a run's inputs total ≥ 512 MiB

using freezeframe::bench::copy_bandwidth_tbs;
using freezeframe::bench::fill_random;
using freezeframe::bench::graph_timings;
using freezeframe::bench::spread;

Result run(const Config& c, int repeats, std::mt19937& rng, int max_model_len) {
  const ff::AttentionBackend& backend = ff::find_backend("paged");
  ff::AttentionParams params;
  params.num_heads = c.heads;
  params.num_kv_heads = c.kv_heads;
  params.head_size = c.head_size;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
  params.kv_cache_dtype = c.cache_dtype;
  auto impl = backend.make_impl(params);

  const double kv_bytes =
      double(c.batch) * c.context * c.kv_heads * c.head_size * 2 * ff::size_of(c.cache_dtype);
  const int copies =
      static_cast<int>(std::max<double>(1.0, std::ceil(double(kL2Defeat) / kv_bytes)));
  // One pool holds every copy; each copy's batch uses its own blocks.
  std::vector<ff::SyntheticBatch> batches;
  int num_blocks = 0;
  for (int i = 0; i < copies; ++i) {
    ff::SyntheticBatchSpec spec;
    spec.decode_seq_lens.assign(c.batch, c.context);
    spec.block_size = c.block_size;
    spec.spare_blocks = 0;
    spec.seed = 1000 + i;
    spec.block_table_stride = (max_model_len + c.block_size - 1) / c.block_size;
    batches.push_back(ff::make_synthetic_batch(spec));
    // Shift this copy's block ids past the previous copies'.
    for (auto& b : batches.back().block_table) b += num_blocks;
    for (auto& s : batches.back().slot_mapping) s += std::int64_t(num_blocks) * c.block_size;
    num_blocks += batches.back().num_blocks;
  }
  const ff::BatchLimits limits = batches.front().limits();

  ff::Stream stream = ff::Stream::create();
  const std::int64_t cache_bytes =
      ff::kv_cache_bytes(backend, num_blocks, c.block_size, c.kv_heads, c.head_size, c.cache_dtype);
  ff::DeviceBuffer cache(cache_bytes);
  fill_random(cache.data(), cache_bytes, c.cache_dtype, rng);
  const ff::TensorView kv = ff::kv_cache_view(backend, cache.data(), ff::Device::cuda(), num_blocks,
                                              c.block_size, c.kv_heads, c.head_size, c.cache_dtype);

  const ff::DType dtype = ff::DType::kBF16;
  const std::int64_t rows = c.batch;
  ff::DeviceBuffer q(rows * c.heads * c.head_size * 2), k(rows * c.kv_heads * c.head_size * 2),
      v(rows * c.kv_heads * c.head_size * 2), out(rows * c.heads * c.head_size * 2);
  fill_random(q.data(), q.bytes(), dtype, rng);
  fill_random(k.data(), k.bytes(), dtype, rng);
  fill_random(v.data(), v.bytes(), dtype, rng);
  const ff::TensorView qv(q.data(), dtype, {rows, c.heads, c.head_size}, ff::Device::cuda());
  const ff::TensorView kv_new(k.data(), dtype, {rows, c.kv_heads, c.head_size}, ff::Device::cuda());
  const ff::TensorView vv_new(v.data(), dtype, {rows, c.kv_heads, c.head_size}, ff::Device::cuda());
  const ff::TensorView ov(out.data(), dtype, {rows, c.heads * c.head_size}, ff::Device::cuda());
  ff::DeviceBuffer workspace(impl->workspace_bytes(limits));
  ff::AttentionLayer layer;
  layer.name = "bench";
  layer.k_scale = layer.v_scale = ff::is_fp8(c.cache_dtype) ? 0.05f : 1.0f;
  layer.workspace = ff::TensorView(workspace.data(), ff::DType::kU8,
                                   {std::int64_t(workspace.bytes())}, ff::Device::cuda());

  std::vector<std::unique_ptr<ff::MetadataBuilder>> builders;
  std::vector<const ff::AttentionMetadata*> metadata;
  for (const auto& b : batches) {
    builders.push_back(backend.make_builder(limits, nullptr));
    metadata.push_back(&builders.back()->build(b.metadata(), stream.get()));
  }
  stream.synchronize();

  auto forward = [&](int i) {
    impl->forward(layer, qv, kv_new, vv_new, kv, *metadata[i % copies], ov, stream.get());
  };
  for (int i = 0; i < 3 + copies; ++i) forward(i);
  // At least 16 forwards a replay: the graph's own launch is spread thin.
  const auto t = spread(graph_timings(stream.get(), std::max(copies, 16), repeats, forward));
  return {c, copies, t.median * 1e3, t.min * 1e3, t.max * 1e3, kv_bytes};
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  bool quick = false;
  int only_batch = 0, only_context = 0;
  int max_model_len = 131072;  // Llama-3.1-8B's, as configs/llama-3.1-8b.yaml deploys it
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%d:%d", &only_batch, &only_context) == 2) {
      ++i;
    } else if (std::strcmp(argv[i], "--max-model-len") == 0 && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%d", &max_model_len) == 1 && max_model_len >= 0 &&
               max_model_len <= (1 << 24)) {
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: decode_bench [--json FILE] [--quick] [--only BATCH:CONTEXT] "
                   "[--max-model-len N]\n");
      return 2;
    }
  }
  if (!ff::has_gpu()) {
    std::fprintf(stderr, "decode_bench needs a GPU: %s\n", ff::gpu_status().c_str());
    return 1;
  }
  try {
    std::vector<Config> configs;
    for (int batch : {1, 8, 64, 256}) {
      for (int context : {512, 4096, 32768})
        configs.push_back({batch, context, 32, 8, 128, 16, ff::DType::kBF16});
    }
    for (int batch : {8, 64}) {
      for (int context : {4096, 32768})
        configs.push_back({batch, context, 32, 8, 128, 16, ff::DType::kFp8E4M3});
    }
    for (int head_size : {64, 256})
      configs.push_back({64, 4096, 32, 8, head_size, 16, ff::DType::kBF16});
    configs.push_back({64, 4096, 32, 8, 128, 32, ff::DType::kBF16});
    configs.push_back({64, 4096, 32, 8, 128, 64, ff::DType::kBF16});
    if (only_batch > 0) {
      std::erase_if(configs, [&](const Config& c) {
        return c.batch != only_batch || c.context != only_context;
      });
    }

    std::mt19937 rng(42);
    const double copy_tbs = copy_bandwidth_tbs();
    std::printf("device: %s; device-to-device copy %.2f TB/s (read + write); block tables %s\n",
                ff::gpu_status().c_str(), copy_tbs,
                max_model_len > 0 ? ("of " + std::to_string(max_model_len) + " positions").c_str()
                                  : "as wide as each row's context");
    std::printf("%6s %8s %6s %5s %5s %-9s %8s %10s %8s %10s %8s\n", "batch", "context", "heads",
                "head", "block", "kv", "min_us", "median_us", "max_us", "KV_TB/s", "of_copy");
    std::FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
    for (const Config& c : configs) {
      const Result r = run(c, quick ? 5 : 11, rng, max_model_len);
      const double tbs = r.kv_bytes / (r.median_us * 1e-6) / 1e12;
      std::printf("%6d %8d %3d/%-2d %5d %5d %-9s %8.1f %10.1f %8.1f %10.2f %7.0f%%\n", c.batch,
                  c.context, c.heads, c.kv_heads, c.head_size, c.block_size,
                  std::string(ff::name_of(c.cache_dtype)).c_str(), r.min_us, r.median_us, r.max_us,
                  tbs, 100.0 * tbs / copy_tbs);
      std::fflush(stdout);
      if (json != nullptr) {
        std::fprintf(
            json,
            "{\"backend\": \"paged\", \"batch\": %d, \"context\": %d, \"heads\": %d, "
            "\"kv_heads\": %d, "
            "\"head_size\": %d, \"block_size\": %d, \"kv_dtype\": \"%s\", \"median_us\": %.2f, "
            "\"min_us\": %.2f, \"max_us\": %.2f, "
            "\"kv_bytes\": %.0f, \"kv_tbs\": %.4f, \"copy_tbs\": %.4f, \"l2_rotation\": %d, "
            "\"block_table_positions\": %d, \"timing\": \"graph\"}\n",
            c.batch, c.context, c.heads, c.kv_heads, c.head_size, c.block_size,
            std::string(ff::name_of(c.cache_dtype)).c_str(), r.median_us, r.min_us, r.max_us,
            r.kv_bytes, tbs, copy_tbs, r.copies, max_model_len);
      }
    }
    if (json != nullptr) std::fclose(json);
  } catch (const ff::Error& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
