#pragma once
// Merging partial attention results by their log-sum-exp (DCP ranks, split-KV chunks).
//
// Note [LSE merge numerics]: for partial outputs O_r with natural-log LSEs L_r,
//   L = log Σ_r exp(L_r),   O = Σ_r exp(L_r − L) · O_r,
// computed with the maximum subtracted first. A shard that saw no key has L_r = −inf and
// weight 0; when every shard is empty the result is O = 0 and L = −inf, never NaN.

#include <cuda_runtime_api.h>

#include "freezeframe/core/tensor.h"

namespace freezeframe {

/// partial_out [R, T, H, D] (f32, f16 or bf16); partial_lse_ln [R, T, H] f32 natural log;
/// out [T, H, D] (f32, f16 or bf16) written in place; out_lse_ln [T, H] f32, optional.
/// Launch shape depends only on T and H. Throws on mismatched shapes before launching.
void merge_attention_states(const TensorView& partial_out, const TensorView& partial_lse_ln,
                            const TensorView& out, const TensorView& out_lse_ln,
                            cudaStream_t stream);

}  // namespace freezeframe
