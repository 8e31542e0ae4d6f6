#pragma once
// The Hopper kernel of one head size for a dtype; included by prefill_sm90_d<D>.cu.

#include "freezeframe/core/error.h"
#include "prefill/sm90/prefill_sm90_kernel.cuh"
#include "prefill/sm90/prefill_sm90_kernels.h"

namespace freezeframe::prefill {

template <int D>
Sm90Kernel prefill_sm90_kernel_for_head_size(DType dtype) {
  if (dtype == DType::kBF16) return &prefill_sm90_kernel<__nv_bfloat16, D>;
  if (dtype == DType::kF16) return &prefill_sm90_kernel<__half, D>;
  FF_THROW(ErrorCode::kUnsupported, "prefill (sm_90a): no kernel for ", name_of(dtype));
}

template <int D>
int prefill_sm90_shared_bytes() {
  return Sm90Config<D>::kSmemBytes;
}

}  // namespace freezeframe::prefill
