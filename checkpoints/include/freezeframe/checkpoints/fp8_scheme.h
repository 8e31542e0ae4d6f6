#pragma once
// Fp8Scheme: how a checkpoint's linear weights are stored in fp8 (e4m3), as its config.json's
// quantization_config states it. Two writers are read: compressed-tensors' "float-quantized"
// format (llm-compressor; Llama-3.1-8B-Instruct-FP8 as published) and the "fp8" method
// (AutoFP8, and transformers' fine-grained fp8 with 128 × 128 weight blocks, as DeepSeek and
// Qwen publish). Which weights are fp8 is what the file says: a weight stored F8_E4M3 is
// quantised and has a scale beside it (value = stored × scale), any other is not.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace freezeframe {

struct Fp8Scheme {
  /// How many values of a weight share one scale.
  enum class WeightScales {
    kTensor,   ///< one scale for the tensor
    kChannel,  ///< one per output row
    kBlock,    ///< one per block of block_rows × block_cols
  };
  /// How the activations entering a quantised linear layer are quantised.
  enum class Activations {
    kNone,             ///< weight-only fp8: activations stay in the model's dtype
    kDynamicPerToken,  ///< a scale per token, computed at run time
    /// A scale per token and run of block_cols columns, computed at run time (the fine-grained
    /// fp8 of 128 × 128 weight blocks)
    kDynamicPerTokenGroup,
    kDynamicPerTensor,  ///< one scale per step, computed at run time
    kStaticPerTensor,   ///< the checkpoint's input_scale beside each weight
  };

  std::string method;  ///< "compressed-tensors" or "fp8", as quant_method writes it
  WeightScales weight_scales = WeightScales::kTensor;
  std::int64_t block_rows = 0;  ///< kBlock only
  std::int64_t block_cols = 0;
  Activations activations = Activations::kNone;
  /// The suffix that names a weight's scale in place of "weight": "weight_scale", or
  /// "weight_scale_inv" for fine-grained fp8 (a multiplier too, despite the name).
  std::string scale_suffix = "weight_scale";
  /// The KV cache's per-layer scales are stored (self_attn.k_scale and v_scale).
  bool kv_cache_scales = false;
  /// Modules left unquantised as the config names them ("lm_head", "re:.*gate$"); for
  /// messages: the tensors' types decide.
  std::vector<std::string> ignore;
  /// Where the config states it: "config.json:40:3: quantization_config".
  std::string origin;
};

[[nodiscard]] std::string_view to_string(Fp8Scheme::WeightScales scales);
[[nodiscard]] std::string_view to_string(Fp8Scheme::Activations activations);
/// "fp8 e4m3 weights, a scale per output channel, activations quantised per token at run
/// time (compressed-tensors)".
[[nodiscard]] std::string describe(const Fp8Scheme& scheme);

}  // namespace freezeframe
