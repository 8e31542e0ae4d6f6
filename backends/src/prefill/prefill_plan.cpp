#include "prefill/prefill_plan.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "freezeframe/core/error.h"
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
  struct Work {
    PlanTile tile;
    std::int64_t keys;  // key visits of the tile's last token: its share of the work
  };
  std::vector<Work> work;
  std::vector<PlanTile> single;
  const int num_reqs = static_cast<int>(common.seq_lens.size());
  for (int r = 0; r < num_reqs; ++r) {
    const int q = common.query_start_loc[r + 1] - common.query_start_loc[r];
    if (q == 1) single.push_back({r, 0});
    if (q < 2) continue;
    const int context = common.seq_lens[r] - q;
    for (int t = 0; t < q; t += kPlanTileTokens) {
      work.push_back({{r, t}, std::int64_t(context) + std::min(q, t + kPlanTileTokens)});
    }
  }
  // Longest first; ties keep request order, so equal steps give equal plans.
  std::stable_sort(work.begin(), work.end(),
                   [](const Work& a, const Work& b) { return a.keys > b.keys; });

  PlanHeader header;
  header.num_tiles = static_cast<std::int32_t>(work.size());
  header.num_single_tiles = static_cast<std::int32_t>(single.size());
  header.padding_begin = common.query_start_loc.empty() ? 0 : common.query_start_loc.back();
  header.padding_end = common.num_tokens;
  const std::size_t count = work.size() + single.size();
  const std::size_t need = sizeof(PlanHeader) + sizeof(PlanTile) * count;
  FF_CHECK(need <= slice.size(), ErrorCode::kInternal, "the prefill plan of ", count,
           " tiles needs ", need, " bytes; its slice holds ", slice.size());
  std::memcpy(slice.data(), &header, sizeof header);
  auto* tiles = slice.data() + sizeof header;
  for (std::size_t i = 0; i < work.size(); ++i) {
    std::memcpy(tiles + i * sizeof(PlanTile), &work[i].tile, sizeof(PlanTile));
  }
  if (!single.empty()) {
    std::memcpy(tiles + work.size() * sizeof(PlanTile), single.data(),
                single.size() * sizeof(PlanTile));
  }
}

}  // namespace freezeframe::prefill
