#pragma once
// AttentionImpl and MlaImpl: one layer's attention computation (vLLM's AttentionImpl and
// MLAAttentionImpl). Forwards write into preallocated outputs, never allocate and never
// synchronise with the host, so they can run inside captured CUDA graphs.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "freezeframe/backends/attention_layer.h"
#include "freezeframe/backends/attention_metadata.h"
#include "freezeframe/backends/attention_params.h"
#include "freezeframe/core/tensor.h"

namespace freezeframe {

/// Fused output quantisation requested by the layer (fp8 output): both undefined = none.
struct OutputQuant {
  TensorView output_scale;
  TensorView output_block_scale;
};

/// What every impl shares: its DCP group and the LSE capability derived from it.
class DcpAware {
 public:
  explicit DcpAware(DcpGroup dcp) : dcp_(dcp) {}
  virtual ~DcpAware() = default;

  [[nodiscard]] int dcp_world_size() const { return dcp_.world_size; }
  [[nodiscard]] int dcp_rank() const { return dcp_.rank; }
  /// The group whole: world size, rank and interleave size.
  [[nodiscard]] const DcpGroup& dcp_group() const { return dcp_; }
  /// Whether forward can also write the log-sum-exp (natural log) of each (token, head).
  [[nodiscard]] virtual bool can_return_lse_for_decode() const = 0;
  /// True when the KV cache is sharded over a DCP group, so decode must return LSE for merging.
  [[nodiscard]] bool need_to_return_lse_for_decode() const {
    return dcp_.world_size > 1 && can_return_lse_for_decode();
  }

 private:
  DcpGroup dcp_;
};

class AttentionImpl : public DcpAware {
 public:
  AttentionImpl(AttentionParams params, DcpGroup dcp) : DcpAware(dcp), params_(std::move(params)) {}

  [[nodiscard]] const AttentionParams& params() const { return params_; }
  [[nodiscard]] virtual bool fused_output_quant_supported(const QuantKey& key) const = 0;
  /// Workspace bytes forward needs in layer.workspace for batches within `limits` (what its
  /// backend's workspace_bytes states for the current device).
  [[nodiscard]] virtual std::size_t workspace_bytes(const BatchLimits& limits) const = 0;

  /// query [T, num_heads, head_size]; key/value [T_kv, num_kv_heads, head_size] (undefined for
  /// cross-attention steps after the encoder's, and ignored by layers that share another
  /// layer's cache); kv_cache in the backend's shape; output [T, num_heads, head_size] or
  /// [T, num_heads·head_size], written in place. lse_ln, when defined, receives the
  /// natural-log log-sum-exp of the scaled scores, f32 [T, num_heads] (−inf where a query sees
  /// no key). Bad arguments throw before anything is enqueued.
  virtual void forward(const AttentionLayer& layer, const TensorView& query, const TensorView& key,
                       const TensorView& value, const TensorView& kv_cache,
                       const AttentionMetadata& metadata, const TensorView& output,
                       cudaStream_t stream, const TensorView& lse_ln = {},
                       const OutputQuant& quant = {}) = 0;

 private:
  AttentionParams params_;
};

/// Weights an MLA layer's attention owns (device tensors in the model dtype).
struct MlaWeights {
  /// [num_heads·(qk_nope + qk_rope), q_lora_rank]  (W_UQ)
  TensorView q_proj;
  /// [num_heads·(qk_nope + v_head_dim), kv_lora_rank]: per head W_UK then W_UV
  TensorView kv_b_proj;
};

class MlaImpl : public DcpAware {
 public:
  MlaImpl(MlaParams params, DcpGroup dcp) : DcpAware(dcp), params_(params) {}

  [[nodiscard]] const MlaParams& params() const { return params_; }
  [[nodiscard]] virtual std::size_t workspace_bytes(const BatchLimits& limits) const = 0;

  /// hidden_states_or_cq [T, q_lora_rank]; kv_c_normed [T, kv_lora_rank]; k_pe [T, qk_rope]
  /// (before rotary embedding: the impl rotates q_pe and k_pe at each token's position, from
  /// the metadata); kv_cache [num_blocks, block_size, kv_lora_rank + qk_rope]; output
  /// [T, num_heads·v_head_dim]. Decode tokens use the absorbed up-projections against the
  /// latent cache; prefill tokens expand the latent into per-head keys and values.
  virtual void forward(const AttentionLayer& layer, const TensorView& hidden_states_or_cq,
                       const TensorView& kv_c_normed, const TensorView& k_pe,
                       const TensorView& kv_cache, const AttentionMetadata& metadata,
                       const TensorView& output, cudaStream_t stream,
                       const TensorView& lse_ln = {}) = 0;

 private:
  MlaParams params_;
};

}  // namespace freezeframe
