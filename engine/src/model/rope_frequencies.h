#pragma once
// The rotary embedding's inverse frequencies, computed once on the host (the rope kernel takes
// them in its parameters): theta^(−2i / rotary_dim) for each pair i, with Llama 3's scaling
// (config.json's rope_scaling, as transformers applies it) or divided by per-pair factors
// (GGUF's rope_freqs.weight, as llama.cpp applies it). Each value is evaluated in double and
// rounded to f32 once, so it is the same on every host and device.

#include <optional>
#include <span>
#include <vector>

#include "freezeframe/backends/attention_params.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe {

/// One inverse frequency per rotary pair, rotary_dim / 2 of them. With `scaling`, a pair whose
/// wavelength 2π / f exceeds original_max_position_embeddings / low_freq_factor gets f / factor,
/// one whose wavelength is below original / high_freq_factor keeps f, and the band between
/// gets (1 − s)·f / factor + s·f, s = (original / wavelength − low_freq_factor) /
/// (high_freq_factor − low_freq_factor). Non-empty `factors` (one per pair, finite and > 0)
/// divide each f. Throws kInvalidArgument for a rotary_dim that is not even and positive, a
/// theta that is not finite and positive, or factors of another count or value.
[[nodiscard]] std::vector<float> rope_inv_frequencies(
    double theta, int rotary_dim, const std::optional<Llama3RopeScaling>& scaling,
    std::span<const float> factors);

/// YaRN's rotation (checkpoint_config.h) as transformers computes it for DeepSeek-V2.
struct YarnRope {
  std::vector<float> inv_freq;        ///< one per rotary pair
  float attention_factor = 1.0f;      ///< what cos and sin are multiplied by
  float softmax_scale_factor = 1.0f;  ///< what the softmax scale is multiplied by
};

/// YaRN over rotary_dim dimensions of base `theta`: for pair i, f = theta^(−2i / rotary_dim)
/// blended from f / factor (ramp 1) to f (ramp 0), the ramp linear in i between the
/// dimensions where the wavelength turns beta_fast and beta_slow times in the original
/// context (floored and ceiled, as transformers truncates them); the attention factor
/// mscale(factor, mscale) / mscale(factor, mscale_all_dim) where both are given, else
/// mscale(factor, 1). Throws kInvalidArgument as rope_inv_frequencies does, and for a
/// factor below 1 or an original context of less than 1 position.
[[nodiscard]] YarnRope yarn_rope(double theta, int rotary_dim, const YarnRopeScaling& scaling);

/// An MLA impl's parameters with the rotation the model's checkpoint scales (DeepSeek-V2's
/// YaRN: its frequencies, the rotation's scale, the softmax scale times its factor); `params`
/// unchanged when it scales none.
void scale_mla_rope(MlaParams& params, const ModelSpec& model);

/// The model's frequencies: its rope_theta over whole heads, with the scaling or the factors
/// its checkpoint states.
[[nodiscard]] std::vector<float> rope_inv_frequencies(const ModelSpec& model);

}  // namespace freezeframe
