#pragma once
// Block-wide max and sum over float through CUB (every thread gets the result).

#include <cub/block/block_reduce.cuh>
#include <cuda/functional>
#include <cuda/std/functional>

namespace freezeframe::kernels {

template <int kThreads>
struct BlockAllReduce {
  using Reduce = cub::BlockReduce<float, kThreads>;
  struct Storage {
    typename Reduce::TempStorage temp;
    float result;
  };

  template <typename Op>
  static __device__ float all_reduce(Storage& storage, float value, Op op) {
    const float total = Reduce(storage.temp).Reduce(value, op);
    if (threadIdx.x == 0) storage.result = total;
    __syncthreads();
    const float result = storage.result;
    __syncthreads();  // storage may be reused right after
    return result;
  }
  static __device__ float max(Storage& s, float v) { return all_reduce(s, v, cuda::maximum<>{}); }
  static __device__ float sum(Storage& s, float v) { return all_reduce(s, v, cuda::std::plus<>{}); }
};

}  // namespace freezeframe::kernels
