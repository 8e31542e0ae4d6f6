#pragma once
// The Hopper prefill kernel's items: the plan's tiles cut into CTA tiles (tokens × heads of one
// KV head), which CTA takes which, and what each one reads. Every warp of the CTA walks the
// same list (the producer, the consumers and the O storers each on their own).

#include <cstdint>

#include "freezeframe/backends/dcp_shard.h"
#include "prefill/prefill_params.h"

namespace freezeframe::prefill::sm90 {

/// One CTA tile: its request, tokens, heads and the K/V tiles it walks.
struct Work {
  int req, q_first, q_len, tok0, tok_end, kv_len, context, head0, kv_head;
  int kv_begin, kv_end, num_kv_tiles, always_first, always_last;
};

/// The plan's items for CTA tiles of kBlockM rows and K/V tiles of kBlockN keys.
template <int kBlockM, int kBlockN>
struct WorkList {
  const PrefillParams& p;
  const PlanTile* tiles;
  int hp_shift, tile_tokens, subtiles, head_groups, group_size, items;

  __device__ __forceinline__ WorkList(const PrefillParams& params, const PlanHeader& header)
      : p(params),
        tiles(reinterpret_cast<const PlanTile*>(static_cast<const std::uint8_t*>(p.plan) +
                                                sizeof(PlanHeader))),
        hp_shift(p.heads_per_tile_shift),
        tile_tokens(kBlockM >> hp_shift),
        subtiles(kPlanTileTokens / tile_tokens),
        head_groups(p.num_heads >> hp_shift),
        group_size(p.num_heads / p.num_kv_heads),
        items((header.num_tiles + (p.single_token_rows ? header.num_single_tiles : 0)) * subtiles *
              head_groups) {}

  /// The CTA's item in each round of gridDim.x items: the plan lists them longest first, and
  /// taking them in a snake (forward, then backward) evens out what the rounds give each CTA.
  __device__ __forceinline__ int item_of(int round) const {
    const int b = round & 1 ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    return round * int(gridDim.x) + b;
  }

  /// The first and last key a query at new token `tok` sees (under DCP: of the rank's shard).
  __device__ __forceinline__ int first_key(const Work& w, int tok) const {
    return p.sliding_window > 0 ? max(0, w.context + tok - p.sliding_window + 1) : 0;
  }
  __device__ __forceinline__ int last_key(const Work& w, int tok) const {
    const int pos = w.context + tok;
    if (p.causal) {
      return p.dcp_world > 1
                 ? dcp_shard_tokens(pos + 1, p.dcp_world, p.dcp_interleave_size, p.dcp_rank) - 1
                 : pos;
    }
    return p.sliding_window > 0 ? min(w.kv_len - 1, pos + p.sliding_window - 1) : w.kv_len - 1;
  }

  /// Item `item`'s CTA tile into `w`; false: an empty CTA tile (past the request's tokens).
  __device__ __forceinline__ bool work_of(int item, Work& w) const {
    const int head_group = item % head_groups;
    const int rest = item / head_groups;
    const PlanTile tile = tiles[rest / subtiles];
    w.req = tile.req;
    w.q_first = p.query_start_loc[w.req];
    w.q_len = p.query_start_loc[w.req + 1] - w.q_first;
    w.tok0 = tile.token_begin + (rest % subtiles) * tile_tokens;
    if (w.tok0 >= w.q_len) return false;
    w.tok_end = min(w.q_len, w.tok0 + tile_tokens);
    w.kv_len = p.seq_lens[w.req];
    w.context = tile.context;  // the position of the request's first new token
    w.head0 = head_group << hp_shift;
    w.kv_head = w.head0 / group_size;
    w.kv_begin = first_key(w, w.tok0) / kBlockN * kBlockN;
    w.kv_end = last_key(w, w.tok_end - 1) + 1;
    w.num_kv_tiles = (w.kv_end - w.kv_begin + kBlockN - 1) / kBlockN;
    w.always_first = first_key(w, w.tok_end - 1);
    w.always_last = last_key(w, w.tok0);
    return true;
  }

  /// Whether row m of the CTA tile is one of its tokens (rows past them are padding).
  __device__ __forceinline__ bool has_row(const Work& w, int m) const {
    return w.tok0 + (m >> hp_shift) < w.tok_end;
  }
  /// Element offset of row m's (token, head) in a tensor of the given strides.
  __device__ __forceinline__ std::int64_t row_offset(const Work& w, int m,
                                                     std::int64_t stride_token,
                                                     std::int64_t stride_head) const {
    return std::int64_t(w.q_first + w.tok0 + (m >> hp_shift)) * stride_token +
           std::int64_t(w.head0 + (m & ((1 << hp_shift) - 1))) * stride_head;
  }
};

}  // namespace freezeframe::prefill::sm90
