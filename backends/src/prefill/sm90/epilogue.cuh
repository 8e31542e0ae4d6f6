#pragma once
// The Hopper prefill kernel's epilogue, per consumer warpgroup and item: O's rows normalised
// into shared memory and their LSE written; then (without kAsyncIo) the warpgroup's 64 rows
// stored from there, or (kAsyncIo) handed to the producer warpgroup's storers.

#include <cstdint>

#include "kernels/mma.cuh"
#include "prefill/sm90/consumer.cuh"

namespace freezeframe::prefill::sm90 {

/// Normalises this thread's two rows into shared memory (kAsyncIo: the O buffer, once the
/// storers are done with the item before), and writes their LSE.
template <typename T, int D, bool kOverlap>
__device__ __forceinline__ void write_o_rows(Consumer<T, D, kOverlap>& c, const Work& w,
                                             const RowState<D>& rows) {
  using Cfg = typename Consumer<T, D, kOverlap>::Cfg;
  const PrefillParams& p = c.p;
  const int t = c.thread.t;
  std::uint8_t* o_tile = c.smem.bytes;
  if constexpr (Cfg::kAsyncIo) {
    c.bars.o.wait_empty();
    o_tile = c.smem.bytes + Cfg::kQBytes;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = rows.row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int m = c.thread.tile_row(r), tok = c.thread.token(w, r);
    if (tok >= w.tok_end) continue;
    const int head = w.head0 + (m & ((1 << c.thread.hp_shift) - 1));
    const std::int64_t row = w.q_first + tok;
    const float inv = sum > 0.0f ? p.v_scale / sum : 0.0f;
    // Into this warpgroup's rows of the Q tile (its last S has been read), laid out as Q, so
    // the swizzle puts a warp's eight rows in distinct banks. Chunk j sits at the row's
    // chunk-0 position XOR j % 8: one base register (tile_chunk() per chunk spilled).
    const std::uint32_t row_at = m * 128 + ((m & 7) << 4) + 4 * t;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<std::uint32_t*>(o_tile + (row_at ^ ((j % 8) << 4)) +
                                        (j / 8) * Cfg::kBlockM * 128) =
          kernels::pack2<T>(rows.o[4 * j + 2 * r] * inv, rows.o[4 * j + 2 * r + 1] * inv);
    }
    if (p.lse != nullptr && t == 0) {
      p.lse[row * p.lse_stride_token + head] =
          sum > 0.0f ? (rows.row_max[r] + log2f(sum)) * kernels::kLn2 : -INFINITY;
    }
  }
}

/// Without kAsyncIo: the warpgroup's 64 rows out of shared memory, 16 bytes a thread. A
/// quarter-warp writes a whole row, where the registers' layout stored 4 bytes of 8 rows at a
/// time (measured 7% of a 1k-token causal step).
template <typename T, int D, bool kOverlap>
__device__ __forceinline__ void store_o_rows(const Consumer<T, D, kOverlap>& c, const Work& w) {
  using C = Consumer<T, D, kOverlap>;
  constexpr int kChunks = C::Cfg::kChunks;
  const PrefillParams& p = c.p;
  T* out = static_cast<T*>(p.out);
  hw::named_barrier_sync(1 + c.thread.cw, 128);
  // Rolled: unrolled, the compiler keeps every chunk's address from item to item, and spills.
#pragma unroll 1
  for (int j = 0; j < C::kChunksPerThread; ++j) {
    const int i = c.thread.ctid + 128 * j;
    const int m = 64 * c.thread.cw + i / kChunks, ch = i % kChunks;
    if (c.work.has_row(w, m)) {
      *reinterpret_cast<uint4*>(
          out + c.work.row_offset(w, m, p.out_stride_token, p.out_stride_head) + ch * 8) =
          *reinterpret_cast<const uint4*>(c.smem.tile_chunk(m, ch));
    }
  }
  // Q is rewritten by the next tile only after every warp of this warpgroup is done with it.
  hw::named_barrier_sync(1 + c.thread.cw, 128);
}

/// The item's epilogue: O's rows normalised and stored, or handed to the storers (kAsyncIo).
template <typename T, int D, bool kOverlap>
__device__ __forceinline__ void epilogue(Consumer<T, D, kOverlap>& c, const Work& w,
                                         const RowState<D>& rows) {
  write_o_rows(c, w, rows);
  if constexpr (Consumer<T, D, kOverlap>::Cfg::kAsyncIo) {
    c.bars.o.arrive_full();  // the storers take it from here
    c.bars.o.next();
  } else {
    store_o_rows(c, w);
  }
}

}  // namespace freezeframe::prefill::sm90
