#pragma once
// The Hopper kernel of one head size for a dtype; included by prefill_sm90_d<D>.cu.

#include "freezeframe/base/error.h"
#include "prefill/sm90/prefill_sm90_kernel.cuh"
#include "prefill/sm90/prefill_sm90_kernels.h"

namespace freezeframe::prefill {

template <typename T, int D>
Sm90Kernel prefill_sm90_kernel_of(bool overlap) {
  if constexpr (Sm90Config<D>::kOverlapPays) {
    if (overlap) return &prefill_sm90_kernel<T, D, true>;
  }
  return &prefill_sm90_kernel<T, D, false>;
}

template <int D>
Sm90Kernel prefill_sm90_kernel_for_head_size(DType dtype, bool overlap) {
  if (dtype == DType::kBF16) return prefill_sm90_kernel_of<__nv_bfloat16, D>(overlap);
  if (dtype == DType::kF16) return prefill_sm90_kernel_of<__half, D>(overlap);
  FF_THROW(ErrorCode::kUnsupported, "prefill (sm_90a): no kernel for ", name_of(dtype));
}

template <int D>
int prefill_sm90_shared_bytes(bool overlap) {
  if constexpr (Sm90Config<D>::kOverlapPays) {
    if (overlap) return Sm90Config<D, true>::kSmemBytes;
  }
  return Sm90Config<D, false>::kSmemBytes;
}

}  // namespace freezeframe::prefill
