#include "model/rope_frequencies.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "freezeframe/base/error.h"

namespace freezeframe {

using E = ErrorCode;

std::vector<float> rope_inv_frequencies(double theta, int rotary_dim,
                                        const std::optional<Llama3RopeScaling>& scaling,
                                        std::span<const float> factors) {
  FF_CHECK(rotary_dim >= 2 && rotary_dim % 2 == 0, E::kInvalidArgument,
           "rope frequencies: rotary_dim must be even and ≥ 2, got ", rotary_dim);
  FF_CHECK(std::isfinite(theta) && theta > 0.0, E::kInvalidArgument,
           "rope frequencies: theta must be finite and > 0, got ", theta);
  const int half = rotary_dim / 2;
  FF_CHECK(factors.empty() || static_cast<int>(factors.size()) == half, E::kInvalidArgument,
           "rope frequencies: ", factors.size(), " frequency factors for ", half,
           " rotary pairs (rotary_dim ", rotary_dim, ")");
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    // The unscaled frequency exactly as the kernel's launcher has always computed it.
    double f = std::pow(theta, -2.0 * i / static_cast<double>(rotary_dim));
    if (scaling) {
      const double original = static_cast<double>(scaling->original_max_position_embeddings);
      const double wavelength = 2.0 * std::numbers::pi / f;
      if (wavelength > original / scaling->low_freq_factor) {
        f /= scaling->factor;
      } else if (!(wavelength < original / scaling->high_freq_factor)) {
        const double s = (original / wavelength - scaling->low_freq_factor) /
                         (scaling->high_freq_factor - scaling->low_freq_factor);
        f = (1.0 - s) * f / scaling->factor + s * f;
      }
    }
    if (!factors.empty()) {
      const float factor = factors[static_cast<std::size_t>(i)];
      FF_CHECK(std::isfinite(factor) && factor > 0.0f, E::kInvalidArgument,
               "rope frequencies: factor ", i, " must be finite and > 0, got ", factor);
      f /= static_cast<double>(factor);
    }
    inv_freq[static_cast<std::size_t>(i)] = static_cast<float>(f);
  }
  return inv_freq;
}

namespace {

/// YaRN's mscale(s, m) = 0.1·m·ln(s) + 1, 1 for s ≤ 1.
double yarn_mscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

}  // namespace

YarnRope yarn_rope(double theta, int rotary_dim, const YarnRopeScaling& scaling) {
  YarnRope out;
  out.inv_freq = rope_inv_frequencies(theta, rotary_dim, std::nullopt, {});
  FF_CHECK(std::isfinite(scaling.factor) && scaling.factor >= 1.0, E::kInvalidArgument,
           "rope frequencies: YaRN's factor must be finite and ≥ 1, got ", scaling.factor);
  FF_CHECK(scaling.original_max_position_embeddings >= 1, E::kInvalidArgument,
           "rope frequencies: YaRN's original_max_position_embeddings must be ≥ 1, got ",
           scaling.original_max_position_embeddings);
  const double dim = rotary_dim;
  const double original = static_cast<double>(scaling.original_max_position_embeddings);
  // The dimension at which the wavelength turns `rotations` times in the original context.
  const auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(theta));
  };
  const double low = std::max(std::floor(correction_dim(scaling.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(scaling.beta_slow)), dim - 1.0);
  if (low == high) high += 0.001;  // as transformers keeps the ramp from dividing by 0
  for (std::size_t i = 0; i < out.inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double f = std::pow(theta, -2.0 * static_cast<double>(i) / dim);
    out.inv_freq[i] = static_cast<float>(f / scaling.factor * ramp + f * (1.0 - ramp));
  }
  out.attention_factor =
      static_cast<float>(scaling.mscale > 0.0 && scaling.mscale_all_dim > 0.0
                             ? yarn_mscale(scaling.factor, scaling.mscale) /
                                   yarn_mscale(scaling.factor, scaling.mscale_all_dim)
                             : yarn_mscale(scaling.factor, 1.0));
  if (scaling.mscale_all_dim > 0.0) {
    const double m = yarn_mscale(scaling.factor, scaling.mscale_all_dim);
    out.softmax_scale_factor = static_cast<float>(m * m);
  }
  return out;
}

void scale_mla_rope(MlaParams& params, const ModelSpec& model) {
  if (!model.checkpoint || !model.checkpoint->yarn_rope_scaling) return;
  YarnRope yarn =
      yarn_rope(model.rope_theta, params.qk_rope_head_dim, *model.checkpoint->yarn_rope_scaling);
  params.rope_inv_freq = std::move(yarn.inv_freq);
  params.rope_scale = yarn.attention_factor;
  params.scale *= yarn.softmax_scale_factor;
}

std::vector<float> rope_inv_frequencies(const ModelSpec& model) {
  const CheckpointConfig* checkpoint = model.checkpoint ? &*model.checkpoint : nullptr;
  return rope_inv_frequencies(static_cast<double>(model.rope_theta), model.head_size,
                              checkpoint != nullptr ? checkpoint->rope_scaling : std::nullopt,
                              checkpoint != nullptr
                                  ? std::span<const float>(checkpoint->rope_freq_factors)
                                  : std::span<const float>());
}

}  // namespace freezeframe
