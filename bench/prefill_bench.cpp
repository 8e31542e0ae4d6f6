// prefill_bench: achieved TFLOP/s of the paged backend's prefill kernel, causal over
// the paged cache and bidirectional (encoder-only, over the step's rows).
//
// Each configuration's forward is captured ten times into a CUDA graph (as the engine runs it),
// replayed back to back between CUDA events (graph_timings): min, median and max per forward
// over the replays, the PyTorch anchors timed the same way. The batch holds `batch` requests of
// `new` tokens each over `context` cached tokens (blocks shuffled); causal rows attend keys up to
// their own position. The cache write of the new tokens is left out (the layer reads a cache
// another layer wrote), so the figure is the attention kernel's alone, as PyTorch's SDPA figures
// are. FLOPs = 4 · heads · head_size · Σ visible (query, key) pairs; a mixed row adds decodes,
// counted the same way.
//
// usage: prefill_bench [--json FILE] [--quick] [--only NEW] [--kind KIND] [--block-size N]
//   --only: rows with NEW new tokens; --kind: rows of one kind (causal, bidirectional, chunked,
//   mixed), e.g. to profile one shape; --block-size: tokens of a cache block (default 16) for
//   the rows that do not name their own (the last three: 128-token blocks).

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
  const char* kind;  // "causal", "bidirectional", "chunked", "mixed"
  int batch, new_tokens, context, heads, kv_heads, head_size;
  int decodes = 0, decode_context = 0;  // the mixed row's decodes
  int block_size = 0;                   // tokens of a cache block; 0: --block-size's
};

using freezeframe::bench::fill_random;
using freezeframe::bench::graph_timings;
using freezeframe::bench::Spread;
using freezeframe::bench::spread;

/// Bidirectional rows are encoder-only attention over the step's rows: no cache, no blocks.
bool bidirectional(const Config& c) { return std::strcmp(c.kind, "bidirectional") == 0; }

/// Visible (query, key) pairs of the configuration.
double visible_pairs(const Config& c) {
  const bool causal = !bidirectional(c);
  double pairs = 0;
  const double n = c.new_tokens, ctx = c.context;
  pairs += c.batch * (causal ? n * ctx + n * (n + 1) / 2 : n * (ctx + n));
  pairs += double(c.decodes) * c.decode_context;
  return pairs;
}

Spread run(const Config& c, int block_size, int repeats, std::mt19937& rng) {
  const ff::AttentionBackend& backend = ff::find_backend("paged");
  const bool encoder_only = bidirectional(c);
  ff::AttentionParams params;
  params.num_heads = c.heads;
  params.num_kv_heads = c.kv_heads;
  params.head_size = c.head_size;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.head_size));
  params.kv_cache_dtype = ff::DType::kBF16;
  params.attn_type = encoder_only ? ff::AttentionType::kEncoderOnly : ff::AttentionType::kDecoder;
  params.kv_sharing_target_layer_name = encoder_only ? "" : "layers.0";  // no cache write
  auto impl = backend.make_impl(params);

  ff::SyntheticBatchSpec spec;
  spec.decode_seq_lens.assign(c.decodes, c.decode_context);
  for (int b = 0; b < c.batch; ++b)
    spec.prefills.push_back({c.context + c.new_tokens, c.new_tokens});
  spec.block_size = block_size;
  spec.seed = 7;
  const ff::SyntheticBatch batch = ff::make_synthetic_batch(spec);
  const ff::BatchLimits limits = batch.limits();
  const std::int64_t rows = batch.num_tokens;

  ff::Stream stream = ff::Stream::create();
  const ff::DType dtype = ff::DType::kBF16;
  ff::DeviceBuffer cache;
  ff::TensorView kv;
  if (!encoder_only) {
    const std::int64_t bytes =
        ff::kv_cache_bytes(backend, batch.num_blocks, block_size, c.kv_heads, c.head_size, dtype);
    cache = ff::DeviceBuffer(bytes);
    fill_random(cache.data(), bytes, dtype, rng);
    kv = ff::kv_cache_view(backend, cache.data(), ff::Device::cuda(), batch.num_blocks, block_size,
                           c.kv_heads, c.head_size, dtype);
  }
  ff::DeviceBuffer q(rows * c.heads * c.head_size * 2), k(rows * c.kv_heads * c.head_size * 2),
      v(rows * c.kv_heads * c.head_size * 2), out(rows * c.heads * c.head_size * 2);
  fill_random(q.data(), q.bytes(), dtype, rng);
  fill_random(k.data(), k.bytes(), dtype, rng);
  fill_random(v.data(), v.bytes(), dtype, rng);
  const ff::TensorView qv(q.data(), dtype, {rows, c.heads, c.head_size}, ff::Device::cuda());
  ff::TensorView kv_rows, vv_rows;
  if (encoder_only) {
    kv_rows = ff::TensorView(k.data(), dtype, {rows, c.kv_heads, c.head_size}, ff::Device::cuda());
    vv_rows = ff::TensorView(v.data(), dtype, {rows, c.kv_heads, c.head_size}, ff::Device::cuda());
  }
  const ff::TensorView ov(out.data(), dtype, {rows, c.heads * c.head_size}, ff::Device::cuda());
  ff::DeviceBuffer workspace(std::max<std::size_t>(impl->workspace_bytes(limits), 1));
  ff::AttentionLayer layer;
  layer.name = "bench";
  layer.workspace = ff::TensorView(workspace.data(), ff::DType::kU8,
                                   {std::int64_t(workspace.bytes())}, ff::Device::cuda());
  auto builder = backend.make_builder(limits, nullptr);
  const ff::AttentionMetadata& md = builder->build(batch.metadata(), stream.get());
  stream.synchronize();

  auto forward = [&] { impl->forward(layer, qv, kv_rows, vv_rows, kv, md, ov, stream.get()); };
  for (int i = 0; i < 3; ++i) forward();
  return spread(graph_timings(stream.get(), 10, repeats, [&](int) { forward(); }));
}

std::vector<Config> configs() {
  std::vector<Config> out;
  constexpr int kTokens = 16384;  // batch × new tokens, as FlashAttention's benchmarks
  for (const char* kind : {"causal", "bidirectional"}) {
    for (int n : {512, 1024, 2048, 4096, 8192, 16384})
      out.push_back({kind, kTokens / n, n, 0, 32, 8, 128});
  }
  for (int n : {1024, 4096, 16384}) out.push_back({"causal", kTokens / n, n, 0, 32, 32, 128});
  for (int d : {64, 256}) {
    for (int n : {4096, 16384}) out.push_back({"causal", kTokens / n, n, 0, 32, 8, d});
  }
  out.push_back({"chunked", 1, 4096, 28672, 32, 8, 128});
  out.push_back({"mixed", 2, 2048, 6144, 32, 8, 128, 64, 4096});
  // The Hopper kernel's pace depends on the page size (its copies are one per page): the
  // headline rows again with 128-token blocks.
  out.push_back({"causal", 1, 16384, 0, 32, 8, 128, 0, 0, 128});
  out.push_back({"causal", 4, 4096, 0, 32, 8, 128, 0, 0, 128});
  out.push_back({"causal", 8, 2048, 0, 32, 8, 128, 0, 0, 128});
  out.push_back({"causal", 16, 1024, 0, 32, 8, 128, 0, 0, 128});
  out.push_back({"chunked", 1, 4096, 28672, 32, 8, 128, 0, 0, 128});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  bool quick = false;
  int only = 0;
  int block_size = 16;
  std::string kind;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--block-size") == 0 && i + 1 < argc) {
      block_size = std::atoi(argv[++i]);
      if (block_size < 1 || block_size > 1024 || (block_size & (block_size - 1)) != 0) {
        std::fprintf(stderr, "prefill_bench: --block-size '%s': a power of two from 1 to 1024\n",
                     argv[i]);
        return 2;
      }
    } else if (std::strcmp(argv[i], "--kind") == 0 && i + 1 < argc) {
      kind = argv[++i];
      if (kind != "causal" && kind != "bidirectional" && kind != "chunked" && kind != "mixed") {
        std::fprintf(stderr,
                     "prefill_bench: --kind '%s': causal, bidirectional, chunked or mixed\n",
                     kind.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: prefill_bench [--json FILE] [--quick] [--only NEW] [--kind KIND] "
                   "[--block-size N]\n");
      return 2;
    }
  }
  if (!ff::has_gpu()) {
    std::fprintf(stderr, "prefill_bench needs a GPU: %s\n", ff::gpu_status().c_str());
    return 1;
  }
  try {
    std::mt19937 rng(42);
    std::printf("device: %s\n", ff::gpu_status().c_str());
    std::printf("%-13s %5s %6s %7s %6s %5s %8s %5s %8s %10s %8s %8s\n", "kind", "batch", "new",
                "context", "heads", "head", "decodes", "block", "min_ms", "median_ms", "max_ms",
                "TFLOP/s");
    std::FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
    for (const Config& c : configs()) {
      if (only > 0 && c.new_tokens != only) continue;
      if (!kind.empty() && kind != c.kind) continue;
      const int block = c.block_size > 0 ? c.block_size : block_size;
      const int shown_block = bidirectional(c) ? 0 : block;  // rows read no cache
      const Spread t = run(c, block, quick ? 5 : 11, rng);
      const double ms = t.median;
      const double tflops = 4.0 * c.heads * c.head_size * visible_pairs(c) / (ms * 1e-3) / 1e12;
      std::printf("%-13s %5d %6d %7d %3d/%-2d %5d %8d %5d %8.3f %10.3f %8.3f %8.1f\n", c.kind,
                  c.batch, c.new_tokens, c.context, c.heads, c.kv_heads, c.head_size, c.decodes,
                  shown_block, t.min, ms, t.max, tflops);
      std::fflush(stdout);
      if (json != nullptr) {
        std::fprintf(json,
                     "{\"kind\": \"%s\", \"batch\": %d, \"new_tokens\": %d, \"context\": %d, "
                     "\"heads\": %d, \"kv_heads\": %d, \"head_size\": %d, \"decodes\": %d, "
                     "\"decode_context\": %d, \"block_size\": %d, \"median_ms\": %.4f, "
                     "\"min_ms\": %.4f, \"max_ms\": %.4f, \"tflops\": %.2f, "
                     "\"timing\": \"graph\"}\n",
                     c.kind, c.batch, c.new_tokens, c.context, c.heads, c.kv_heads, c.head_size,
                     c.decodes, c.decode_context, shown_block, ms, t.min, t.max, tflops);
      }
    }
    if (json != nullptr) std::fclose(json);
  } catch (const ff::Error& e) {
    std::fprintf(stderr, "prefill_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
