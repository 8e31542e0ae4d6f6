#pragma once
// Construction parameters of attention implementations: the same fields as vLLM's
// AttentionImpl / MLAAttentionImpl constructors, plus the DCP group an impl belongs to.

#include <optional>
#include <string>
#include <vector>

#include "freezeframe/backends/attention_type.h"
#include "freezeframe/base/dtype.h"

namespace freezeframe {

struct AttentionParams {
  int num_heads = 0;
  int head_size = 0;
  float scale = 0.0f;  ///< softmax scale, usually 1/sqrt(head_size)
  int num_kv_heads = 0;
  std::vector<float> alibi_slopes;      ///< one per query head; empty = no ALiBi
  std::optional<int> sliding_window;    ///< attend to the last N positions (self included)
  DType kv_cache_dtype = DType::kBF16;  ///< "auto" is resolved by the caller to the model dtype
  float logits_soft_cap = 0.0f;         ///< cap·tanh(s/cap) on scaled scores; 0 = off
  AttentionType attn_type = AttentionType::kDecoder;
  std::string kv_sharing_target_layer_name;  ///< non-empty: reuse that layer's cache, write none
};

/// Multi-head latent attention (DeepSeek-V2/V3). The impl owns the query up-projection and the
/// key/value up-projection so it can absorb them for decode.
struct MlaParams {
  int num_heads = 0;
  int q_lora_rank = 0;       ///< width of hidden_states_or_cq (the compressed query)
  int kv_lora_rank = 0;      ///< R: width of the latent kv_c
  int qk_nope_head_dim = 0;  ///< per-head query/key dims without rotary embedding
  int qk_rope_head_dim = 0;  ///< per-head rotary dims (k_pe is shared by all heads)
  int v_head_dim = 0;
  float scale = 0.0f;  ///< softmax scale, usually 1/sqrt(qk_nope + qk_rope)
  float rope_theta = 10000.0f;
  /// Pair i of the rotary part turns by position · rope_inv_freq[i] (qk_rope_head_dim / 2
  /// values, each finite and > 0); empty: rope_theta^(−2i / qk_rope_head_dim). A scaled RoPE
  /// (DeepSeek-V2's YaRN) gives its own.
  std::vector<float> rope_inv_freq;
  /// What the rotated values are multiplied by (YaRN's attention factor; 1 without).
  float rope_scale = 1.0f;
  DType kv_cache_dtype = DType::kBF16;

  [[nodiscard]] int latent_size() const { return kv_lora_rank + qk_rope_head_dim; }
};

/// Decode context parallelism: this impl's rank within its DCP group, whose ranks hold each
/// sequence's keys `interleave_size` tokens a rank in turn (dcp_shard.h).
struct DcpGroup {
  int world_size = 1;
  int rank = 0;
  int interleave_size = 1;
};

/// Identifies an output quantisation the layer wants fused into attention.
enum class QuantScaleKind { kPerTensor, kPerToken, kPerBlock };
struct QuantKey {
  DType dtype = DType::kFp8E4M3;
  QuantScaleKind scale_kind = QuantScaleKind::kPerTensor;
  bool static_scale = true;
};

}  // namespace freezeframe
