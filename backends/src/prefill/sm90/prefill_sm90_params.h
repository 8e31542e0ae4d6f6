#pragma once
// Parameters and tile shape of the Hopper prefill kernel (host-visible; the kernel is in
// prefill_sm90_kernel.cuh, its parts beside it).

#include <cuda.h>

#include "prefill/prefill_params.h"

namespace freezeframe::prefill {

struct Sm90Params {
  PrefillParams p;
  CUtensorMap k_map;  // 4-d: (dim, token in block, kv head, block) — or (dim, row, kv head, 1)
  CUtensorMap v_map;
  // 3-d: (dim, head, row) of the queries, read in boxes of 64 columns × the CTA tile's heads ×
  // its tokens (kAsyncIo instantiations).
  CUtensorMap q_map;
  int rows_per_copy = 0;  // rows of one TMA box: the block size, at most kBlockN
};

/// The tile shape of head size D; kOverlap: the instantiation that overlaps a tile's softmax
/// with the previous tile's P·V (FlashAttention-3's overlap inside a consumer warpgroup).
template <int D, bool kOverlap = false>
struct Sm90Config {
  static constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
  static constexpr int kBlockM = 128;   // query rows of a CTA tile: 64 per consumer warpgroup
  static constexpr int kBlockN = D == 256 ? 64 : 128;  // keys of a K/V tile
  // The overlap is measured faster at head sizes 128 and 256, slower at 64 (less work per
  // tile to hide the softmax behind); the launch takes it only where the producer keeps up.
  static constexpr bool kOverlapPays = D != 64;
  // Q brought by the producer's TMA for each item as soon as the last one's S has read the
  // tile, and O staged in a buffer of its own that the producer warpgroup's other warps store
  // while the consumers go on: the fixed costs of an item off the consumers' path. At head
  // size 128 only: the O buffer does not fit beside two stages at 256, and at 64 (no overlap)
  // it measured 2.5% slower at 16k tokens and level at 4k (PERFORMANCE.md).
  static constexpr bool kAsyncIo = D == 128;
  // K/V stages in flight: two. (With the overlap a consumer holds two, K of tile n + 1 and V
  // of tile n; a third fits at head size 128 only without the O buffer, and measured level with
  // two at 128-token blocks and slower at 16.)
  static constexpr int kStages = 2;
  static constexpr int kColumnBlocks = D / 64;  // 64 columns = one 128-byte swizzle row
  static constexpr int kChunks = D / 8;         // 16-byte chunks of a row
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kTileBytes = kBlockN * D * 2;
  static constexpr int kOBytes = kAsyncIo ? kQBytes : 0;
  // k/v full and empty per stage, v_landed; with kAsyncIo q_full, q_empty, o_full, o_empty.
  static constexpr int kBarrierBytes = 8 * (4 * kStages + 1 + 4);
  // Q | O | K[stages] | V[stages] | barriers, after up to 1023 bytes to align the swizzle atoms.
  static constexpr int kSmemBytes =
      1024 + kQBytes + kOBytes + 2 * kStages * kTileBytes + kBarrierBytes;
  static constexpr int kProducerRegisters = 56;
  static constexpr int kConsumerRegisters = 224;
};

}  // namespace freezeframe::prefill
