#pragma once
// The sampler kernel's block-wide parts (sampler_kernel.cu): its shared memory, reductions,
// histogram bins with one atomic per distinct bin, the pick of a bin from a running sum, the
// radix selection, and the search for the lowest key that still weighs. Included by
// sampler_kernel.cu only.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <limits>

#include "runtime/sampler_kernel.h"
#include "runtime/sampling_math.h"

namespace freezeframe::model_kernels::sampler_block {

namespace s = sampling;
constexpr int kThreads = s::kThreads;
constexpr unsigned kFullWarp = 0xffffffffu;

// Buckets: the top 12 bits of the 32-bit order key, i.e. the top 12 bits of the rank.
constexpr int kRankBucketShift = 52;
constexpr int kBuckets = 4096;
// Ranks gathered at most; a list of them is 12 bytes a token.
constexpr int kListCapacity = 6144;
// A radix selection's digit: 8 bits.
constexpr int kDigits = 256;
// Tokens a thread loads before it works on them, so that several loads are in flight.
constexpr int kLoadsAhead = 4;

using BlockReduce = cub::BlockReduce<std::uint64_t, kThreads>;
// Warp scans: the default raking scan keeps 8 KB of shared memory for 1024 threads.
using BlockScan = cub::BlockScan<std::uint64_t, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;

struct SampleParams {
  const float* logits;
  std::int64_t row_stride;
  int vocab;
  const SampleRow* rows;
  std::int32_t* token_ids;
};

/// A bin picked from a histogram: the bin, the need left inside it and its amount.
struct Pick {
  int bin;
  std::uint64_t need;
  std::uint64_t amount;
};

struct Shared {
  union {
    typename BlockReduce::TempStorage reduce;
    typename BlockScan::TempStorage scan;
  } cub;
  std::uint32_t bucket_count[kBuckets];
  union {
    struct {  // gathered tokens: rank, and the weight once known
      std::uint64_t rank[kListCapacity];
      std::uint32_t weight[kListCapacity];
    } list;
    std::uint64_t bucket_weight[kBuckets];  // the row pass's weights, read before a gather
  };
  std::uint64_t digit_amount[kDigits];
  std::uint64_t value;  // a block-wide result handed to every thread
  Pick pick;
  std::uint32_t weighing_key;
  int listed;
};

// Over 48 KB, so dynamic; ~92 KB fits every GPU from sm_80 on (sm_86/89 allow 99 KB).
constexpr int kSharedBytes = static_cast<int>(sizeof(Shared));

struct Max {
  __device__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const {
    return a > b ? a : b;
  }
};
struct Min {
  __device__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const {
    return a < b ? a : b;
  }
};

__device__ unsigned lane() { return threadIdx.x & 31u; }
__device__ unsigned lanes_below() { return (1u << lane()) - 1u; }

/// The low `bits` bits set (bits ≤ 64).
__device__ std::uint64_t low_mask(int bits) {
  return bits >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << bits) - 1;
}

// The block's maximum, minimum or sum of one value per thread, in every thread.
__device__ std::uint64_t broadcast(std::uint64_t v, Shared& sh) {
  if (threadIdx.x == 0) sh.value = v;  // the reductions leave their result in thread 0
  __syncthreads();
  v = sh.value;
  __syncthreads();  // the storage and sh.value may be reused
  return v;
}
__device__ std::uint64_t block_max(std::uint64_t v, Shared& sh) {
  return broadcast(BlockReduce(sh.cub.reduce).Reduce(v, Max{}), sh);
}
__device__ std::uint64_t block_min(std::uint64_t v, Shared& sh) {
  return broadcast(BlockReduce(sh.cub.reduce).Reduce(v, Min{}), sh);
}
__device__ std::uint64_t block_sum(std::uint64_t v, Shared& sh) {
  return broadcast(BlockReduce(sh.cub.reduce).Sum(v), sh);
}

/// Calls visit(v, logits[v], valid) for every token v in [begin, end), whole warps together so
/// that warp intrinsics inside see every lane (valid is false past the end).
template <typename Visit>
__device__ void for_each_token(const float* logits, int begin, int end, Visit visit) {
  for (int base = begin; base < end; base += kLoadsAhead * kThreads) {
    float logit[kLoadsAhead];
#pragma unroll
    for (int j = 0; j < kLoadsAhead; ++j) {
      const int v = base + j * kThreads + static_cast<int>(threadIdx.x);
      logit[j] = v < end ? logits[v] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kLoadsAhead; ++j) {
      if (base + j * kThreads >= end) break;  // the same for the whole block
      const int v = base + j * kThreads + static_cast<int>(threadIdx.x);
      visit(v, logit[j], v < end);
    }
  }
}

// A bin no lane takes, for lanes that do not take one.
constexpr std::uint32_t kNoBin = 0xffffffffu;

/// Adds one to bins[bin] for every lane of the warp that takes; one atomic per distinct bin.
/// Called by whole warps.
__device__ void count_in_bin(std::uint32_t* bins, std::uint32_t bin, bool take) {
  const unsigned takers = __ballot_sync(kFullWarp, take);
  if (takers == 0) return;
  const unsigned peers = __match_any_sync(kFullWarp, take ? bin : kNoBin) & takers;
  if (take && (peers & lanes_below()) == 0)
    atomicAdd(&bins[bin], static_cast<std::uint32_t>(__popc(peers)));
}

/// The warp's sum of one 32-bit amount a lane, exact.
__device__ std::uint64_t warp_sum(std::uint32_t amount) {
  const unsigned low = __reduce_add_sync(kFullWarp, amount & 0xffffu);  // < 2^21, as is high
  const unsigned high = __reduce_add_sync(kFullWarp, amount >> 16);
  return (static_cast<std::uint64_t>(high) << 16) + low;
}

/// Adds `amount` to bins[bin] for every lane of the warp that takes; the lanes of one bin sum
/// first and their lowest lane issues the atomic. Called by whole warps.
__device__ void add_to_bin(std::uint64_t* bins, std::uint32_t bin, std::uint32_t amount,
                           bool take) {
  const unsigned takers = __ballot_sync(kFullWarp, take);
  if (takers == 0) return;
  const unsigned peers = __match_any_sync(kFullWarp, take ? bin : kNoBin) & takers;
  const bool leader = take && (peers & lanes_below()) == 0;
  const unsigned leaders = __ballot_sync(kFullWarp, leader);
  const unsigned largest = __reduce_max_sync(kFullWarp, take ? __popc(peers) : 0u);
  std::uint64_t sum = 0;
  // Whichever loop is shorter: one warp-wide sum per distinct bin, or each leader fetching its
  // peers' amounts one at a time.
  if (static_cast<unsigned>(__popc(leaders)) <= largest) {
    for (unsigned left = leaders; left != 0; left &= left - 1) {
      const int first = __ffs(static_cast<int>(left)) - 1;
      const std::uint32_t its_bin = __shfl_sync(kFullWarp, bin, first);
      const std::uint64_t bin_sum = warp_sum(take && bin == its_bin ? amount : 0u);
      if (static_cast<int>(lane()) == first) sum = bin_sum;
    }
  } else {
    unsigned left = leader ? peers : 0u;
    for (unsigned round = 0; round < largest; ++round) {
      const int from = left != 0 ? __ffs(static_cast<int>(left)) - 1 : static_cast<int>(lane());
      const std::uint32_t peer_amount = __shfl_sync(kFullWarp, amount, from);
      if (left != 0) {
        sum += peer_amount;
        left &= left - 1;
      }
    }
  }
  if (leader) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&bins[bin]),
              static_cast<unsigned long long>(sum));
  }
}

/// Appends the rank of every lane that takes to the list: one atomic a warp. Called by whole
/// warps, only when the tokens taken are known to fit.
__device__ void append_to_list(std::uint64_t rank, bool take, Shared& sh) {
  const unsigned takers = __ballot_sync(kFullWarp, take);
  if (takers == 0) return;
  const int first = __ffs(static_cast<int>(takers)) - 1;
  int base = 0;
  if (static_cast<int>(lane()) == first) base = atomicAdd(&sh.listed, __popc(takers));
  base = __shfl_sync(kFullWarp, base, first);
  const int slot = base + __popc(takers & lanes_below());
  if (take && slot < kListCapacity) sh.list.rank[slot] = rank;  // the guard never fails
}

/// The bin, best (the highest) first, whose span of the running sum holds `need` (1 ≤ need ≤
/// the sum of all bins); `count` is 256 or a multiple of the block's threads.
template <typename Amount>
__device__ Pick pick_from_top(const Amount* bins, int count, std::uint64_t need, Shared& sh) {
  const int per_thread = count > kThreads ? count / kThreads : 1;
  const int top = count - 1 - per_thread * static_cast<int>(threadIdx.x);  // this thread's best
  std::uint64_t mine = 0;
  for (int j = 0; j < per_thread && top - j >= 0; ++j) mine += bins[top - j];
  std::uint64_t before = 0;
  BlockScan(sh.cub.scan).ExclusiveSum(mine, before);
  if (before < need && need <= before + mine) {  // exactly one thread
    for (int j = 0;; ++j) {
      const std::uint64_t amount = bins[top - j];
      if (need <= before + amount) {
        sh.pick = {top - j, need - before, amount};
        break;
      }
      before += amount;
    }
  }
  __syncthreads();
  const Pick pick = sh.pick;
  __syncthreads();  // sh.pick and the scan's storage may be reused
  return pick;
}

/// A selection's result: the key of the candidate at which the running sum of amounts, best key
/// first, reaches the need, and that sum through it.
struct Selected {
  std::uint64_t key;
  std::uint64_t through;
};

/// Radix selection. visit(lo, hi, add) calls add(key, amount) for every candidate whose key is
/// in [lo, hi] (with its amount; 0 for one that does not count) and for any others it likes
/// with amount 0, whole warps together. Every candidate's key is in [key_lo, key_hi], and
/// 1 ≤ need ≤ their amounts' sum. The bits above the highest one in which key_lo and key_hi
/// differ are shared by every candidate, so the digits start below them; a digit may reach
/// above `low` into the prefix, whose bits every candidate under it shares.
template <typename Visit>
__device__ Selected select_key(Visit visit, std::uint64_t need, std::uint64_t key_lo,
                               std::uint64_t key_hi, Shared& sh) {
  const std::uint64_t need_in = need;
  const std::uint64_t differ = key_lo ^ key_hi;
  int low = differ == 0 ? 0 : 64 - __clzll(static_cast<long long>(differ));  // bits ≥ low known
  if (low < 8) low = 8;
  std::uint64_t prefix = key_lo & ~low_mask(low);
  Pick pick;
  do {
    const int shift = low > 8 ? low - 8 : 0;
    for (int i = threadIdx.x; i < kDigits; i += kThreads) sh.digit_amount[i] = 0;
    __syncthreads();
    visit(prefix, prefix | low_mask(low), [&](std::uint64_t key, std::uint32_t amount) {
      add_to_bin(sh.digit_amount, static_cast<std::uint32_t>(key >> shift) & (kDigits - 1), amount,
                 amount != 0);
    });
    __syncthreads();
    pick = pick_from_top(sh.digit_amount, kDigits, need, sh);
    prefix |= static_cast<std::uint64_t>(pick.bin) << shift;
    low = shift;
    need = pick.need;
  } while (low > 0 && pick.amount != need);
  Selected selected{prefix, need_in - need + pick.amount};
  if (low > 0) {  // every candidate under the prefix is needed: the cut is the lowest of them
    std::uint64_t lowest = ~std::uint64_t(0);
    visit(prefix, prefix | low_mask(low), [&](std::uint64_t key, std::uint32_t amount) {
      if (amount != 0 && key < lowest) lowest = key;
    });
    selected.key = block_min(lowest, sh);
  }
  return selected;
}

/// The lowest order key whose value weighs more than 0 against `max`, by a 32-way search in one
/// warp: a value weighs 0 exactly when its gap to the max, in the rounded steps weight() takes,
/// reaches 32 binary orders, and those steps never fall as the value rises.
__device__ std::uint32_t lowest_weighing_key(float max) {
  std::uint32_t lo = s::order_key(-std::numeric_limits<float>::infinity());
  std::uint32_t hi = s::order_key(max);  // weighs: the max itself
  while (lo < hi) {
    const std::uint32_t probe =
        lo + static_cast<std::uint32_t>((static_cast<std::uint64_t>(hi - lo) * (lane() + 1)) >> 5);
    // Lane 31 probes hi, so some lane weighs.
    const unsigned weighs = __ballot_sync(kFullWarp, s::weight(s::key_value(probe), max) != 0);
    const int first = __ffs(static_cast<int>(weighs)) - 1;
    const std::uint32_t at = __shfl_sync(kFullWarp, probe, first);
    const std::uint32_t below = __shfl_sync(kFullWarp, probe, first > 0 ? first - 1 : 0);
    if (first > 0) lo = below + 1;
    hi = at;
  }
  return hi;
}

}  // namespace freezeframe::model_kernels::sampler_block
