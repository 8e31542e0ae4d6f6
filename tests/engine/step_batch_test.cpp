// engine/: validating a serving-loop step and padding its metadata.

#include <gtest/gtest.h>

#include <cmath>

#include "freezeframe/core/error.h"
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

}  // namespace
}  // namespace freezeframe
