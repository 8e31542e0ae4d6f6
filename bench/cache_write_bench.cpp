// cache_write_bench: achieved bandwidth of the paged cache write (the backends' shared
// reshape_and_cache) for prefill chunks, next to a device-to-device copy measured in the same
// run.
//
// Each row writes the keys and values of `tokens` new tokens ([tokens, kv_heads, head] each,
// bf16) into a paged cache of 16-token blocks, the blocks of the chunk in shuffled order (as a
// long-running server's pool hands them out); the fp8 rows quantise on the way. Bytes = keys and
// values read + cache bytes written; median of 20 CUDA-event timings after 3 warm-ups.
//
// usage: cache_write_bench [--json FILE]

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_support.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/device.h"
#include "freezeframe/core/tensor.h"
#include "kernels/cache_write.h"

namespace ff = freezeframe;

namespace {

using freezeframe::bench::copy_bandwidth_tbs;
using freezeframe::bench::event_timings;
using freezeframe::bench::fill_random;
using freezeframe::bench::median;

struct Row {
  int tokens, kv_heads, head_size;
  ff::DType cache_dtype;
};

struct Result {
  double median_us;
  double bytes;
};

Result run(const Row& r, std::mt19937& rng) {
  constexpr int kBlock = 16;
  const std::int64_t blocks = (r.tokens + kBlock - 1) / kBlock;
  const std::int64_t row_elems = std::int64_t(r.kv_heads) * r.head_size;
  const std::size_t kv_bytes = std::size_t(r.tokens) * row_elems * 2;  // bf16
  const std::size_t cache_elem = ff::size_of(r.cache_dtype);
  const std::size_t half_bytes = std::size_t(blocks) * kBlock * row_elems * cache_elem;

  ff::DeviceBuffer key(kv_bytes), value(kv_bytes), cache(2 * half_bytes);
  fill_random(key.data(), kv_bytes, ff::DType::kBF16, rng);
  fill_random(value.data(), kv_bytes, ff::DType::kBF16, rng);

  // Slots: the chunk's blocks in shuffled order, tokens in order within a block.
  std::vector<std::int64_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::int64_t> slots(r.tokens);
  for (int t = 0; t < r.tokens; ++t) slots[t] = order[t / kBlock] * kBlock + t % kBlock;
  ff::DeviceBuffer slot_buffer(slots.size() * sizeof(std::int64_t));
  FF_CUDA_CHECK(
      cudaMemcpy(slot_buffer.data(), slots.data(), slot_buffer.bytes(), cudaMemcpyHostToDevice));

  const ff::Device gpu = ff::Device::cuda();
  const ff::TensorView k(key.data(), ff::DType::kBF16, {r.tokens, r.kv_heads, r.head_size}, gpu);
  const ff::TensorView v(value.data(), ff::DType::kBF16, {r.tokens, r.kv_heads, r.head_size}, gpu);
  auto* cache_bytes = static_cast<std::uint8_t*>(cache.data());
  const ff::TensorView k_cache(cache_bytes, r.cache_dtype,
                               {blocks, kBlock, r.kv_heads, r.head_size}, gpu);
  const ff::TensorView v_cache(cache_bytes + half_bytes, r.cache_dtype,
                               {blocks, kBlock, r.kv_heads, r.head_size}, gpu);

  ff::Stream stream = ff::Stream::create();
  auto write = [&] {
    ff::kernels::launch_reshape_and_cache(k, v, k_cache, v_cache,
                                          static_cast<const std::int64_t*>(slot_buffer.data()),
                                          r.tokens, 1.0f, 1.0f, stream.get());
  };
  for (int i = 0; i < 3; ++i) write();
  const std::vector<float> ms = event_timings(stream.get(), 20, [&](int) { write(); });
  const std::size_t written = 2 * std::size_t(r.tokens) * row_elems * cache_elem;
  return {median(ms) * 1e3, double(2 * kv_bytes + written)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: cache_write_bench [--json FILE]\n");
      return 2;
    }
  }
  if (!ff::has_gpu()) {
    std::fprintf(stderr, "cache_write_bench needs a GPU: %s\n", ff::gpu_status().c_str());
    return 1;
  }
  try {
    std::mt19937 rng(7);
    const double copy_tbs = copy_bandwidth_tbs();
    std::printf("device: %s; device-to-device copy %.2f TB/s (read + write)\n",
                ff::gpu_status().c_str(), copy_tbs);
    std::printf("%7s %5s %5s %-9s %10s %8s %8s\n", "tokens", "kv", "head", "cache", "median_us",
                "TB/s", "of_copy");
    std::FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
    std::vector<Row> rows;
    for (int tokens : {512, 4096, 16384, 65536}) rows.push_back({tokens, 8, 128, ff::DType::kBF16});
    for (int tokens : {4096, 65536}) rows.push_back({tokens, 8, 128, ff::DType::kFp8E4M3});
    rows.push_back({16384, 8, 64, ff::DType::kBF16});
    rows.push_back({16384, 8, 256, ff::DType::kBF16});
    for (const Row& r : rows) {
      const Result res = run(r, rng);
      const std::string cache(ff::name_of(r.cache_dtype));
      const double tbs = res.bytes / (res.median_us * 1e-6) / 1e12;
      std::printf("%7d %5d %5d %-9s %10.2f %8.2f %7.0f%%\n", r.tokens, r.kv_heads, r.head_size,
                  cache.c_str(), res.median_us, tbs, 100.0 * tbs / copy_tbs);
      if (json != nullptr) {
        std::fprintf(json,
                     "{\"tokens\": %d, \"kv_heads\": %d, \"head_size\": %d, \"cache\": \"%s\", "
                     "\"median_us\": %.3f, \"tbs\": %.4f, \"copy_tbs\": %.4f}\n",
                     r.tokens, r.kv_heads, r.head_size, cache.c_str(), res.median_us, tbs,
                     copy_tbs);
      }
    }
    if (json != nullptr) std::fclose(json);
  } catch (const ff::Error& e) {
    std::fprintf(stderr, "cache_write_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
