#pragma once
// CheckpointConfig: a model's architecture as its checkpoint states it, read from a Hugging
// Face config.json or from a GGUF file's metadata. It holds what ModelSpec holds (sizes, norms,
// RoPE base, tied embeddings, dtype, DeepSeek-V2's latent attention and experts) and what the
// model program will need that a spec cannot express yet (RoPE scaling, Qwen2's QKV bias,
// per-layer sliding windows, the experts' router). Only the architectures the built-in model
// program follows are read; any other is refused by name.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "freezeframe/base/dtype.h"
#include "freezeframe/checkpoints/fp8_scheme.h"

namespace freezeframe {

/// The model families the built-in program follows (RMSNorm, RoPE, gated-SiLU MLP; GQA, or
/// DeepSeek-V2's multi-head latent attention and mixture of experts).
enum class ModelFamily { kLlama, kMistral, kQwen2, kDeepseekV2 };
[[nodiscard]] std::string_view to_string(ModelFamily family);

enum class CheckpointFormat { kHuggingFace, kGguf };

/// Llama 3's RoPE frequency scaling (rope_scaling with rope_type "llama3"): wavelengths above
/// original_max_position_embeddings / low_freq_factor are divided by `factor`, those below
/// original / high_freq_factor kept, and the band between interpolated.
struct Llama3RopeScaling {
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 1.0;
  std::int64_t original_max_position_embeddings = 0;
};

/// YaRN's RoPE scaling (rope_scaling with type "yarn", DeepSeek-V2), as transformers applies
/// it (rope_frequencies.h computes it): frequencies that turn fewer than beta_slow times in
/// original_max_position_embeddings are divided by `factor`, those turning more than beta_fast
/// times kept, the band between blended; cos and sin are multiplied by an attention factor and
/// the softmax scale by mscale(factor, mscale_all_dim)² (mscale(s, m) = 0.1·m·ln(s) + 1).
struct YarnRopeScaling {
  double factor = 1.0;
  std::int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;  ///< 0: not given (as mscale_all_dim)
  double mscale_all_dim = 0.0;
};

/// Multi-head latent attention's sizes (DeepSeek-V2): what MlaSpec holds.
struct CheckpointMla {
  int kv_lora_rank = 0;
  int q_lora_rank = 0;  ///< 0: the query is not compressed (q_lora_rank null)
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
};

/// A mixture of experts (DeepSeek-V2): MoeSpec's sizes, which layers have one, and how the
/// router weighs the experts it picks: the softmax of its logits, the top experts_per_token of
/// them (greedy: among all; group_limited_greedy, DeepSeek-V2: among the top_groups of
/// num_groups equal groups whose best expert scores highest), each weight times
/// routed_scaling_factor.
struct CheckpointMoe {
  int num_experts = 0;         ///< n_routed_experts
  int experts_per_token = 0;   ///< num_experts_per_tok
  int intermediate_size = 0;   ///< moe_intermediate_size
  int num_shared_experts = 0;  ///< n_shared_experts (null: 0)
  int first_dense_layers = 0;  ///< first_k_dense_replace: the layers before it are dense
  double routed_scaling_factor = 1.0;
  int num_groups = 1;  ///< n_group (greedy: 1)
  int top_groups = 1;  ///< topk_group (greedy: 1)
  /// Whether layer `l` has the experts (every layer from first_dense_layers on).
  [[nodiscard]] bool is_moe_layer(int l) const { return l >= first_dense_layers; }
};

struct CheckpointConfig {
  std::string path;         ///< the checkpoint as named (a folder, config.json or a .gguf file)
  std::string config_file;  ///< the file the config was read from
  CheckpointFormat format = CheckpointFormat::kHuggingFace;
  std::string architecture;  ///< as written: "LlamaForCausalLM", "llama", ...
  ModelFamily family = ModelFamily::kLlama;
  std::string name;  ///< GGUF general.name, else the checkpoint's folder or file name

  int num_layers = 0;
  int hidden_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_size = 0;
  int intermediate_size = 0;
  int vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;
  bool tie_word_embeddings = false;
  std::optional<DType> dtype;  ///< torch_dtype; empty for GGUF (each tensor has its own type)
  /// How fp8 weights are scaled, when config.json's quantization_config says they are
  /// (the weights are then read dequantised: WeightSource).
  std::optional<Fp8Scheme> fp8;
  /// The tokens that end a generation: config.json's eos_token_id (one id or a list); GGUF's
  /// tokenizer.ggml.eos_token_id and eot_token_id (end of turn). Empty when it names none.
  std::vector<std::int32_t> eos_token_ids;

  /// One window per layer (0 = full attention); empty when every layer attends fully.
  /// Mistral's sliding_window covers every layer, Qwen2's the layers from max_window_layers.
  std::vector<int> sliding_windows;
  bool qkv_bias = false;  ///< q, k and v projections have a bias (Qwen2)
  std::optional<Llama3RopeScaling> rope_scaling;
  std::optional<YarnRopeScaling> yarn_rope_scaling;
  std::optional<CheckpointMla> mla;
  std::optional<CheckpointMoe> moe;
  /// GGUF: RoPE frequencies are divided by the per-pair factors of this tensor (how llama.cpp
  /// stores Llama 3's scaling); empty otherwise.
  std::string rope_freq_factors_tensor;
  /// Its values, one per rotary pair (head_size / 2), each finite and > 0.
  std::vector<float> rope_freq_factors;

  /// Where the checkpoint states each ModelSpec field ("num_layers" →
  /// "config.json:14:3: num_hidden_layers", "model.gguf: llama.block_count"); fields that took
  /// a default are absent.
  std::map<std::string, std::string, std::less<>> origins;
};

/// The largest config.json read (a real one is a few KiB).
inline constexpr std::int64_t kMaxCheckpointConfigBytes = std::int64_t(4) << 20;

/// Reads the config of the checkpoint at `path`: a GGUF file (known by its magic), a
/// config.json, or a folder holding config.json. Every problem found is appended to `problems`
/// as "file[:line:column]: field: what is wrong" and nullopt is returned when there is any (an
/// unreadable file is one problem).
[[nodiscard]] std::optional<CheckpointConfig> read_checkpoint_config(
    const std::string& path, std::vector<std::string>& problems);

/// The same, throwing: kNotFound when the file cannot be read, kInvalidArgument listing the
/// problems.
[[nodiscard]] CheckpointConfig read_checkpoint_config(const std::string& path);

}  // namespace freezeframe
