// mla_decode_bench: the MLA decode kernel (backend "mla"'s decode attention) per batch ×
// context × heads: achieved latent-cache bandwidth and tensor-core FLOP/s.
//
// One call is the absorbed attention of a decode step's rows: each head's 576-wide query
// against the paged latent cache [blocks, block_size, 576] (bf16), 512-wide outputs and LSEs,
// split-KV and its combine included, with the split count the backend takes for the
// deployment's block-table width (--max-model-len, DeepSeek-V2-Lite's 163840 by default).
// Calls are captured into a CUDA graph cycling among disjoint caches so that a call's bytes are
// not in the L2 cache, and replayed back to back between CUDA events (bench_support.h,
// graph_timings). Bandwidth = latent bytes of the rows' positions ÷ time; a device-to-device
// copy (bytes read + written ÷ time) in the same run is the ceiling. FLOP/s counts
// 2 · heads · (576 + 512) per position.
//
// usage: mla_decode_bench [--json FILE] [--quick] [--only HEADS:BATCH:CONTEXT]
//                         [--max-model-len N]   (0: block tables as wide as each context)

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_support.h"
#include "freezeframe/backends/synthetic_batch.h"
#include "freezeframe/base/error.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/device.h"
#include "mla_decode/mla_decode.h"

namespace ff = freezeframe;
namespace mla = freezeframe::mla_decode;

namespace {

struct Config {
  int heads, batch, context, block_size;
};

struct Result {
  int copies, splits;
  double median_us, min_us, max_us, kv_bytes, flops;
};

constexpr std::size_t kL2Defeat = 512ull << 20;  // rotate until a run's inputs total ≥ 512 MiB

using freezeframe::bench::fill_random;

Result run(const Config& c, int repeats, std::mt19937& rng, int max_model_len) {
  const double kv_bytes = double(c.batch) * c.context * mla::kQk * 2;
  const int copies =
      static_cast<int>(std::max<double>(1.0, std::ceil(double(kL2Defeat) / kv_bytes)));
  const int width = max_model_len > 0 ? max_model_len : c.context;
  const int stride = (width + c.block_size - 1) / c.block_size;
  // One pool holds every copy; each copy's rows use blocks of their own.
  std::vector<std::int32_t> tables, lens(static_cast<std::size_t>(c.batch) * copies, c.context);
  int num_blocks = 0;
  for (int i = 0; i < copies; ++i) {
    ff::SyntheticBatchSpec spec;
    spec.decode_seq_lens.assign(c.batch, c.context);
    spec.block_size = c.block_size;
    spec.spare_blocks = 0;
    spec.seed = 2000 + i;
    spec.block_table_stride = stride;
    ff::SyntheticBatch b = ff::make_synthetic_batch(spec);
    for (auto& block : b.block_table) block += num_blocks;
    tables.insert(tables.end(), b.block_table.begin(), b.block_table.end());
    num_blocks += b.num_blocks;
  }

  const std::size_t cache_bytes = std::size_t(num_blocks) * c.block_size * mla::kQk * 2;
  ff::DeviceBuffer cache(cache_bytes), table(tables.size() * 4), seq_lens(lens.size() * 4);
  fill_random(cache.data(), cache_bytes, ff::DType::kBF16, rng);
  FF_CUDA_CHECK(cudaMemcpy(table.data(), tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
  FF_CUDA_CHECK(cudaMemcpy(seq_lens.data(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  const std::size_t states = std::size_t(c.batch) * c.heads;
  ff::DeviceBuffer q(states * mla::kQk * 4), out(states * mla::kLatent * 4), lse(states * 4);
  fill_random(q.data(), q.bytes(), ff::DType::kF32, rng);

  const ff::DecodeSplitPolicy policy = mla::split_policy(nullptr);
  const long longest = long(stride) * c.block_size;
  const int splits = mla::split_count(policy, c.heads, c.batch, longest);
  const mla::MlaDecodeWorkspace scratch(c.heads, splits, c.batch);
  ff::DeviceBuffer workspace(std::max<std::size_t>(scratch.total, 256));

  mla::MlaDecodeParams p;
  p.q_stride_row = std::int64_t(c.heads) * mla::kQk;
  p.q_stride_head = mla::kQk;
  p.q = static_cast<const float*>(q.data());
  p.cache = cache.data();
  p.cache_stride_block = std::int64_t(c.block_size) * mla::kQk;
  p.cache_stride_token = mla::kQk;
  p.block_table_stride = stride;
  p.block_size = c.block_size;
  p.out = static_cast<float*>(out.data());
  p.out_stride_row = std::int64_t(c.heads) * mla::kLatent;
  p.out_stride_head = mla::kLatent;
  p.lse = static_cast<float*>(lse.data());
  p.lse_stride_row = c.heads;
  if (splits > 1) {
    p.partial_out = static_cast<float*>(workspace.data());
    p.partial_lse = reinterpret_cast<float*>(static_cast<std::uint8_t*>(workspace.data()) +
                                             scratch.partial_lse_offset);
  }
  p.num_rows = c.batch;
  p.num_heads = c.heads;
  p.num_splits = splits;
  p.scale = 1.0f / std::sqrt(192.0f);

  ff::Stream stream = ff::Stream::create();
  auto call = [&](int i) {
    mla::MlaDecodeParams copy = p;
    const int k = i % copies;
    copy.block_table =
        static_cast<const std::int32_t*>(table.data()) + std::int64_t(k) * c.batch * stride;
    copy.seq_lens = static_cast<const std::int32_t*>(seq_lens.data()) + std::int64_t(k) * c.batch;
    mla::launch_mla_decode(copy, ff::DType::kBF16, stream.get());
  };
  for (int i = 0; i < 2 + copies; ++i) call(i);
  const auto t = freezeframe::bench::spread(
      freezeframe::bench::graph_timings(stream.get(), std::max(copies, 8), repeats, call));
  const double flops = 2.0 * c.heads * double(c.batch) * c.context * (mla::kQk + mla::kLatent);
  return {copies, splits, t.median * 1e3, t.min * 1e3, t.max * 1e3, kv_bytes, flops};
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  bool quick = false;
  int only_heads = 0, only_batch = 0, only_context = 0;
  int max_model_len = 163840;  // DeepSeek-V2-Lite's max_position_embeddings
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%d:%d:%d", &only_heads, &only_batch, &only_context) == 3) {
      ++i;
    } else if (std::strcmp(argv[i], "--max-model-len") == 0 && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%d", &max_model_len) == 1 && max_model_len >= 0 &&
               max_model_len <= (1 << 24)) {
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: mla_decode_bench [--json FILE] [--quick] [--only HEADS:BATCH:CONTEXT] "
                   "[--max-model-len N]\n");
      return 2;
    }
  }
  if (!ff::has_gpu()) {
    std::fprintf(stderr, "mla_decode_bench needs a GPU: %s\n", ff::gpu_status().c_str());
    return 1;
  }
  try {
    // DeepSeek-V2-Lite's 16 heads (memory-bound: 30 FLOP a byte) and DeepSeek-V2's 128
    // (compute-bound: 242 FLOP a byte).
    std::vector<Config> configs;
    for (int batch : {1, 8, 64, 128}) {
      for (int context : {4096, 32768}) configs.push_back({16, batch, context, 16});
    }
    configs.push_back({16, 64, 4096, 64});
    for (int batch : {64, 128}) {
      for (int context : {4096, 32768}) configs.push_back({128, batch, context, 16});
    }
    if (only_heads > 0) {
      std::erase_if(configs, [&](const Config& c) {
        return c.heads != only_heads || c.batch != only_batch || c.context != only_context;
      });
    }

    std::mt19937 rng(42);
    const double copy_tbs = freezeframe::bench::copy_bandwidth_tbs();
    std::printf("device: %s; device-to-device copy %.2f TB/s (read + write); block tables %s\n",
                ff::gpu_status().c_str(), copy_tbs,
                max_model_len > 0 ? ("of " + std::to_string(max_model_len) + " positions").c_str()
                                  : "as wide as each row's context");
    std::printf("%6s %6s %8s %5s %6s %8s %10s %8s %9s %8s %9s\n", "heads", "batch", "context",
                "block", "splits", "min_us", "median_us", "max_us", "KV_TB/s", "of_copy",
                "TFLOP/s");
    std::FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
    for (const Config& c : configs) {
      const Result r = run(c, quick ? 5 : 11, rng, max_model_len);
      const double tbs = r.kv_bytes / (r.median_us * 1e-6) / 1e12;
      const double tflops = r.flops / (r.median_us * 1e-6) / 1e12;
      std::printf("%6d %6d %8d %5d %6d %8.1f %10.1f %8.1f %9.2f %7.0f%% %9.1f\n", c.heads, c.batch,
                  c.context, c.block_size, r.splits, r.min_us, r.median_us, r.max_us, tbs,
                  100.0 * tbs / copy_tbs, tflops);
      std::fflush(stdout);
      if (json != nullptr) {
        std::fprintf(json,
                     "{\"kernel\": \"mla_decode\", \"heads\": %d, \"batch\": %d, \"context\": %d, "
                     "\"block_size\": %d, \"splits\": %d, \"median_us\": %.2f, \"min_us\": %.2f, "
                     "\"max_us\": %.2f, \"kv_bytes\": %.0f, \"kv_tbs\": %.4f, \"copy_tbs\": %.4f, "
                     "\"tflops\": %.2f, \"l2_rotation\": %d, \"block_table_positions\": %d, "
                     "\"timing\": \"graph\"}\n",
                     c.heads, c.batch, c.context, c.block_size, r.splits, r.median_us, r.min_us,
                     r.max_us, r.kv_bytes, tbs, copy_tbs, tflops, r.copies, max_model_len);
      }
    }
    if (json != nullptr) std::fclose(json);
  } catch (const ff::Error& e) {
    std::fprintf(stderr, "mla_decode_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
