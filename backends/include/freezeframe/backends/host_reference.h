#pragma once
// Double-precision host references for every kernel of the reference backends: the cache
// write, attention (decoder, encoder, encoder-only, cross), MLA and the LSE merge. Tests and
// the demo compare the GPU against these; they favour obviousness over speed.
//
// All tensors here are views of host memory (Device::cpu()), with the same shapes and layouts
// as the GPU forward takes.

#include <cstdint>
#include <span>
#include <vector>

#include "freezeframe/backends/attention_impl.h"
#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/backends/attention_params.h"
#include "freezeframe/core/tensor.h"

namespace freezeframe::host_reference {

/// Attention outputs in double: out [T, num_heads, head_size_v], lse_ln [T, num_heads].
struct AttentionResult {
  int num_tokens = 0;
  int num_heads = 0;
  int head_size_v = 0;
  std::vector<double> out;
  std::vector<double> lse_ln;
};

/// Writes key/value [T_kv, H_kv, D] into kv_cache [2, num_blocks, block_size, H_kv, D] (any
/// strides) at slot_mapping; slot −1 is skipped. Stored value = x / scale in the cache dtype.
void reshape_and_cache(const TensorView& key, const TensorView& value, const TensorView& kv_cache,
                       std::span<const std::int64_t> slot_mapping, float k_scale, float v_scale);

/// Attention as the reference backend computes it. Decoder and encoder_decoder read the paged
/// kv_cache (dequantised with k_scale / v_scale); encoder and encoder_only read key/value.
/// Query rows past query_start_loc.back() are padding: zero output, LSE −inf.
[[nodiscard]] AttentionResult attention(const AttentionParams& params, const TensorView& query,
                                        const TensorView& key, const TensorView& value,
                                        const TensorView& kv_cache,
                                        const CommonAttentionMetadata& metadata, float k_scale,
                                        float v_scale);

/// The LSE merge (see lse_merge.h): partial_out [R, T, H, D], partial_lse_ln [R, T, H].
void merge_attention_states(std::span<const double> partial_out,
                            std::span<const double> partial_lse_ln, int num_parts, int num_tokens,
                            int num_heads, int head_size, std::vector<double>& out,
                            std::vector<double>& out_lse_ln);

/// MLA forward, all tokens by expanding the latent into per-head keys and values. Writes the
/// latent (kv_c, rotated k_pe) into kv_cache [num_blocks, block_size, R + rope] like the GPU;
/// an fp8 cache holds the values divided by kv_cache_scale (a 16-bit one ignores it).
[[nodiscard]] AttentionResult mla_forward(const MlaParams& params, const MlaWeights& weights,
                                          const TensorView& hidden_states_or_cq,
                                          const TensorView& kv_c_normed, const TensorView& k_pe,
                                          const TensorView& kv_cache,
                                          const CommonAttentionMetadata& metadata,
                                          float kv_cache_scale = 1.0f);

}  // namespace freezeframe::host_reference
