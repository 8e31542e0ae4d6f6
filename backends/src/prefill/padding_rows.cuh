#pragma once
// The step's padding rows, which both prefill kernels write: output 0, LSE −inf.

#include <cstdint>

#include "freezeframe/core/convert.cuh"
#include "prefill/prefill_params.h"

namespace freezeframe::prefill {

/// The step's padding rows (the plan's [padding_begin, padding_end)): output 0, LSE −inf.
template <typename T, int D, int kThreads>
__device__ __forceinline__ void zero_padding_rows(const PrefillParams& p, const PlanHeader& header,
                                                  int tid) {
  const std::int64_t elems =
      std::int64_t(header.padding_end - header.padding_begin) * p.num_heads * D;
  for (std::int64_t i = blockIdx.x * std::int64_t(kThreads) + tid; i < elems;
       i += std::int64_t(gridDim.x) * kThreads) {
    const std::int64_t row = header.padding_begin + i / (std::int64_t(p.num_heads) * D);
    const int head = static_cast<int>(i / D % p.num_heads), d = static_cast<int>(i % D);
    static_cast<T*>(p.out)[row * p.out_stride_token + head * p.out_stride_head + d] =
        kernels::from_float<T>(0.0f);
    if (d == 0 && p.lse != nullptr) p.lse[row * p.lse_stride_token + head] = -INFINITY;
  }
}

}  // namespace freezeframe::prefill
