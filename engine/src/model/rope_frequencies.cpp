#include "model/rope_frequencies.h"

#include <cmath>
#include <numbers>

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

std::vector<float> rope_inv_frequencies(const ModelSpec& model) {
  const CheckpointConfig* checkpoint = model.checkpoint ? &*model.checkpoint : nullptr;
  return rope_inv_frequencies(static_cast<double>(model.rope_theta), model.head_size,
                              checkpoint != nullptr ? checkpoint->rope_scaling : std::nullopt,
                              checkpoint != nullptr
                                  ? std::span<const float>(checkpoint->rope_freq_factors)
                                  : std::span<const float>());
}

}  // namespace freezeframe
