#pragma once
// Parameters of the prefill attention kernel and the layout of its host-planned tile list
// (host-visible; the kernel is in prefill_kernel.cuh, the planner in prefill_plan.h).

#include <cstdint>

namespace freezeframe::prefill {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;
/// New tokens of one planned tile; the kernel cuts it into CTA tiles of (query rows of a tile) /
/// heads_per_tile tokens, so the plan does not depend on a layer's head counts.
inline constexpr int kPlanTileTokens = 128;
/// Query heads of one KV head a CTA tile packs (they share its K/V tiles): at most this many.
inline constexpr int kMaxHeadsPerTile = 16;
inline constexpr int kMaxHeads = 256;

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

struct PrefillParams {
  const void* q = nullptr;  // [rows, H, D]
  std::int64_t q_stride_token = 0, q_stride_head = 0;
  void* out = nullptr;  // [rows, H, D]
  std::int64_t out_stride_token = 0, out_stride_head = 0;
  float* lse = nullptr;  // natural log, [rows, H], when the caller wants it
  std::int64_t lse_stride_token = 0;
  // Keys and values: the paged cache halves when block_table is set (element (block, offset,
  // head, d) at block·stride_block + offset·stride_token + head·stride_head + d), else rows
  // [T, H_kv, D] where request r's key j is row kv_start[r] + j (stride_token, stride_head).
  const void* k = nullptr;
  const void* v = nullptr;
  std::int64_t stride_block = 0, stride_token = 0, stride_head = 0;
  const std::int32_t* block_table = nullptr;
  int block_table_stride = 0;
  int block_shift = 0;  // log2 of the block size (a power of two)
  const std::int32_t* kv_start = nullptr;
  const std::int32_t* query_start_loc = nullptr;
  const std::int32_t* seq_lens = nullptr;
  const void* plan = nullptr;  // PlanHeader, then PlanTile[num_tiles]
  int num_heads = 0, num_kv_heads = 0;
  int heads_per_tile_shift = 0;  // log2 of the query heads a CTA tile packs
  float q_scale = 1.0f;          // softmax scale × k dequantisation scale
  float v_scale = 1.0f;
  float softcap = 0.0f;
  int sliding_window = 0;
  // Decode context parallelism: the keys are this rank's shard of each sequence, and a query
  // at position pos sees its first dcp_shard_tokens(pos + 1, ...) (no window or ALiBi then).
  int dcp_world = 1, dcp_interleave_size = 1, dcp_rank = 0;
  bool causal = true;
  bool single_token_rows = false;  // attend single-token requests too (no decode kernel does)
  bool use_alibi = false;
  float alibi[kMaxHeads] = {};
};

}  // namespace freezeframe::prefill
