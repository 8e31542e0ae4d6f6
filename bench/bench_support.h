#pragma once
// What the benchmark binaries share: the median of event timings, random device inputs and the
// device-to-device copy bandwidth they compare memory-bound kernels with.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "freezeframe/base/dtype.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/element_value.h"

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

/// Event timings (ms) of `iterations` runs of `run(i)`, i = 0, 1, ..., enqueued back to back
/// on `stream` between CUDA events, with one synchronisation at the end.
template <typename Run>
std::vector<float> event_timings(cudaStream_t stream, int iterations, Run&& run) {
  std::vector<Event> starts, stops;
  for (int i = 0; i < iterations; ++i) {
    starts.emplace_back(true);
    stops.emplace_back(true);
  }
  for (int i = 0; i < iterations; ++i) {
    starts[i].record(stream);
    run(i);
    stops[i].record(stream);
  }
  FF_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> ms;
  for (int i = 0; i < iterations; ++i) ms.push_back(stops[i].elapsed_ms_since(starts[i]));
  return ms;
}

/// min, median and max of a set of timings.
struct Spread {
  double min = 0.0, median = 0.0, max = 0.0;
};
inline Spread spread(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

/// Per-call times (ms) of `run(i)`, i = 0 .. calls − 1, as the engine runs kernels: captured into
/// one CUDA graph, which is replayed `repeats` times back to back between CUDA events after two
/// untimed replays; each figure is one replay's time over its calls. The PyTorch anchors time
/// their side the same way (bench/anchors/timing.py, graph_times), so neither pays a launch per
/// call that the other does not. `run` cycles through copies of its inputs where they must
/// exceed the L2 cache.
template <typename Run>
std::vector<float> graph_timings(cudaStream_t stream, int calls, int repeats, Run&& run) {
  cudaGraph_t graph = nullptr;
  FF_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) run(i);
  FF_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  FF_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int w = 0; w < 2; ++w) FF_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  std::vector<Event> starts, stops;
  for (int r = 0; r < repeats; ++r) {
    starts.emplace_back(true);
    stops.emplace_back(true);
  }
  for (int r = 0; r < repeats; ++r) {
    starts[r].record(stream);
    FF_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    stops[r].record(stream);
  }
  FF_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> ms;
  for (int r = 0; r < repeats; ++r) {
    ms.push_back(stops[r].elapsed_ms_since(starts[r]) / static_cast<float>(calls));
  }
  FF_CUDA_CHECK(cudaGraphExecDestroy(exec));
  FF_CUDA_CHECK(cudaGraphDestroy(graph));
  return ms;
}

/// Device-to-device copy bandwidth (4 GiB, median of 10 after 3 warm-ups), counting bytes read
/// plus bytes written.
inline double copy_bandwidth_tbs() {
  constexpr std::size_t kBytes = 4ull << 30;
  DeviceBuffer a(kBytes), b(kBytes);
  Stream stream = Stream::create();
  FF_CUDA_CHECK(cudaMemsetAsync(a.data(), 1, kBytes, stream.get()));
  std::vector<float> ms;
  for (int i = 0; i < 13; ++i) {
    Event start(true), stop(true);
    start.record(stream.get());
    FF_CUDA_CHECK(
        cudaMemcpyAsync(b.data(), a.data(), kBytes, cudaMemcpyDeviceToDevice, stream.get()));
    stop.record(stream.get());
    stop.synchronize();
    if (i >= 3) ms.push_back(stop.elapsed_ms_since(start));
  }
  return 2.0 * kBytes / (median(ms) * 1e-3) / 1e12;
}

}  // namespace freezeframe::bench
