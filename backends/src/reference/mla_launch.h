#pragma once
// Host-side launchers of the reference MLA kernels (see reference_mla_backend.cpp for the
// data flow). Every launch shape depends on the batch shape and the layer's dimensions only.

#include <cuda_runtime_api.h>

#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/backends/attention_params.h"
#include "freezeframe/core/tensor.h"

namespace freezeframe::reference {

/// out[b, t, n] = Σ_k x[b, t, k] · w[b, n, k] for b < batch, t < rows, n < n_out. Strides in
/// elements; the innermost (k) strides are 1. Accumulates in f32.
struct Projection {
  const void* x = nullptr;
  DType x_dtype = DType::kF32;
  std::int64_t x_stride_batch = 0, x_stride_row = 0;
  const void* w = nullptr;
  DType w_dtype = DType::kBF16;
  std::int64_t w_stride_batch = 0, w_stride_n = 0;
  void* out = nullptr;
  DType out_dtype = DType::kF32;
  std::int64_t out_stride_batch = 0, out_stride_row = 0;
  int batch = 1, rows = 0, n_out = 0, k = 0;
};
void launch_projection(const Projection& p, cudaStream_t stream);

/// Rotates q_pe (the last qk_rope dims of each head of q [T, H, nope + rope], f32, in place)
/// and k_pe at each token's position, and writes [kv_c, rotated k_pe] into the latent cache at
/// slot_mapping (−1 skips). Interleaved (GPT-J) pairs, frequency θ^(−2i/rope). A token's
/// position is its request's first new position plus its index among the new tokens: from
/// `first_positions` (device, a request each) when given, as under DCP, where seq_lens count a
/// shard; else seq_len − new tokens. An fp8 cache stores values divided by `cache_scale`
/// (a 16-bit one, the values as they are).
void launch_mla_rope_and_cache(const MlaParams& params, const TensorView& q,
                               const TensorView& kv_c_normed, const TensorView& k_pe,
                               const TensorView& kv_cache, const AttentionMetadata& md,
                               const std::int32_t* first_positions, float cache_scale,
                               cudaStream_t stream);

/// Decode rows [0, rows): q_abs[t, h] = [W_UK[h]ᵀ · q_nope[t, h], q_pe[t, h]] (f32).
void launch_mla_absorb_query(const MlaParams& params, const TensorView& q,
                             const TensorView& kv_b_proj, const TensorView& q_abs, int rows,
                             cudaStream_t stream);

/// Prefill: for every context position of requests [num_decodes, num_reqs), expands the
/// latent into k_exp[j, h] = [W_UK[h] · c_j, k_pe_j] and v_exp[j, h] = W_UV[h] · c_j (f32),
/// row j counted from the first prefill request's first position.
void launch_mla_expand_latent(const MlaParams& params, const TensorView& kv_cache,
                              const TensorView& kv_b_proj, const AttentionMetadata& md,
                              const TensorView& k_exp, const TensorView& v_exp,
                              cudaStream_t stream);

}  // namespace freezeframe::reference
