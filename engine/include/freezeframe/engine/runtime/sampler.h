#pragma once
// Sampling: how a request's next token is drawn from its logits (docs/DESIGN.md, "Sampling"),
// the parameters a step carries per request, and the host reference of the on-device sampler.
//
// Over the row's logits l (NaN taken as −∞):
//   temperature 0: the largest logit; ties go to the lowest id (greedy).
//   otherwise x = l / temperature, tokens ranked by x, ties by the lower id, and
//   1. top_k > 0 keeps the top_k best (top_k = 1 is greedy on x);
//   2. each kept token weighs 2^32 · e^(x − max x), truncated to an integer (so tokens more
//      than about 22 nats below the best weigh nothing);
//   3. top_p < 1 keeps the fewest best whose weight reaches ⌈top_p · total⌉;
//   4. a point u in [0, total kept weight) from Philox4x32-10 keyed by (seed, position) picks
//      the kept token whose span of the running sum over kept tokens, by id, holds u.
// position is where the drawn token will sit in the sequence (the step's seq_len), so a replay,
// or a preempted request recomputed, draws the same token. Every step is integer or exactly
// rounded arithmetic, so the GPU kernel and this reference agree token for token.

#include <cstdint>
#include <span>
#include <string_view>

namespace freezeframe {

struct SamplingParams {
  float temperature = 0.0f;  ///< ≥ 0, finite; 0 = greedy
  std::int32_t top_k = 0;    ///< ≥ 0; 0 = every token
  float top_p = 1.0f;        ///< in (0, 1]; 1 = every kept token
  std::uint64_t seed = 0;    ///< with the position, keys the draw

  bool operator==(const SamplingParams&) const = default;
};

/// The draw the tools make where the user names none (freezeframe generate, bench --sample,
/// serve-sim --sample): temperature 0.8, top-k 40, top-p 0.95, as llama.cpp's server draws;
/// each request gets its own seed.
inline constexpr SamplingParams kDefaultSampling{0.8f, 40, 0.95f, 0};

/// Throws kInvalidArgument naming `where` and the field ("request 2: sampling.top_p: 1.5 is
/// not in (0, 1]") for a negative or non-finite temperature, a negative top_k or a top_p
/// outside (0, 1].
void check_sampling(const SamplingParams& params, std::string_view where);

/// The token the sampler draws from `logits` (one row, f32) for the token at sequence
/// position `position`. Host code; throws kInvalidArgument for an empty row or bad params.
[[nodiscard]] std::int32_t sample_reference(std::span<const float> logits,
                                            const SamplingParams& params, std::int64_t position);

}  // namespace freezeframe
