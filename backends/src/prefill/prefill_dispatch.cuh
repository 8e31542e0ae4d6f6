#pragma once
// The kernel of one head size for a dtype pair; included by prefill_d<D>.cu.

#include "freezeframe/base/error.h"
#include "prefill/prefill_kernel.cuh"
#include "prefill/prefill_launch.h"

namespace freezeframe::prefill {

template <int D>
PrefillKernel prefill_kernel_for_head_size(DType dtype, DType kv) {
  using bf16 = __nv_bfloat16;
  using fp8 = __nv_fp8_e4m3;
  if (dtype == DType::kBF16 && kv == DType::kBF16) return &prefill_kernel<bf16, bf16, D>;
  if (dtype == DType::kBF16 && kv == DType::kFp8E4M3) return &prefill_kernel<bf16, fp8, D>;
  if (dtype == DType::kF16 && kv == DType::kF16) return &prefill_kernel<__half, __half, D>;
  if (dtype == DType::kF16 && kv == DType::kFp8E4M3) return &prefill_kernel<__half, fp8, D>;
  FF_THROW(ErrorCode::kUnsupported, "prefill: no kernel for ", name_of(dtype), " queries over ",
           name_of(kv), " keys and values");
}

}  // namespace freezeframe::prefill
