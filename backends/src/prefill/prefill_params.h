#pragma once
// Parameters of the prefill attention kernel and the layout of its host-planned tile list
// (host-visible; the kernel is in prefill_kernel.cuh, the planner in prefill_plan.h).

#include <cstdint>

#include "attention_io.h"

namespace freezeframe::prefill {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;
/// New tokens of one planned tile; the kernel cuts it into CTA tiles of (query rows of a tile) /
/// heads_per_tile tokens, so the plan does not depend on a layer's head counts.
inline constexpr int kPlanTileTokens = 128;
/// Query heads of one KV head a CTA tile packs (they share its K/V tiles): at most this many.
inline constexpr int kMaxHeadsPerTile = 16;
inline constexpr int kMaxHeads = kMaxAttentionHeads;

/// The plan's head: its tile counts and the padding rows the kernel zeroes. The tiles of
/// requests with two or more new tokens come first; then one tile per single-token request,
/// which only attention without a decode kernel (encoder self-attention) reads.
struct PlanHeader {
  std::int32_t num_tiles = 0;         ///< tiles of requests with ≥ 2 new tokens
  std::int32_t num_single_tiles = 0;  ///< then: single-token requests' tiles
  std::int32_t padding_begin = 0;     ///< first row past the last request's tokens
  std::int32_t padding_end = 0;       ///< the step's rows (padded)
};

/// kPlanTileTokens new tokens of request `req` from its new token `token_begin`; the plan lists
/// them longest work first (LPT), so the persistent CTAs that take them in turn finish together.
/// `context`: the position of the request's first new token in its sequence (under DCP the
/// keys are a shard, whose length does not tell it).
struct PlanTile {
  std::int32_t req = 0;
  std::int32_t token_begin = 0;
  std::int32_t context = 0;
};

/// What the prefill kernels take beyond the call's operands (AttentionIo).
struct PrefillParams : AttentionIo {
  /// Keys as rows (no block table): request r's key j is row kv_start[r] + j.
  const std::int32_t* kv_start = nullptr;
  const void* plan = nullptr;    // PlanHeader, then PlanTile[num_tiles]
  int heads_per_tile_shift = 0;  // log2 of the query heads a CTA tile packs
  // Decode context parallelism: the keys are this rank's shard of each sequence, and a query
  // at position pos sees its first dcp_shard_tokens(pos + 1, ...) (no window or ALiBi then).
  int dcp_world = 1, dcp_interleave_size = 1, dcp_rank = 0;
  bool causal = true;
  bool single_token_rows = false;  // attend single-token requests too (no decode kernel does)
};

}  // namespace freezeframe::prefill
