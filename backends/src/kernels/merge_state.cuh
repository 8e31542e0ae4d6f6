#pragma once
// Merging partial attention states by their log-sum-exp, for one (row, head) and one output
// element. See Note [LSE merge numerics] in lse_merge.h. Shared by the LSE merge kernel and the
// split-KV combine of the paged decode backend.

#include <cmath>

namespace freezeframe::kernels {

/// The largest of `parts` LSE values read through `lse(r)`; −inf when all are.
template <typename LseAt>
__device__ __forceinline__ float max_lse(int parts, LseAt lse) {
  float m = -INFINITY;
  for (int r = 0; r < parts; ++r) m = fmaxf(m, lse(r));
  return m;
}

/// Σ_r exp(L_r − m): the merged state's normaliser relative to m (m finite).
template <typename LseAt>
__device__ __forceinline__ float weight_sum(int parts, float m, LseAt lse) {
  float sum = 0.0f;
  for (int r = 0; r < parts; ++r) sum += expf(lse(r) - m);
  return sum;
}

/// Σ_r exp(L_r − m) · O_r / sum for one output element (m finite, sum > 0).
template <typename LseAt, typename OutAt>
__device__ __forceinline__ float merged_value(int parts, float m, float sum, LseAt lse, OutAt out) {
  float acc = 0.0f;
  for (int r = 0; r < parts; ++r) acc += expf(lse(r) - m) * out(r);
  return acc / sum;
}

}  // namespace freezeframe::kernels
