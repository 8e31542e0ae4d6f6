// staging_probe: the host cost of writing a step's block table (256 requests × 64 block ids,
// 64 KiB) into a staging buffer, as Engine::step does, in pageable and in pinned memory, with
// and without a device copy out of that buffer just before (the previous step's upload).
// Median of 200 runs, each after cudaStreamSynchronize.
//
// usage: staging_probe

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

int main() {
  constexpr int kRows = 256, kIds = 64;
  std::mt19937 rng(1);
  std::vector<std::vector<std::int32_t>> rows(kRows, std::vector<std::int32_t>(kIds));
  for (auto& row : rows) for (auto& id : row) id = static_cast<std::int32_t>(rng() % 27727);
  constexpr std::size_t kBytes = std::size_t(1) << 20;
  char* pinned = nullptr;
  char* device = nullptr;
  cudaStream_t stream;
  if (cudaMallocHost(&pinned, kBytes) != cudaSuccess || cudaMalloc(&device, kBytes) != cudaSuccess ||
      cudaStreamCreate(&stream) != cudaSuccess) {
    std::fprintf(stderr, "staging_probe needs a GPU\n");
    return 1;
  }
  std::vector<char> pageable(kBytes);

  auto median_us = [&](char* image, bool copied_out, bool via_pageable) {
    std::vector<double> us;
    for (int run = 0; run < 200; ++run) {
      if (copied_out) cudaMemcpyAsync(device, image, kBytes, cudaMemcpyHostToDevice, stream);
      cudaStreamSynchronize(stream);
      const auto start = std::chrono::steady_clock::now();
      auto* table = reinterpret_cast<std::int32_t*>(via_pageable ? pageable.data() : image);
      for (int r = 0; r < kRows; ++r) std::memcpy(table + r * kIds, rows[r].data(), kIds * sizeof(std::int32_t));
      if (via_pageable) std::memcpy(image, pageable.data(), kRows * kIds * sizeof(std::int32_t));
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  std::printf("%-56s %8s\n", "256 rows of 64 block ids written into", "us");
  std::printf("%-56s %8.2f\n", "pageable memory", median_us(pageable.data(), false, false));
  std::printf("%-56s %8.2f\n", "pinned memory, not read by the device", median_us(pinned, false, false));
  std::printf("%-56s %8.2f\n", "pinned memory, just copied to the device", median_us(pinned, true, false));
  std::printf("%-56s %8.2f\n", "pageable, then one memcpy into pinned just copied out", median_us(pinned, true, true));
  return 0;
}
