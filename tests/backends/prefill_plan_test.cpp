// The prefill kernel's host-planned tile list: every new token of every prefill request in
// exactly one planned tile, longest work first, decodes left out, padding recorded, and the
// plan within plan_bytes() for the largest step the limits allow.

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "freezeframe/base/error.h"
#include "prefill/prefill_params.h"
#include "prefill/prefill_plan.h"

namespace freezeframe {
namespace {

using prefill::PlanHeader;
using prefill::PlanTile;

struct Plan {
  PlanHeader header;
  std::vector<PlanTile> tiles;
};

Plan plan_of(const std::vector<std::int32_t>& query_start_loc,
             const std::vector<std::int32_t>& seq_lens, int num_decodes, int num_tokens,
             const std::vector<std::int32_t>& dcp_context_lens = {}) {
  CommonAttentionMetadata c;
  c.query_start_loc = query_start_loc;
  c.seq_lens = seq_lens;
  c.dcp_context_lens = dcp_context_lens;
  c.num_decodes = num_decodes;
  c.num_tokens = num_tokens;
  // The limits of the largest such step: its request count and rows.
  const BatchLimits limits{.max_num_reqs = static_cast<int>(seq_lens.size()),
                           .max_num_tokens = num_tokens};
  std::vector<std::byte> bytes(prefill::plan_bytes(limits));
  prefill::write_plan(c, bytes);
  Plan p;
  std::memcpy(&p.header, bytes.data(), sizeof p.header);
  p.tiles.resize(p.header.num_tiles + p.header.num_single_tiles);
  std::memcpy(p.tiles.data(), bytes.data() + sizeof p.header, p.tiles.size() * sizeof(PlanTile));
  return p;
}

TEST(PrefillPlan, CoversEveryPrefillTokenOnceLongestFirst) {
  // Two decodes, then prefills of 300 new tokens over 700 cached, 1 token (a decode-like row
  // after the decodes), 129 new, 2 new over 5000 cached; 7 padding rows.
  const std::vector<std::int32_t> qsl = {0, 1, 2, 302, 303, 432, 434};
  const std::vector<std::int32_t> seq = {50, 80, 1000, 9, 129, 5002};
  Plan p = plan_of(qsl, seq, 2, 441);
  EXPECT_EQ(p.header.padding_begin, 434);
  EXPECT_EQ(p.header.padding_end, 441);

  std::map<int, std::vector<int>> covered;  // request → its tiles' first tokens
  // Single-token requests come last, one tile each, outside num_tiles.
  EXPECT_EQ(p.header.num_single_tiles, 3);
  ASSERT_EQ(p.tiles.size(), 9u);
  EXPECT_EQ(p.tiles[6].req, 0);
  EXPECT_EQ(p.tiles[7].req, 1);
  EXPECT_EQ(p.tiles[8].req, 3);
  p.tiles.resize(p.header.num_tiles);
  covered.clear();
  for (const PlanTile& t : p.tiles) covered[t.req].push_back(t.token_begin);
  EXPECT_EQ(covered[2], (std::vector<int>{256, 128, 0}));  // 300 tokens: three tiles
  EXPECT_EQ(covered[4], (std::vector<int>{128, 0}));       // 129 tokens: two
  EXPECT_EQ(covered[5], (std::vector<int>{0}));
  ASSERT_EQ(p.tiles.size(), 6u);
  // Work = context + the tile's last new token: 5002, 1000, 700+256, 700+128, 129, 128.
  EXPECT_EQ(p.tiles[0].req, 5);
  EXPECT_EQ(p.tiles[1].req, 2);
  EXPECT_EQ(p.tiles[1].token_begin, 256);
  EXPECT_EQ(p.tiles[4].req, 4);
  EXPECT_EQ(p.tiles[4].token_begin, 128);
  // Each tile carries its request's first new token's position: seq_len − new tokens.
  for (const PlanTile& t : p.tiles) {
    EXPECT_EQ(t.context, seq[t.req] - (qsl[t.req + 1] - qsl[t.req])) << "request " << t.req;
  }
}

// Under DCP seq_lens count a rank's keys, and the positions come from the whole sequences.
TEST(PrefillPlan, UnderDcpTilesCarryTheSequencePositions) {
  // A decode, then 300 new tokens after 700 (the rank holds 500 of the 1000), 40 fresh (20).
  const std::vector<std::int32_t> qsl = {0, 1, 301, 341};
  const Plan p = plan_of(qsl, {25, 500, 20}, 1, 341, {48, 700, 0});
  ASSERT_EQ(p.header.num_tiles, 4);
  for (int i = 0; i < p.header.num_tiles; ++i) {
    const PlanTile& t = p.tiles[i];
    EXPECT_EQ(t.context, t.req == 1 ? 700 : 0) << "tile " << i;
  }
  EXPECT_EQ(p.tiles[4].req, 0);
  EXPECT_EQ(p.tiles[4].context, 48);
  // The order follows the positions: request 1's last tile (700 + 300) first, request 2 last.
  EXPECT_EQ(p.tiles[0].req, 1);
  EXPECT_EQ(p.tiles[0].token_begin, 256);
  EXPECT_EQ(p.tiles[3].req, 2);
}

TEST(PrefillPlan, LargestStepFitsItsBytes) {
  // The most tiles: as many two-token requests as the rows allow.
  const int rows = 1000;
  std::vector<std::int32_t> qsl = {0}, seq;
  for (int r = 0; r < rows / 2; ++r) {
    qsl.push_back(qsl.back() + 2);
    seq.push_back(2);
  }
  const Plan p = plan_of(qsl, seq, 0, rows);
  EXPECT_EQ(p.header.num_tiles, rows / 2);
  EXPECT_LE(p.header.num_tiles, prefill::max_plan_tiles(rows, rows / 2));
  // As many single-token requests as rows: all in the plan, within its bytes.
  std::vector<std::int32_t> ones_qsl = {0}, ones_seq;
  for (int r = 0; r < 64; ++r) {
    ones_qsl.push_back(r + 1);
    ones_seq.push_back(9);
  }
  const Plan ones = plan_of(ones_qsl, ones_seq, 64, 64);
  EXPECT_EQ(ones.header.num_single_tiles, 64);
  // One request of every row.
  const Plan one = plan_of({0, rows}, {rows}, 0, rows);
  EXPECT_EQ(one.header.num_tiles, (rows + prefill::kPlanTileTokens - 1) / prefill::kPlanTileTokens);
}

TEST(PrefillPlan, DecodeOnlyStepPlansSingleTilesOnly) {
  const Plan p = plan_of({0, 1, 2, 3}, {10, 20, 30}, 3, 4);
  EXPECT_EQ(p.header.num_tiles, 0);
  EXPECT_EQ(p.header.num_single_tiles, 3);
  EXPECT_EQ(p.header.padding_begin, 3);
  EXPECT_EQ(p.header.padding_end, 4);
}

}  // namespace
}  // namespace freezeframe
