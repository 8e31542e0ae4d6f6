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

template <int D>
struct Sm90Config {
  static constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
  static constexpr int kBlockM = 128;   // query rows of a CTA tile: 64 per consumer warpgroup
  static constexpr int kBlockN = D == 256 ? 64 : 128;  // keys of a K/V tile
  static constexpr int kStages = 2;
  static constexpr int kColumnBlocks = D / 64;  // 64 columns = one 128-byte swizzle row
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kTileBytes = kBlockN * D * 2;
  static constexpr int kBarrierBytes = 64;
  // Q | K[stages] | V[stages] | barriers, after up to 1023 bytes to align the swizzle atoms.
  static constexpr int kSmemBytes = 1024 + kQBytes + 2 * kStages * kTileBytes + kBarrierBytes;
  static constexpr int kProducerRegisters = 56;
  static constexpr int kConsumerRegisters = 224;
};

}  // namespace freezeframe::prefill
