#pragma once
// Parameters of the paged decode kernels (host-visible; the kernels are in decode_kernel.cuh).

#include <cstdint>

#include "attention_io.h"

namespace freezeframe::paged_decode {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;
inline constexpr int kMaxHeads = kMaxAttentionHeads;
inline constexpr int kMaxSplits = 128;

/// What the decode kernel takes beyond the call's operands (AttentionIo; k and v are the paged
/// cache's halves).
struct DecodeParams : AttentionIo {
  float* partial_out = nullptr;  // [splits, rows, heads, D] f32, when num_splits > 1
  float* partial_lse = nullptr;  // [splits, rows, heads], natural log
  int num_reqs = 0;
  int num_rows = 0;
  int num_splits = 1;
};

}  // namespace freezeframe::paged_decode
