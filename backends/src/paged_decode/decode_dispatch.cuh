#pragma once
// The kernel of one head size for a dtype pair and heads per CTA; included by decode_d<D>.cu.

#include "freezeframe/base/error.h"
#include "paged_decode/decode_kernel.cuh"
#include "paged_decode/decode_launch.h"

namespace freezeframe::paged_decode {

template <typename T, typename KV, int D>
DecodeKernel kernel_for_heads(int heads_per_cta) {
  switch (heads_per_cta) {
    case 1: return &paged_decode_kernel<T, KV, D, 1>;
    case 2: return &paged_decode_kernel<T, KV, D, 2>;
    case 4: return &paged_decode_kernel<T, KV, D, 4>;
    case 8: return &paged_decode_kernel<T, KV, D, 8>;
  }
  FF_THROW(ErrorCode::kUnsupported, "paged_decode: no kernel for ", heads_per_cta,
           " query heads per CTA");
}

template <int D>
DecodeKernel decode_kernel_for_head_size(DType dtype, DType kv, int heads_per_cta) {
  using bf16 = __nv_bfloat16;
  using fp8 = __nv_fp8_e4m3;
  if (dtype == DType::kBF16 && kv == DType::kBF16)
    return kernel_for_heads<bf16, bf16, D>(heads_per_cta);
  if (dtype == DType::kBF16 && kv == DType::kFp8E4M3)
    return kernel_for_heads<bf16, fp8, D>(heads_per_cta);
  if (dtype == DType::kF16 && kv == DType::kF16)
    return kernel_for_heads<__half, __half, D>(heads_per_cta);
  if (dtype == DType::kF16 && kv == DType::kFp8E4M3)
    return kernel_for_heads<__half, fp8, D>(heads_per_cta);
  FF_THROW(ErrorCode::kUnsupported, "paged_decode: no kernel for ", name_of(dtype),
           " queries over a ", name_of(kv), " cache");
}

}  // namespace freezeframe::paged_decode
