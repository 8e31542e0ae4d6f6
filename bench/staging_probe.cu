// staging_probe: the host cost of writing a step's block table (256 requests × 64 block ids,
// 64 KiB) into a staging buffer, as Engine::step does, in pageable and in pinned memory, with
// and without a device copy out of that buffer just before (the previous step's upload); then
// what a decode step between two such copies costs when each row is compared with the image
// and only changed rows are written (a sixteenth of the rows change per step, as when
// requests of block size 16 grow by one token), and the cost of range-checking the ids.
// Median of 200 runs, each after cudaStreamSynchronize.
//
// usage: staging_probe

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

int main() {
  constexpr int kRows = 256, kIds = 64;
  std::mt19937 rng(1);
  std::vector<std::vector<std::int32_t>> rows(kRows, std::vector<std::int32_t>(kIds));
  for (auto& row : rows)
    for (auto& id : row) id = static_cast<std::int32_t>(rng() % 27727);
  constexpr std::size_t kBytes = std::size_t(1) << 20;
  char* pinned = nullptr;
  char* device = nullptr;
  cudaStream_t stream;
  if (cudaMallocHost(&pinned, kBytes) != cudaSuccess ||
      cudaMalloc(&device, kBytes) != cudaSuccess || cudaStreamCreate(&stream) != cudaSuccess) {
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
      for (int r = 0; r < kRows; ++r)
        std::memcpy(table + r * kIds, rows[r].data(), kIds * sizeof(std::int32_t));
      if (via_pageable) std::memcpy(image, pageable.data(), kRows * kIds * sizeof(std::int32_t));
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  std::printf("%-56s %8s\n", "256 rows of 64 block ids written into", "us");
  std::printf("%-56s %8.2f\n", "pageable memory", median_us(pageable.data(), false, false));
  std::printf("%-56s %8.2f\n", "pinned memory, not read by the device",
              median_us(pinned, false, false));
  std::printf("%-56s %8.2f\n", "pinned memory, just copied to the device",
              median_us(pinned, true, false));
  std::printf("%-56s %8.2f\n", "pageable, then one memcpy into pinned just copied out",
              median_us(pinned, true, true));

  // Decode steps: before each, a sixteenth of the rows get a new id; the image holds the
  // previous step's rows.
  auto decode_steps_us = [&](bool compare) {
    std::vector<double> us;
    auto* table = reinterpret_cast<std::int32_t*>(pinned);
    for (int r = 0; r < kRows; ++r)
      std::memcpy(table + r * kIds, rows[r].data(), kIds * sizeof(std::int32_t));
    for (int run = 0; run < 200; ++run) {
      for (int r = run % 16; r < kRows; r += 16)
        rows[r][run % kIds] = static_cast<std::int32_t>(rng() % 27727);
      cudaMemcpyAsync(device, pinned, kBytes, cudaMemcpyHostToDevice, stream);
      cudaStreamSynchronize(stream);
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < kRows; ++r) {
        std::int32_t* dst = table + r * kIds;
        if (!compare || std::memcmp(dst, rows[r].data(), kIds * sizeof(std::int32_t)) != 0) {
          std::memcpy(dst, rows[r].data(), kIds * sizeof(std::int32_t));
        }
      }
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
      for (int r = 0; r < kRows; ++r) {
        if (std::memcmp(table + r * kIds, rows[r].data(), kIds * sizeof(std::int32_t)) != 0) {
          std::fprintf(stderr, "row %d of the image differs from its ids\n", r);
          std::exit(1);
        }
      }
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  std::printf("%-56s %8.2f\n", "decode step: every row written (just copied out)",
              decode_steps_us(false));
  std::printf("%-56s %8.2f\n", "decode step: rows compared, changed ones written",
              decode_steps_us(true));

  // The range check of every id against the pool size, two ways.
  auto range_check_us = [&](bool unsigned_compare) {
    std::vector<double> us;
    int bad = 0;
    const std::int32_t num_blocks = 27727;
    for (int run = 0; run < 200; ++run) {
      const auto start = std::chrono::steady_clock::now();
      int outside = 0;
      for (int r = 0; r < kRows; ++r) {
        const std::int32_t* ids = rows[r].data();
        if (unsigned_compare) {
          for (int b = 0; b < kIds; ++b)
            outside |= static_cast<std::uint32_t>(ids[b]) >= std::uint32_t(num_blocks);
        } else {
          for (int b = 0; b < kIds; ++b) outside |= (ids[b] < 0) | (ids[b] >= num_blocks);
        }
      }
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
      bad += outside;
    }
    if (bad != 0) std::fprintf(stderr, "ids out of range\n");
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  std::printf("%-56s %8.2f\n", "range check of the ids: id < 0 | id >= n", range_check_us(false));
  std::printf("%-56s %8.2f\n", "range check of the ids: unsigned(id) >= n", range_check_us(true));
  return 0;
}
