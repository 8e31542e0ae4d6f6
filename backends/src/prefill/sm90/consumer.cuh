#pragma once
// The Hopper prefill kernel's consumer warpgroups: each owns 64 of the CTA tile's 128 query
// rows, and per item loads its rows of Q, then for each K/V tile of the ring multiplies
// S = Q·Kᵀ, takes the tile into the online softmax and adds P·V to O (the epilogue,
// epilogue.cuh, writes O out). Without kOverlap each tile in turn: S, its softmax, P·V. With
// it, FlashAttention-3's overlap inside the warpgroup: S of tile n + 1 and P·V of tile n are
// in flight together, so the softmax of tile n + 1 runs while the tensor cores multiply P·V
// of tile n.

#include <cstdint>
#include <type_traits>

#include "kernels/mma.cuh"
#include "kernels/wgmma_ops.cuh"
#include "prefill/sm90/pipeline.cuh"
#include "prefill/sm90/softmax.cuh"
#include "prefill/sm90/work.cuh"

namespace freezeframe::prefill::sm90 {

/// One thread of a consumer warpgroup, over every item of the CTA's walk: its own copy of the
/// barriers (with its phases) and of the running K/V tile count.
template <typename T, int D, bool kOverlap>
struct Consumer {
  using Cfg = Sm90Config<D, kOverlap>;
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN;
  static constexpr int kChunksPerThread = 64 * Cfg::kChunks / 128;  // of the warpgroup's rows
  using Ring = KvRing<Cfg::kStages>;
  using Scores = float[kBlockN / 2];                  // S, then P (f32) of a tile, per thread
  using PFragments = std::uint32_t[kBlockN / 16][4];  // P as wgmma's A operand

  const PrefillParams& p;
  const SharedLayout<Cfg>& smem;
  const WorkList<kBlockM, kBlockN>& work;
  Barriers<Cfg> bars;
  const ConsumerThread thread;
  // Without a soft cap or ALiBi the scores stay raw until the exponent, where one FFMA
  // applies the scale (positive, so the row maximum is the same key either way).
  const bool plain_scores = p.softcap <= 0.0f && !p.use_alibi;
  const float exp_scale = plain_scores ? p.q_scale * kernels::kLog2e : 1.0f;
  int iteration = 0;  // K/V tiles taken so far, over every item

  /// kAsyncIo: the item's last S has read Q, which the producer may then replace.
  __device__ __forceinline__ void q_read(const Work& w, int it) const {
    if constexpr (Cfg::kAsyncIo) {
      if (it == w.num_kv_tiles - 1) bars.q.arrive_empty();
    }
  }

  /// Q: this warpgroup's 64 rows, swizzled as TMA would write them; rows past the tokens 0.
  /// A batch's loads are all issued before its stores: interleaved, each store waited for its
  /// load (13% of a 1k-token causal step, measured). With kAsyncIo the producer brings it.
  __device__ __forceinline__ void load_q(const Work& w) {
    if constexpr (Cfg::kAsyncIo) {
      bars.q.wait_full();
      bars.q.next();
    } else {
      const T* q = static_cast<const T*>(p.q);
      constexpr int kChunks = Cfg::kChunks;
      // Eight loads in flight a thread; batches rolled (unrolled, the compiler keeps every
      // chunk's address from item to item and spills at head size 256).
      constexpr int kBatch = kChunksPerThread < 8 ? kChunksPerThread : 8;
#pragma unroll 1
      for (int j0 = 0; j0 < kChunksPerThread; j0 += kBatch) {
        uint4 v[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int i = thread.ctid + 128 * (j0 + j);
          const int m = 64 * thread.cw + i / kChunks, c = i % kChunks;
          v[j] = make_uint4(0, 0, 0, 0);
          if (work.has_row(w, m)) {
            v[j] = __ldg(reinterpret_cast<const uint4*>(
                q + work.row_offset(w, m, p.q_stride_token, p.q_stride_head) + c * 8));
          }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int i = thread.ctid + 128 * (j0 + j);
          *reinterpret_cast<uint4*>(smem.tile_chunk(64 * thread.cw + i / kChunks, i % kChunks)) =
              v[j];
        }
      }
      hw::fence_proxy_async();
      hw::named_barrier_sync(1 + thread.cw, 128);
    }
  }

  /// S = Q·Kᵀ of the K tile in `stage`, 16 head-dim columns per wgmma; issued, not waited.
  __device__ __forceinline__ void issue_scores(Scores& s, int stage) const {
    hw::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const std::uint64_t a = hw::matrix_descriptor(
          smem.q() + (kk / 4) * kBlockM * 128 + thread.cw * 64 * 128 + (kk % 4) * 32, 16, 1024);
      const std::uint64_t b =
          hw::matrix_descriptor(smem.k(stage) + (kk / 4) * kBlockN * 128 + (kk % 4) * 32, 16, 1024);
      kernels::wgmma_ss<T>(s, a, b, kk > 0, std::integral_constant<int, kBlockN>{});
    }
    hw::wgmma_commit();
  }

  /// O += P·V of the V tile in `stage`, 16 keys per wgmma (V is the N-major B operand);
  /// issued, not waited.
  __device__ __forceinline__ void issue_pv(float (&o)[D / 2], const PFragments& pa,
                                           int stage) const {
    hw::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const std::uint64_t b =
          hw::matrix_descriptor(smem.v(stage) + kk * 16 * 128, kBlockN * 128, 1024);
      kernels::wgmma_rs<T>(o, pa[kk], b, 1, std::integral_constant<int, D>{});
    }
    hw::wgmma_commit();
  }

  /// P as the A operand of P·V: per 16 keys, rows g / g + 8, keys 2t.. and 2t + 8... Written
  /// only once no P·V is in flight: a register a running wgmma reads must not be redefined
  /// (the compiler would serialise the wgmmas).
  __device__ __forceinline__ static void pack_p(const Scores& s, PFragments& pa) {
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        pa[j / 2][(j % 2) * 2 + r] = kernels::pack2<T>(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]);
      }
    }
  }

  /// S of the K tile at `at`, waited for; the stage is then released.
  __device__ __forceinline__ void scores_alone(Scores& s, RingSlot at) const {
    bars.ring.wait_k(at);
    issue_scores(s, at.stage);
    hw::wgmma_wait<0>();
    hw::fence_registers(s);
    bars.ring.release_k(at);
  }

  /// O += P·V of the V tile at `at` with nothing else in flight, waited for; the stage is then
  /// released.
  __device__ __forceinline__ void pv_alone(float (&o)[D / 2], PFragments& pa, RingSlot at) const {
    bars.ring.wait_v(at);
    hw::fence_registers(o);
    issue_pv(o, pa, at.stage);
    hw::wgmma_wait<0>();
    hw::fence_registers(o);
    hw::fence_registers(pa);
    bars.ring.release_v(at);
  }

  /// The item's K/V tiles into `rows`; with kAsyncIo, Q is released after the last S.
  __device__ __forceinline__ void mainloop(const Work& w, RowState<D>& rows) {
    const TileSoftmax<kBlockN> softmax{p, w, thread, plain_scores, exp_scale};
    if constexpr (!kOverlap) {
      for (int it = 0; it < w.num_kv_tiles; ++it, ++iteration) {
        const RingSlot at = Ring::slot(iteration);
        Scores s;
        PFragments pa;
        float correction[2];
        scores_alone(s, at);
        q_read(w, it);
        softmax(s, w.kv_begin + it * kBlockN, rows, correction);
        rescale_o(rows.o, correction);
        pack_p(s, pa);
        pv_alone(rows.o, pa, at);
      }
    } else if (w.num_kv_tiles > 0) {
      // The first tile's S is waited for alone, the last tile's P·V after the loop.
      PFragments pa;
      float correction[2];
      RingSlot at = Ring::slot(iteration);
      {
        Scores s;
        scores_alone(s, at);
        q_read(w, 0);
        softmax(s, w.kv_begin, rows, correction);  // O is 0: no correction
        pack_p(s, pa);
      }
      ++iteration;
      for (int it = 1; it < w.num_kv_tiles; ++it, ++iteration) {
        const RingSlot prev = at;
        at = Ring::slot(iteration);
        // O and P are final before the first wgmma of the pair: an instruction writing them
        // between the two would make the compiler serialise the wgmmas.
        hw::fence_registers(rows.o);
        hw::fence_registers(pa);
        Scores s;
        bars.ring.wait_k(at);
        issue_scores(s, at.stage);
        bars.ring.wait_v(prev);
        issue_pv(rows.o, pa, prev.stage);
        hw::wgmma_wait<1>();  // S of this tile; P·V of the last one may still run
        hw::fence_registers(s);
        bars.ring.release_k(at);
        q_read(w, it);
        softmax(s, w.kv_begin + it * kBlockN, rows, correction);
        hw::wgmma_wait<0>();
        hw::fence_registers(rows.o);
        hw::fence_registers(pa);
        bars.ring.release_v(prev);
        pack_p(s, pa);
        rescale_o(rows.o, correction);
      }
      pv_alone(rows.o, pa, at);
    }
    if (w.num_kv_tiles == 0) q_read(w, -1);  // no S read it
  }
};

}  // namespace freezeframe::prefill::sm90
