#pragma once
// Which tokens of a sequence one rank of a decode-context-parallel group holds, on the host and
// on the device. Token t lives on rank (t div I) mod W (W ranks, I consecutive tokens a rank in
// turn), so of a sequence's first L tokens rank r holds
//   base + clamp(rem − r·I, 0, I),  base = (L div (I·W))·I,  rem = L − base·W,
// and they are its first keys in position order: a query at position p sees the rank's first
// dcp_shard_tokens(p + 1, ...) keys, which is the causal mask over a shard. The one function
// for a rank's share of a length, everywhere (W = world_size, I = interleave_size, as the
// spec's dcp section and DcpGroup name them).

#if defined(__CUDACC__)
#define FF_DCP_SHARD_FN __host__ __device__
#else
#define FF_DCP_SHARD_FN
#endif

namespace freezeframe {

template <typename Int>
FF_DCP_SHARD_FN constexpr Int dcp_shard_tokens(Int length, int world_size, int interleave_size,
                                               int rank) {
  const Int i = interleave_size, w = world_size;
  const Int base = (length / (i * w)) * i;
  const Int rem = length - base * w - Int(rank) * i;
  return base + (rem < 0 ? Int(0) : (rem > i ? i : rem));
}

}  // namespace freezeframe

#undef FF_DCP_SHARD_FN
