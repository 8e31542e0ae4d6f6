#pragma once
// The MLA projections on tensor cores (backend "mla"): the batched GEMM of
// reference::Projection on mma.sync, its x rounded to the weight's 16-bit type as a tile is
// loaded (f32 accumulation), and the query absorption as such a GEMM with W_UK read transposed.

#include <cuda_runtime_api.h>

#include "freezeframe/backends/attention_params.h"
#include "freezeframe/core/tensor.h"
#include "reference/mla_launch.h"

namespace freezeframe::mla_decode {

/// out[b, t, n] = Σ_k x[b, t, k] · w[b, n, k], as reference::launch_projection computes it
/// (the same dtype combinations), with w's k stride `w_stride_k` (1: rows of k).
void launch_tensor_core_projection(const reference::Projection& p, cudaStream_t stream,
                                   std::int64_t w_stride_k = 1);

/// Decode rows [0, rows): q_abs[t, h] = [W_UK[h]ᵀ · q_nope[t, h], q_pe[t, h]] (f32), as
/// reference::launch_mla_absorb_query computes it.
void launch_tensor_core_absorb_query(const MlaParams& params, const TensorView& q,
                                     const TensorView& kv_b_proj, const TensorView& q_abs, int rows,
                                     cudaStream_t stream);

}  // namespace freezeframe::mla_decode
