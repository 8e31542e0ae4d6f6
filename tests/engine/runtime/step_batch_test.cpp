// engine/: validating a serving-loop step and padding its metadata.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/backends/dcp_shard.h"
#include "freezeframe/base/error.h"
#include "freezeframe/engine/runtime/step_batch.h"

namespace freezeframe {
namespace {

DeploymentLimits limits() {
  DeploymentLimits l;
  l.max_num_seqs = 8;
  l.max_num_batched_tokens = 64;
  l.max_model_len = 100;
  l.block_size = 16;
  l.num_blocks = 20;
  l.max_blocks_per_req = 7;
  return l;
}

// Two decodes (lengths 17 and 5) and a prefill chunk of 10 tokens after 20 of context.
struct Fixture {
  std::vector<std::int32_t> a = {7, 3}, b = {11}, c = {2, 0};
  StepBatch batch() const {
    StepBatch s;
    s.requests = {{1, 17, a}, {1, 5, b}, {10, 30, c}};
    return s;
  }
};

std::string message_of(const StepBatch& b) {
  try {
    (void)validate_step(b, limits());
  } catch (const Error& e) {
    return e.message();
  }
  return "accepted";
}

TEST(StepBatch, ShapeOfAValidStep) {
  Fixture f;
  const StepShape shape = validate_step(f.batch(), limits());
  EXPECT_EQ(shape.num_tokens, 12);
  EXPECT_EQ(shape.num_reqs, 3);
  EXPECT_EQ(shape.num_decodes, 2);
  EXPECT_FALSE(shape.uniform_decode);
  StepBatch decodes = f.batch();
  decodes.requests.pop_back();
  EXPECT_TRUE(validate_step(decodes, limits()).uniform_decode);
}

TEST(StepBatch, RejectsEachRuleWithTheRequestNamed) {
  Fixture f;
  StepBatch b = f.batch();
  b.requests[1].seq_len = 101;
  const std::vector<std::int32_t> long_table = {1, 2, 3, 4, 5, 6, 7};
  b.requests[1].block_ids = long_table;
  EXPECT_NE(message_of(b).find("request 1: seq_len 101 exceeds max_model_len 100"),
            std::string::npos)
      << message_of(b);
  b = f.batch();
  b.requests[2].query_len = 31;
  EXPECT_NE(message_of(b).find("request 2: query_len 31"), std::string::npos) << message_of(b);
  b = f.batch();
  std::swap(b.requests[0], b.requests[2]);
  EXPECT_NE(message_of(b).find("decodes come first"), std::string::npos) << message_of(b);
  b = f.batch();
  const std::vector<std::int32_t> short_table = {2};
  b.requests[2].block_ids = short_table;
  EXPECT_NE(message_of(b).find("request 2: seq_len 30 needs 2 blocks"), std::string::npos)
      << message_of(b);
  b = f.batch();
  const std::vector<std::int32_t> outside = {2, 20};
  b.requests[2].block_ids = outside;
  EXPECT_NE(message_of(b).find("block_ids[1] = 20 is outside"), std::string::npos) << message_of(b);
  EXPECT_NO_THROW((void)validate_step(b, limits(), /*check_block_ids=*/false));  // left to staging
  b = f.batch();
  b.requests.assign(9, b.requests[1]);
  EXPECT_NE(message_of(b).find("max_num_seqs = 8"), std::string::npos) << message_of(b);
  b = f.batch();
  b.requests[2].query_len = 30;
  b.requests[2].seq_len = 30;
  b.requests.push_back(b.requests[2]);
  b.requests.push_back(b.requests[2]);
  EXPECT_NE(message_of(b).find("max_num_batched_tokens = 64"), std::string::npos) << message_of(b);
}

TEST(StepBatch, GivenSlotMappingMustMatchTheBlockTables) {
  Fixture f;
  StepBatch b = f.batch();
  // Decode of length 17: position 16 is block 3's slot 0 = 48; length 5: position 4 = 11·16 + 4.
  std::vector<std::int64_t> slots = {48, 180};
  for (int pos = 20; pos < 30; ++pos)
    slots.push_back(std::int64_t(pos < 16 ? 2 : 0) * 16 + pos % 16);
  b.slot_mapping = slots;
  EXPECT_NO_THROW((void)validate_step(b, limits()));
  slots[5] += 1;
  EXPECT_NE(message_of(b).find(
                "slot_mapping[5] = 8 but request 2's block table puts position 23 in slot 7"),
            std::string::npos)
      << message_of(b);
}

TEST(StepBatch, SamplingParametersAreOnePerRequestAndInRange) {
  Fixture f;
  StepBatch b = f.batch();
  std::vector<SamplingParams> params(3, SamplingParams{0.8f, 40, 0.95f, 7});
  b.sampling = params;
  EXPECT_NO_THROW((void)validate_step(b, limits()));
  const std::vector<SamplingParams> two(2);
  b.sampling = two;
  EXPECT_NE(message_of(b).find("sampling has 2 entries for 3 requests"), std::string::npos)
      << message_of(b);
  b.sampling = params;
  params[1].temperature = -0.5f;
  EXPECT_NE(message_of(b).find("request 1: sampling.temperature: -0.5"), std::string::npos)
      << message_of(b);
  params[1] = {};
  params[2].top_k = -1;
  EXPECT_NE(message_of(b).find("request 2: sampling.top_k: -1 is negative"), std::string::npos)
      << message_of(b);
  params[2] = {};
  params[0].top_p = 1.25f;
  EXPECT_NE(message_of(b).find("request 0: sampling.top_p: 1.25 is not in (0, 1]"),
            std::string::npos)
      << message_of(b);
  params[0].top_p = std::nanf("");
  EXPECT_NE(message_of(b).find("request 0: sampling.top_p"), std::string::npos) << message_of(b);
}

TEST(StepBatch, MetadataIsPaddedWithEmptyRequestsAndSkippedSlots) {
  Fixture f;
  const StepShape shape = validate_step(f.batch(), limits());
  const StepMetadata m(f.batch(), shape, 16, 16, 5);
  const CommonAttentionMetadata c = m.common();
  EXPECT_EQ(c.num_tokens, 16);
  EXPECT_EQ(c.num_decodes, 2);
  EXPECT_EQ(std::vector<std::int32_t>(m.query_start_loc().begin(), m.query_start_loc().end()),
            (std::vector<std::int32_t>{0, 1, 2, 12, 12, 12}));
  EXPECT_EQ(std::vector<std::int32_t>(m.seq_lens().begin(), m.seq_lens().end()),
            (std::vector<std::int32_t>{17, 5, 30, 0, 0}));
  EXPECT_EQ(c.block_table_stride, 2);
  ASSERT_EQ(m.block_table_rows().size(), 5u);
  EXPECT_EQ(m.block_table_rows()[0][0], 7);
  EXPECT_EQ(m.block_table_rows()[0][1], 3);
  EXPECT_TRUE(c.block_table.empty());
  EXPECT_EQ(c.block_table_rows.size(), 5u);
  for (int r = 3; r < 5; ++r)
    EXPECT_TRUE(m.block_table_rows()[r].empty()) << "padded request " << r;
  EXPECT_EQ(m.slot_mapping()[0], 48);
  EXPECT_EQ(m.slot_mapping()[1], 11 * 16 + 4);
  EXPECT_EQ(m.slot_mapping()[2], 0 * 16 + 4) << "position 20 is block c[1] = 0, offset 4";
  for (int row = 12; row < 16; ++row) EXPECT_EQ(m.slot_mapping()[row], -1) << row;
  EXPECT_THROW(StepMetadata(f.batch(), shape, 16, 11, 3), Error);
}

// Each DCP rank's view of a decode step against brute force over every position: a rank's
// sequence length counts the positions it holds ((p div I) mod D), its positions fill the
// physical blocks of the virtual block table's ids in order (the k-th position it holds sits
// at offset k of the table's block k div block_size), the new token's slot is there on its
// owner and −1 elsewhere, and every position has exactly one owner; many (D, I, block size).
TEST(StepBatch, EachDcpRankSeesItsShardOfADecodeStep) {
  std::mt19937 rng(5);
  for (const int world : {1, 2, 3, 4, 8}) {
    for (const int block : {1, 4, 16}) {
      for (const int interleave : {1, 2, 4, 16}) {
        if (block % interleave != 0) continue;
        const DcpSharding dcp{world, interleave, block};
        DeploymentLimits l = limits();
        l.block_size = block;
        l.max_model_len = 300;
        l.num_blocks = 4096;  // 8 tables of up to 300 ids (blocks of 1, one rank)
        // Decodes of random lengths, some shorter than D · I (empty shards), over distinct ids.
        std::vector<std::vector<std::int32_t>> tables;
        std::vector<std::int32_t> ids(4096);
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        std::size_t next = 0;
        StepBatch batch;
        std::vector<int> lengths;
        std::uniform_int_distribution<int> length(1, 300);
        for (int r = 0; r < 8; ++r) {
          lengths.push_back(r < 2 ? 1 + r : length(rng));
          const auto blocks = static_cast<std::size_t>(dcp.table_width(lengths.back()));
          tables.emplace_back(ids.begin() + next, ids.begin() + next + blocks);
          next += blocks;
        }
        for (int r = 0; r < 8; ++r) batch.requests.push_back({1, lengths[r], tables[r]});
        const StepShape shape = validate_step(batch, l, dcp);
        std::vector<std::vector<int>> owners(8);
        for (int r = 0; r < 8; ++r) owners[r].assign(lengths[r], 0);
        for (int rank = 0; rank < world; ++rank) {
          StepMetadata m;
          m.assign(batch, shape, dcp, rank, 8, 8);
          for (int r = 0; r < 8; ++r) {
            SCOPED_TRACE("D " + std::to_string(world) + ", I " + std::to_string(interleave) +
                         ", block " + std::to_string(block) + ", rank " + std::to_string(rank) +
                         ", request " + std::to_string(r) + " of length " +
                         std::to_string(lengths[r]));
            int held = 0;
            std::int64_t want_slot = -1;
            for (int p = 0; p < lengths[r]; ++p) {
              if ((p / interleave) % world != rank) continue;
              ++owners[r][p];
              if (p == lengths[r] - 1) {
                want_slot = std::int64_t(tables[r][held / block]) * block + held % block;
              }
              ++held;
            }
            ASSERT_EQ(m.seq_lens()[r], held);
            ASSERT_EQ(m.slot_mapping()[r], want_slot);
            ASSERT_EQ(m.block_table_rows()[r].data(), tables[r].data());
          }
        }
        for (int r = 0; r < 8; ++r) {
          for (int p = 0; p < lengths[r]; ++p) ASSERT_EQ(owners[r][p], 1) << r << " " << p;
        }
      }
    }
  }
}

// A mixed step under DCP as each rank attends it: every row against the rank's shard of its
// whole sequence, new tokens included, with each request's context length in the sequence for
// the prefill rows' causal mask. Against brute force over every position: each position on
// exactly one rank, each owned new token's slot, and the shard's keys a query at each new
// position sees (dcp_shard_tokens of its position + 1) are the rank's positions up to it.
TEST(StepBatch, EachDcpRankSeesItsShardOfTheWholeSequence) {
  std::mt19937 rng(11);
  for (const int world : {1, 2, 4}) {
    for (const int block : {1, 4, 16}) {
      for (const int interleave : {1, 4, 16}) {
        if (block % interleave != 0) continue;
        const DcpSharding dcp{world, interleave, block};
        DeploymentLimits l = limits();
        l.block_size = block;
        l.max_model_len = 300;
        l.max_num_batched_tokens = 512;
        l.max_num_seqs = 8;
        l.num_blocks = 4096;
        std::vector<std::int32_t> ids(4096);
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        // Two decodes (one of a sequence of 1), then prefill chunks, one from position 0.
        const std::vector<std::pair<int, int>> shape_of = {{1, 1},    {1, 77},  {5, 5},
                                                           {40, 300}, {17, 60}, {2, 33}};
        std::vector<std::vector<std::int32_t>> tables;
        std::size_t next = 0;
        StepBatch batch;
        for (const auto& [q, len] : shape_of) {
          const auto n = static_cast<std::size_t>(dcp.table_width(len));
          tables.emplace_back(ids.begin() + next, ids.begin() + next + n);
          next += n;
        }
        for (std::size_t r = 0; r < shape_of.size(); ++r) {
          batch.requests.push_back({shape_of[r].first, shape_of[r].second, tables[r]});
        }
        const StepShape shape = validate_step(batch, l, dcp);
        const int reqs = static_cast<int>(shape_of.size());
        std::vector<std::vector<int>> owners(shape_of.size());
        for (int rank = 0; rank < world; ++rank) {
          StepMetadata m;
          m.assign(batch, shape, dcp, rank, shape.num_tokens + 3, reqs + 1);
          const CommonAttentionMetadata common = m.common();
          ASSERT_EQ(common.dcp_context_lens.size(), world > 1 ? std::size_t(reqs + 1) : 0u);
          int row = 0;
          for (int r = 0; r < reqs; ++r) {
            const auto [q, len] = shape_of[r];
            SCOPED_TRACE("D " + std::to_string(world) + ", I " + std::to_string(interleave) +
                         ", block " + std::to_string(block) + ", rank " + std::to_string(rank) +
                         ", request " + std::to_string(r));
            owners[r].resize(static_cast<std::size_t>(len));
            int held = 0;
            std::vector<std::int64_t> want(static_cast<std::size_t>(q), -1);
            for (int p = 0; p < len; ++p) {
              if ((p / interleave) % world != rank) continue;
              ++owners[r][p];
              if (p >= len - q) {
                want[p - (len - q)] = std::int64_t(tables[r][held / block]) * block + held % block;
              }
              ++held;
            }
            ASSERT_EQ(m.seq_lens()[r], held);
            if (world > 1) {
              ASSERT_EQ(common.dcp_context_lens[r], len - q);
            }
            // The keys a new token at position p sees on this rank: its positions ≤ p.
            for (int p = len - q; p < len; ++p) {
              int before = 0;
              for (int k = 0; k <= p; ++k) before += (k / interleave) % world == rank ? 1 : 0;
              ASSERT_EQ(dcp_shard_tokens(p + 1, world, interleave, rank), before) << p;
            }
            for (int j = 0; j < q; ++j, ++row) ASSERT_EQ(m.slot_mapping()[row], want[j]) << j;
          }
          EXPECT_EQ(m.seq_lens()[reqs], 0) << "a padded request";
          for (int t = shape.num_tokens; t < shape.num_tokens + 3; ++t) {
            EXPECT_EQ(m.slot_mapping()[t], -1) << "a padded row";
          }
        }
        for (int r = 0; r < reqs; ++r) {
          for (std::size_t p = 0; p < owners[r].size(); ++p) ASSERT_EQ(owners[r][p], 1);
        }
      }
    }
  }
}

// Under DCP a step's block tables count virtual blocks and a slot mapping is refused (each
// rank derives its own).
TEST(StepBatch, DcpStepsAreCheckedInVirtualBlocks) {
  const DcpSharding dcp{4, 2, 16};
  DeploymentLimits l = limits();
  const std::vector<std::int32_t> one = {3};
  StepBatch b;
  b.requests = {{1, 64, one}};  // 64 positions: one virtual block of 4 · 16
  EXPECT_EQ(validate_step(b, l, dcp).num_reqs, 1);
  b.requests = {{1, 65, one}};
  std::string m;
  try {
    (void)validate_step(b, l, dcp);
  } catch (const Error& e) {
    m = e.message();
  }
  EXPECT_NE(m.find("request 0: seq_len 65 needs 2 blocks of 64 (virtual blocks of the DCP "
                   "ranks), its block table has 1"),
            std::string::npos)
      << m;
  b.requests = {{1, 64, one}};
  const std::vector<std::int64_t> slots = {5};
  b.slot_mapping = slots;
  EXPECT_THROW((void)validate_step(b, l, dcp), Error);
}

}  // namespace
}  // namespace freezeframe
