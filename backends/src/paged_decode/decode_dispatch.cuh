#pragma once
// Dispatch of one head size over dtypes and heads per CTA; included by decode_d<D>.cu.

#include "freezeframe/core/error.h"
#include "paged_decode/decode_kernel.cuh"
#include "paged_decode/decode_launch.h"

namespace freezeframe::paged_decode {

template <typename T, typename KV, int D, int HeadsPerCta>
void run(const DecodeParams& p, cudaStream_t stream) {
  const dim3 grid(p.num_splits, p.num_heads / HeadsPerCta, p.num_rows);
  paged_decode_kernel<T, KV, D, HeadsPerCta><<<grid, kThreads, 0, stream>>>(p);
  FF_CHECK_LAUNCH();
}

template <typename T, typename KV, int D>
void run_heads(const DecodeParams& p, int heads_per_cta, cudaStream_t stream) {
  switch (heads_per_cta) {
    case 1: return run<T, KV, D, 1>(p, stream);
    case 2: return run<T, KV, D, 2>(p, stream);
    case 4: return run<T, KV, D, 4>(p, stream);
    case 8: return run<T, KV, D, 8>(p, stream);
  }
  FF_THROW(ErrorCode::kUnsupported, "paged_decode: no kernel for ", heads_per_cta,
           " query heads per CTA");
}

template <int D>
void launch_decode_for_head_size(const DecodeParams& p, DType dtype, DType kv, int heads_per_cta,
                                 cudaStream_t stream) {
  using bf16 = __nv_bfloat16;
  using fp8 = __nv_fp8_e4m3;
  if (dtype == DType::kBF16 && kv == DType::kBF16) return run_heads<bf16, bf16, D>(p, heads_per_cta, stream);
  if (dtype == DType::kBF16 && kv == DType::kFp8E4M3) return run_heads<bf16, fp8, D>(p, heads_per_cta, stream);
  if (dtype == DType::kF16 && kv == DType::kF16) return run_heads<__half, __half, D>(p, heads_per_cta, stream);
  if (dtype == DType::kF16 && kv == DType::kFp8E4M3) return run_heads<__half, fp8, D>(p, heads_per_cta, stream);
  FF_THROW(ErrorCode::kUnsupported, "paged_decode: no kernel for ", name_of(dtype),
           " queries over a ", name_of(kv), " cache");
}

}  // namespace freezeframe::paged_decode
