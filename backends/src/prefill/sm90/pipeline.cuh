#pragma once
// The Hopper prefill kernel's shared memory and the mbarriers that hand it between the
// producer and the consumers. Offsets and phase parities are worked out here, from a stage
// and a running count, so the kernel's parts name a barrier by its role.
//
// An mbarrier's phases complete one after another, and a wait with parity P returns once the
// latest phase of that parity has completed. A buffer's "full" barrier completes phase n when
// its n-th fill (from 0) has landed, so the n-th read waits with parity n & 1; its "empty"
// barrier completes phase n when the n-th read is done, so the n-th fill waits for read n − 1,
// parity (n & 1) ^ 1, which for n = 0 is the phase before the first and returns at once.

#include <cstdint>

#include "kernels/mma.cuh"
#include "kernels/sm90.cuh"
#include "prefill/sm90/prefill_sm90_params.h"

namespace freezeframe::prefill::sm90 {

namespace hw = kernels::sm90;

/// The warps that store O with kAsyncIo: the producer warpgroup's warps 1-3.
inline constexpr int kStorers = 96;

/// The dynamic shared memory from its first 1024-byte boundary (the 128-byte swizzle's atom):
/// Q | O (kAsyncIo) | K[kStages] | V[kStages] | barriers. Addresses are of the shared window
/// (what TMA, wgmma and mbarriers take); `tile_chunk` gives a generic pointer.
template <class Cfg>
struct SharedLayout {
  std::uint32_t base;   // Q
  std::uint8_t* bytes;  // `base` as a generic pointer

  __device__ __forceinline__ explicit SharedLayout(std::uint8_t* raw)
      : base((kernels::shared_address(raw) + 1023) & ~1023u),
        bytes(raw + (base - kernels::shared_address(raw))) {}

  __device__ __forceinline__ std::uint32_t q() const { return base; }
  __device__ __forceinline__ std::uint32_t k(int stage) const {
    return base + Cfg::kQBytes + Cfg::kOBytes + stage * Cfg::kTileBytes;
  }
  __device__ __forceinline__ std::uint32_t v(int stage) const {
    return k(Cfg::kStages) + stage * Cfg::kTileBytes;
  }
  __device__ __forceinline__ std::uint32_t barriers() const { return v(Cfg::kStages); }
  /// The generic pointer of shared address `address`.
  __device__ __forceinline__ std::uint8_t* at(std::uint32_t address) const {
    return bytes + (address - base);
  }
  /// 16-byte chunk c of row m of the Q tile (Q, and O of the epilogue without kAsyncIo),
  /// 128-byte swizzled as TMA would write it. The O buffer (kAsyncIo) is laid out the same,
  /// Cfg::kQBytes further.
  __device__ __forceinline__ std::uint8_t* tile_chunk(int m, int c) const {
    return bytes + (c / 8) * Cfg::kBlockM * 128 + m * 128 + (((c % 8) ^ (m & 7)) << 4);
  }
};

/// A K/V tile's place in the ring: its stage, and the parity of that stage's current phase
/// (each stage's barriers complete a phase every kStages tiles).
struct RingSlot {
  int stage;
  std::uint32_t phase;
};

/// The K/V ring's barriers, from `base`: per stage k_full, v_full (the producer's copies'
/// transaction bytes complete them), k_empty, v_empty (the two consumer warpgroups' 256
/// threads arrive once they have read the stage); then v_landed, the producer's own barrier
/// for a V tile it must finish before the consumers see it.
template <int kStages>
struct KvRing {
  std::uint32_t base;

  /// The slot of the iteration-th K/V tile (counted over every item of the thread's walk).
  __device__ __forceinline__ static RingSlot slot(int iteration) {
    return {iteration % kStages, static_cast<std::uint32_t>((iteration / kStages) & 1)};
  }

  __device__ __forceinline__ std::uint32_t k_full(int stage) const { return base + 8 * stage; }
  __device__ __forceinline__ std::uint32_t v_full(int stage) const {
    return base + 8 * (kStages + stage);
  }
  __device__ __forceinline__ std::uint32_t k_empty(int stage) const {
    return base + 8 * (2 * kStages + stage);
  }
  __device__ __forceinline__ std::uint32_t v_empty(int stage) const {
    return base + 8 * (3 * kStages + stage);
  }
  __device__ __forceinline__ std::uint32_t v_landed() const { return base + 8 * (4 * kStages); }
  /// The first byte after the ring's barriers.
  __device__ __forceinline__ std::uint32_t end() const { return v_landed() + 8; }

  __device__ __forceinline__ void init() const {
    for (int s = 0; s < kStages; ++s) {
      hw::mbarrier_init(k_full(s), 1);
      hw::mbarrier_init(v_full(s), 1);
      hw::mbarrier_init(k_empty(s), 256);
      hw::mbarrier_init(v_empty(s), 256);
    }
    hw::mbarrier_init(v_landed(), 1);
  }

  // The producer: a stage is free once the consumers have read it a round before.
  __device__ __forceinline__ void wait_k_free(RingSlot at) const {
    hw::mbarrier_wait(k_empty(at.stage), at.phase ^ 1);
  }
  __device__ __forceinline__ void wait_v_free(RingSlot at) const {
    hw::mbarrier_wait(v_empty(at.stage), at.phase ^ 1);
  }
  /// The producer's arrival on a stage's full barrier: its copies will bring `bytes`.
  __device__ __forceinline__ void expect_k(RingSlot at, std::uint32_t bytes) const {
    hw::mbarrier_arrive_expect_tx(k_full(at.stage), bytes);
  }
  __device__ __forceinline__ void expect_v(RingSlot at, std::uint32_t bytes) const {
    hw::mbarrier_arrive_expect_tx(v_full(at.stage), bytes);
  }
  // The consumers: wait for a stage's tile, then release it.
  __device__ __forceinline__ void wait_k(RingSlot at) const {
    hw::mbarrier_wait(k_full(at.stage), at.phase);
  }
  __device__ __forceinline__ void wait_v(RingSlot at) const {
    hw::mbarrier_wait(v_full(at.stage), at.phase);
  }
  __device__ __forceinline__ void release_k(RingSlot at) const {
    hw::mbarrier_arrive(k_empty(at.stage));
  }
  __device__ __forceinline__ void release_v(RingSlot at) const {
    hw::mbarrier_arrive(v_empty(at.stage));
  }
};

/// One buffer handed back and forth once per item between the side that fills it and the side
/// that drains it (kAsyncIo: Q, filled by the producer's TMA and drained by both consumers'
/// last S of the item; O, filled by both consumers' epilogues and drained by the storers).
/// Each side holds its own copy and calls next() once per item.
struct Handoff {
  std::uint32_t full, empty;
  std::uint32_t phase = 0;  // of this side's current item

  __device__ __forceinline__ void init(std::uint32_t fillers, std::uint32_t drainers) const {
    hw::mbarrier_init(full, fillers);
    hw::mbarrier_init(empty, drainers);
  }
  __device__ __forceinline__ void wait_full() const { hw::mbarrier_wait(full, phase); }
  /// The filler: until the item before's buffer is drained (the first item's passes at once).
  __device__ __forceinline__ void wait_empty() const { hw::mbarrier_wait(empty, phase ^ 1); }
  __device__ __forceinline__ void arrive_full() const { hw::mbarrier_arrive(full); }
  __device__ __forceinline__ void arrive_empty() const { hw::mbarrier_arrive(empty); }
  __device__ __forceinline__ void next() { phase ^= 1; }
};

/// Every barrier of the kernel: the ring's, then (kAsyncIo) Q's and O's handoffs.
template <class Cfg>
struct Barriers {
  KvRing<Cfg::kStages> ring;
  Handoff q, o;

  __device__ __forceinline__ explicit Barriers(std::uint32_t base)
      : ring{base}, q{ring.end(), ring.end() + 8}, o{ring.end() + 16, ring.end() + 24} {}

  /// By one thread, before the __syncthreads that precedes any use.
  __device__ __forceinline__ void init() const {
    ring.init();
    if constexpr (Cfg::kAsyncIo) {
      q.init(1, 256);         // the producer's expectation; both consumers' last S
      o.init(256, kStorers);  // both consumers' epilogues; the storers
    }
    hw::fence_barrier_init();
  }
};

}  // namespace freezeframe::prefill::sm90
