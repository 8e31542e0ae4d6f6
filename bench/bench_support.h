#pragma once
// What the benchmark binaries share: the median of event timings and random device inputs.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "freezeframe/core/dtype.h"
#include "freezeframe/core/error.h"

namespace freezeframe::bench {

inline double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Normal random values of `dtype` into device memory (one host chunk, copied out repeatedly).
inline void fill_random(void* device, std::size_t bytes, DType dtype, std::mt19937& rng) {
  constexpr std::size_t kChunk = 64ull << 20;
  std::vector<std::uint8_t> host(std::min(bytes, kChunk));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t elem = size_of(dtype);
  for (std::size_t i = 0; i + elem <= host.size(); i += elem)
    store_from_float(&host[i], dtype, normal(rng));
  for (std::size_t at = 0; at < bytes; at += host.size()) {
    FF_CUDA_CHECK(cudaMemcpy(static_cast<std::uint8_t*>(device) + at, host.data(),
                             std::min(host.size(), bytes - at), cudaMemcpyHostToDevice));
  }
}

}  // namespace freezeframe::bench
