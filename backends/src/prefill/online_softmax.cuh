#pragma once
// The online softmax's per-row step, shared by the prefill kernels (prefill_kernel.cuh on
// mma.sync, sm90/ on wgmma). Scores are in log2 units once multiplied by `exp_scale` (the
// softmax scale times log2 e where the scores are still raw, 1 where they were scaled
// already); a row's maximum is kept in those units, and its sum is the thread's partial one.
// The four threads of a quad hold one row of an mma or wgmma accumulator between them.

#include "kernels/mma.cuh"

namespace freezeframe::prefill {

/// The maximum of `x` over the thread's quad (lanes 4g .. 4g + 3: one accumulator row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}

/// What a row's scores are exponentiated against: its maximum, or 0 while that is −inf (a row
/// that has seen no visible key yet: its p are 0, and −inf − −inf would make them NaN).
__device__ __forceinline__ float softmax_base(float row_max) {
  return row_max == -INFINITY ? 0.0f : row_max;
}

/// Takes a tile into a row: its maximum moves to include `tile_max` (the tile's maximum score
/// of the row, before `exp_scale`), its sum is rescaled to the new maximum, and the returned
/// correction is what the row of O must be scaled by before the tile's P·V is added. The
/// tile's p are then fast_exp2(score · exp_scale − softmax_base(row_max)).
__device__ __forceinline__ float online_softmax_update(float tile_max, float exp_scale,
                                                       float& row_max, float& row_sum) {
  const float new_max = fmaxf(row_max, tile_max * exp_scale);
  const float correction = kernels::fast_exp2(row_max - softmax_base(new_max));
  row_max = new_max;
  row_sum *= correction;
  return correction;
}

}  // namespace freezeframe::prefill
