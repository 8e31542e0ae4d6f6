#pragma once
// The Hopper prefill kernel's producer warpgroup. Warp 0 brings each item's K and V tiles into
// the ring by TMA (and, with kAsyncIo, its Q tile); warps 1-3 (kAsyncIo) store each item's O
// from its buffer to the output while the consumers go on to the next item.

#include <cuda.h>

#include <cstdint>

#include "prefill/sm90/pipeline.cuh"
#include "prefill/sm90/work.cuh"

namespace freezeframe::prefill::sm90 {

/// Warp 0 of the producer warpgroup: every lane issues copies (a paged tile is up to 16
/// boxes, and one lane issuing them all one after another held the pipeline back).
template <class Cfg>
struct KvProducer {
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN;

  const Sm90Params& params;
  const PrefillParams& p;
  const SharedLayout<Cfg>& smem;
  const WorkList<kBlockM, kBlockN>& work;
  Barriers<Cfg> bars;
  const int lane;
  const int rows;  // of one TMA box: the cache block, or kBlockN for the step's own rows
  const std::uint32_t box_bytes = rows * 128;
  int iteration = 0, landed_phase = 0;

  __device__ __forceinline__ void run() {
    const bool paged = p.block_table != nullptr;
    for (int round = 0, item = work.item_of(0); item < work.items; item = work.item_of(++round)) {
      Work w;
      if (!work.work_of(item, w)) continue;
      if (w.num_kv_tiles == 0) issue_q(w);
      const std::int32_t* blocks =
          paged ? p.block_table + std::int64_t(w.req) * p.block_table_stride : nullptr;
      const int kv_row0 = paged ? 0 : p.kv_start[w.req];
      for (int it = 0; it < w.num_kv_tiles; ++it, ++iteration) {
        const RingSlot at = KvRing<Cfg::kStages>::slot(iteration);
        const int n0 = w.kv_begin + it * kBlockN;
        // Boxes that hold keys of the sequence; the rest of the tile is not read.
        const int valid = min(kBlockN, w.kv_len - n0);
        const int boxes = (valid + rows - 1) / rows;
        const std::uint32_t bytes = boxes * Cfg::kColumnBlocks * box_bytes;
        // Lane b finds box b's coordinates: (token in block, block), or (row, 0).
        int my_c1 = 0, my_c3 = 0;
        if (lane < boxes) {
          const int key = n0 + lane * rows;
          if (paged) {
            my_c1 = key & ((1 << p.block_shift) - 1);
            my_c3 = blocks[key >> p.block_shift];
          } else {
            my_c1 = kv_row0 + key;
          }
        }
        const Box box{boxes, my_c1, w.kv_head, my_c3};
        // The copies complete the full barrier's transaction bytes, which lane 0 expects
        // before the other lanes see the stage free (__syncwarp); a copy landing before the
        // expectation is fine, as the phase cannot complete before lane 0's arrival.
        if (lane == 0) {
          bars.ring.wait_k_free(at);
          bars.ring.expect_k(at, bytes);
        }
        __syncwarp();
        issue(&params.k_map, smem.k(at.stage), bars.ring.k_full(at.stage), box);
        if (it == 0) issue_q(w);  // after the item's first K tile: the consumers need both
        if (lane == 0) bars.ring.wait_v_free(at);
        __syncwarp();
        if (valid == kBlockN) {
          if (lane == 0) bars.ring.expect_v(at, bytes);
          issue(&params.v_map, smem.v(at.stage), bars.ring.v_full(at.stage), box);
        } else {
          issue_v_tail(at, box, bytes, valid);
        }
      }
    }
  }

  /// This lane's box of a tile: box `lane` of `count` (lanes past them copy nothing), at
  /// coordinates (c1, c2, c3) after the column's.
  struct Box {
    int count, c1, c2, c3;
  };

  /// Lane b's copies of box b (one per 64-column block) into `tile`, completing `bar`.
  __device__ __forceinline__ void issue(const CUtensorMap* map, std::uint32_t tile,
                                        std::uint32_t bar, const Box& box) const {
    if (lane < box.count) {
      for (int c = 0; c < Cfg::kColumnBlocks; ++c) {
        hw::tma_load_4d(tile + c * kBlockN * 128 + lane * rows * 128, map, bar, c * 64, box.c1,
                        box.c2, box.c3);
      }
    }
  }

  /// A V tile that runs past the sequence: land it, zero rows valid.. (P is 0 there, but
  /// 0 · NaN is not), then release it to the consumers.
  __device__ __forceinline__ void issue_v_tail(RingSlot at, const Box& box, std::uint32_t bytes,
                                               int valid) {
    if (lane == 0) hw::mbarrier_arrive_expect_tx(bars.ring.v_landed(), bytes);
    issue(&params.v_map, smem.v(at.stage), bars.ring.v_landed(), box);
    __syncwarp();
    hw::mbarrier_wait(bars.ring.v_landed(), landed_phase);
    landed_phase ^= 1;
    std::uint8_t* tile = smem.at(smem.v(at.stage));
    const int chunks = (kBlockN - valid) * 8;  // 16-byte chunks per column block
    for (int i = lane; i < chunks * Cfg::kColumnBlocks; i += 32) {
      const int c = i / chunks, r = valid + (i % chunks) / 8;
      *reinterpret_cast<uint4*>(tile + c * kBlockN * 128 + r * 128 + (i % 8) * 16) =
          make_uint4(0, 0, 0, 0);
    }
    hw::fence_proxy_async();
    __syncwarp();
    if (lane == 0) hw::mbarrier_arrive(bars.ring.v_full(at.stage));
  }

  /// kAsyncIo: the item's Q tile, once both consumers' last S of the item before has read it
  /// (one box per 64-column block: the tile's heads × its tokens).
  __device__ __forceinline__ void issue_q(const Work& w) {
    if constexpr (Cfg::kAsyncIo) {
      if (lane == 0) {
        bars.q.wait_empty();
        hw::mbarrier_arrive_expect_tx(bars.q.full, Cfg::kQBytes);
        for (int c = 0; c < Cfg::kColumnBlocks; ++c) {
          hw::tma_load_3d(smem.q() + c * kBlockM * 128, &params.q_map, bars.q.full, c * 64, w.head0,
                          w.q_first + w.tok0);
        }
      }
      bars.q.next();
      __syncwarp();
    }
  }
};

/// kAsyncIo, warps 1-3 of the producer warpgroup (thread `storer` of kStorers): each item's O
/// from its buffer to the output, whole 16-byte chunks.
template <typename T, class Cfg>
__device__ __forceinline__ void store_o_buffers(const PrefillParams& p,
                                                const SharedLayout<Cfg>& smem,
                                                const WorkList<Cfg::kBlockM, Cfg::kBlockN>& work,
                                                Barriers<Cfg> bars, int storer) {
  constexpr int kChunks = Cfg::kChunks;
  for (int round = 0, item = work.item_of(0); item < work.items; item = work.item_of(++round)) {
    Work w;
    if (!work.work_of(item, w)) continue;
    bars.o.wait_full();
    bars.o.next();
    T* out = static_cast<T*>(p.out);
    for (int i = storer; i < Cfg::kBlockM * kChunks; i += kStorers) {
      const int m = i / kChunks, c = i % kChunks;
      if (work.has_row(w, m)) {
        *reinterpret_cast<uint4*>(
            out + work.row_offset(w, m, p.out_stride_token, p.out_stride_head) + c * 8) =
            *reinterpret_cast<const uint4*>(smem.tile_chunk(m, c) + Cfg::kQBytes);
      }
    }
    bars.o.arrive_empty();
  }
}

}  // namespace freezeframe::prefill::sm90
