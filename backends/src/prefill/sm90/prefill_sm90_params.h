#pragma once
// Parameters and tile shape of the Hopper prefill kernel (host-visible; the kernel is in
// prefill_sm90_kernel.cuh).

#include <cuda.h>

#include "prefill/prefill_params.h"

namespace freezeframe::prefill {

struct Sm90Params {
  PrefillParams p;
  CUtensorMap k_map;  // 4-d: (dim, token in block, kv head, block) — or (dim, row, kv head, 1)
  CUtensorMap v_map;
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
  // K/V stages in flight. With the overlap a consumer holds two (K of tile n + 1, V of tile n),
  // so it gets three where shared memory holds them (227 KB a CTA; not at head size 256).
  // Without it, two: three measured slower with 16-token blocks, where the copies set the pace.
  static constexpr int kStages = kOverlap && D != 256 ? 3 : 2;
  static constexpr int kColumnBlocks = D / 64;  // 64 columns = one 128-byte swizzle row
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kTileBytes = kBlockN * D * 2;
  static constexpr int kBarrierBytes = 8 * (4 * kStages + 1);
  // Q | K[stages] | V[stages] | barriers, after up to 1023 bytes to align the swizzle atoms.
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kTileBytes + kBarrierBytes;
  static constexpr int kProducerRegisters = 56;
  static constexpr int kConsumerRegisters = 224;
};

}  // namespace freezeframe::prefill
