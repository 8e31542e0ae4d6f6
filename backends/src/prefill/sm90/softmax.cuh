#pragma once
// A consumer thread's rows in the Hopper prefill kernel and the online softmax over them: a
// K/V tile's scores (S's wgmma accumulators) become P in place, and the rows' maxima, sums and
// O move on. Each step is its own loop, so the common case (no cap, no ALiBi, no mask) runs a
// short stretch of code.

#include <cstdint>

#include "kernels/mma.cuh"
#include "prefill/online_softmax.cuh"
#include "prefill/sm90/work.cuh"

namespace freezeframe::prefill::sm90 {

/// A consumer thread: thread `ctid` of consumer warpgroup `cw` (rows 64 cw .. of the CTA
/// tile). Its rows r = 0, 1 are rows 64 cw + 16 warp + g + 8 r, as wgmma's accumulators lie.
struct ConsumerThread {
  int ctid, cw, warp, lane, g, t, hp_shift;

  __device__ __forceinline__ ConsumerThread(int tid, int warpgroup, int heads_per_tile_shift)
      : ctid(tid - 128 * warpgroup),
        cw(warpgroup - 1),
        warp(ctid / 32),
        lane(ctid % 32),
        g(lane / 4),
        t(lane % 4),
        hp_shift(heads_per_tile_shift) {}

  __device__ __forceinline__ int tile_row(int r) const { return 64 * cw + 16 * warp + g + 8 * r; }
  __device__ __forceinline__ int token(const Work& w, int r) const {
    return w.tok0 + (tile_row(r) >> hp_shift);
  }
};

/// An item's state of a thread's two rows: the keys each sees, its ALiBi slope, the online
/// softmax's maximum (log2 units) and partial sum, and O's accumulators (o[4 j + e]: row
/// e / 2, column 8 j + 2 t + e % 2).
template <int D>
struct RowState {
  int key_lo[2], key_hi[2];
  float slope[2];
  float row_max[2], row_sum[2];
  float o[D / 2];

  template <int kBlockM, int kBlockN>
  __device__ __forceinline__ RowState(const PrefillParams& p, const Work& w,
                                      const WorkList<kBlockM, kBlockN>& work,
                                      const ConsumerThread& thread) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int tok = thread.token(w, r);
      key_lo[r] = work.first_key(w, tok);
      key_hi[r] = min(work.last_key(w, tok), w.kv_len - 1);
      slope[r] = p.use_alibi
                     ? p.alibi[w.head0 + (thread.tile_row(r) & ((1 << thread.hp_shift) - 1))]
                     : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  }
};

/// Scales O's rows by the correction of the tile's softmax, where a row's maximum moved.
template <int N>
__device__ __forceinline__ void rescale_o(float (&o)[N], const float (&correction)[2]) {
  if (__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) {
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
      o[4 * j + 0] *= correction[0];
      o[4 * j + 1] *= correction[0];
      o[4 * j + 2] *= correction[1];
      o[4 * j + 3] *= correction[1];
    }
  }
}

/// The softmax of an item's K/V tiles of kBlockN keys. `plain_scores`: no cap and no ALiBi,
/// the scores stay raw and `exp_scale` scales them in the exponent.
template <int kBlockN>
struct TileSoftmax {
  const PrefillParams& p;
  const Work& w;
  const ConsumerThread& thread;
  const bool plain_scores;
  const float exp_scale;

  /// The scores of the tile at key n0 (raw, or in log2 units with a cap or ALiBi), masked
  /// where the tile crosses a row's visible range; then the online softmax: the row maxima and
  /// sums move on, s becomes P (in place, f32), and `correction` is what O must be scaled by
  /// before it takes this tile's P·V. s[i], i = 4 j + e: row g + 8 (e / 2), key
  /// n0 + 8 j + 2 t + e % 2.
  template <int D>
  __device__ __forceinline__ void operator()(float (&s)[kBlockN / 2], int n0, RowState<D>& rows,
                                             float (&correction)[2]) const {
    const int t = thread.t;
    const bool masked = n0 < w.always_first || n0 + kBlockN - 1 > w.always_last;
    if (!plain_scores) {
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) {
        const int r = (i % 4) / 2;
        const int key = n0 + 8 * (i / 4) + 2 * t + (i & 1);
        float x = s[i] * p.q_scale;
        if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
        if (p.use_alibi) x += rows.slope[r] * float(key - (w.context + thread.token(w, r)));
        s[i] = x * kernels::kLog2e;
      }
    }
    if (masked) {
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) {
        const int r = (i % 4) / 2;
        const int key = n0 + 8 * (i / 4) + 2 * t + (i & 1);
        if (key < rows.key_lo[r] || key > rows.key_hi[r]) s[i] = -INFINITY;
      }
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) {
      tile_max[(i % 4) / 2] = fmaxf(tile_max[(i % 4) / 2], s[i]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      correction[r] =
          online_softmax_update(quad_max(tile_max[r]), exp_scale, rows.row_max[r], rows.row_sum[r]);
    }
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) {
      const int r = (i % 4) / 2;
      const float base = softmax_base(rows.row_max[r]);
      s[i] = kernels::fast_exp2(s[i] * exp_scale - base);
      rows.row_sum[r] += s[i];
    }
  }
};

}  // namespace freezeframe::prefill::sm90
