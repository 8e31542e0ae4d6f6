#pragma once
// The routed experts of a mixture-of-experts layer (DeepSeek-V2), as kernels whose launches
// follow the step's padded row count, never the routing, so a step captures: the router's
// top-k, the (token, slot) rows sorted by expert, one grouped GEMM over every expert's rows
// (gate_up, then down), and the weighted sum back into the residual stream. Every function
// checks its arguments and throws kInvalidArgument before enqueuing anything.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "freezeframe/core/tensor.h"

namespace freezeframe::model_kernels {

/// How the router picks a token's experts from the softmax of its logits: the top
/// `experts_per_token`, among the `top_groups` of `num_groups` equal groups whose best expert
/// scores highest (1 and 1: among all), each weight times `scaling`.
struct MoeRouting {
  int experts_per_token = 1;
  int num_groups = 1;
  int top_groups = 1;
  float scaling = 1.0f;
};

/// For r < rows: topk_ids[r, j] and topk_weights[r, j] (j < k), the experts of the top k
/// softmax scores of logits[r, :] (f32 [≥ rows, E], E ≤ 256) under `routing`, highest first
/// (the lower id first among equal scores), and their scores times routing.scaling.
/// topk_ids i32 and topk_weights f32 [≥ rows, k], contiguous rows.
void moe_route(const TensorView& logits, const MoeRouting& routing, const TensorView& topk_ids,
               const TensorView& topk_weights, int rows, cudaStream_t stream);

/// The rows·k (token, slot) rows r = token·k + slot ordered by expert: sorted_rows[p] is the
/// row at position p and sorted_ids[p] its expert, ascending (the order of rows within an
/// expert is unspecified; each row's results do not depend on it). topk_ids i32 [≥ rows, k];
/// sorted_ids and sorted_rows i32 with at least rows·k elements; every id in [0, E).
void moe_sort(const TensorView& topk_ids, int num_experts, const TensorView& sorted_ids,
              const TensorView& sorted_rows, int rows, cudaStream_t stream);

/// The grouped GEMM over moe_sort's order, for p < `count` positions:
/// out[sorted_rows[p], :] = in[sorted_rows[p] / in_divisor, :] · W_eᵀ with e = sorted_ids[p]
/// and W_e = weights[e], [n, k] row-major (16-byte aligned rows). in [≥ rows, k] and out
/// [≥ count, n] of one 16-bit dtype with unit column stride; k a multiple of 8, n even; f32
/// accumulation. in_divisor is experts_per_token to read each token's row for its k slots
/// (gate_up), or 1 to read the rows themselves (down).
void moe_grouped_gemm(const TensorView& in, int in_divisor, const TensorView& sorted_ids,
                      const TensorView& sorted_rows, int count,
                      std::span<const void* const> weights, std::int64_t n, std::int64_t k,
                      const TensorView& out, cudaStream_t stream);

/// hidden[t, :] (+)= Σ_j topk_weights[t, j] · expert_out[t·k + j, :] for t < rows, summed in
/// f32 and rounded once: added to hidden when `accumulate`, else written (a tensor-parallel
/// rank other than 0, whose partial sums the all-reduce adds). hidden [≥ rows, h] of the
/// model's dtype or f32; expert_out [≥ rows·k, h] of the model's dtype; topk_weights f32
/// [≥ rows, k].
void moe_combine(const TensorView& expert_out, const TensorView& topk_weights, int k,
                 const TensorView& hidden, bool accumulate, int rows, cudaStream_t stream);

}  // namespace freezeframe::model_kernels
