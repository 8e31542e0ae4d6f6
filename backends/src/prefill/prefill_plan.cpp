#include "prefill/prefill_plan.h"

#include <algorithm>
#include <cstring>

#include "freezeframe/base/error.h"
#include "prefill/prefill_params.h"

namespace freezeframe::prefill {

int max_plan_tiles(int num_tokens, int num_reqs) {
  return num_tokens / kPlanTileTokens + std::min(num_tokens, num_reqs);
}

std::size_t plan_bytes(const BatchLimits& limits) {
  return sizeof(PlanHeader) +
         sizeof(PlanTile) * std::size_t(max_plan_tiles(limits.max_num_tokens, limits.max_num_reqs));
}

void write_plan(const CommonAttentionMetadata& common, std::span<std::byte> slice) {
  // Written in place, without allocating: the hook runs on every step.
  const int num_reqs = static_cast<int>(common.seq_lens.size());
  auto new_tokens = [&](int r) {
    return common.query_start_loc[r + 1] - common.query_start_loc[r];
  };
  std::size_t multi = 0, single = 0;
  for (int r = 0; r < num_reqs; ++r) {
    const int q = new_tokens(r);
    if (q == 1) ++single;
    if (q >= 2) multi += (q + kPlanTileTokens - 1) / kPlanTileTokens;
  }
  const std::size_t need = sizeof(PlanHeader) + sizeof(PlanTile) * (multi + single);
  FF_CHECK(need <= slice.size(), ErrorCode::kInternal, "the prefill plan of ", multi + single,
           " tiles needs ", need, " bytes; its slice holds ", slice.size());
  FF_CHECK(reinterpret_cast<std::uintptr_t>(slice.data()) % alignof(PlanHeader) == 0,
           ErrorCode::kInternal, "the prefill plan's slice is not aligned");

  PlanHeader header;
  header.num_tiles = static_cast<std::int32_t>(multi);
  header.num_single_tiles = static_cast<std::int32_t>(single);
  header.padding_begin = common.query_start_loc.empty() ? 0 : common.query_start_loc.back();
  header.padding_end = common.num_tokens;
  std::memcpy(slice.data(), &header, sizeof header);
  auto* tiles = reinterpret_cast<PlanTile*>(slice.data() + sizeof header);
  // A request's first new token's position: under DCP given, else what its keys imply.
  const bool sharded = !common.dcp_context_lens.empty();
  FF_CHECK(!sharded || common.dcp_context_lens.size() >= std::size_t(num_reqs),
           ErrorCode::kInternal, "the step's DCP context lengths cover ",
           common.dcp_context_lens.size(), " of its ", num_reqs, " requests");
  auto context = [&](int r) {
    return sharded ? common.dcp_context_lens[r] : common.seq_lens[r] - new_tokens(r);
  };
  std::size_t m = 0, s = multi;
  for (int r = 0; r < num_reqs; ++r) {
    const int q = new_tokens(r);
    if (q == 1) tiles[s++] = {r, 0, context(r)};
    for (int t = 0; q >= 2 && t < q; t += kPlanTileTokens) tiles[m++] = {r, t, context(r)};
  }
  // Longest work first (key visits of a tile's last token: its position, plus one; under DCP
  // about a rank's share of that, the same order); ties in request and token order, so equal
  // steps give equal plans.
  auto work = [&](const PlanTile& tile) {
    return std::int64_t(tile.context) +
           std::min(new_tokens(tile.req), tile.token_begin + kPlanTileTokens);
  };
  std::sort(tiles, tiles + multi, [&](const PlanTile& a, const PlanTile& b) {
    const std::int64_t wa = work(a), wb = work(b);
    if (wa != wb) return wa > wb;
    return a.req != b.req ? a.req < b.req : a.token_begin < b.token_begin;
  });
}

}  // namespace freezeframe::prefill
