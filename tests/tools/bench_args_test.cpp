// tools/: what `freezeframe bench --prefill` reads and checks before it needs a GPU: the list of
// prefill shapes, the spec's limits they must fit, and the model FLOPs of each.

#include <gtest/gtest.h>

#include <string>

#include "arguments.h"
#include "freezeframe/base/error.h"
#include "freezeframe/engine/spec/deployment.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/serving/step_work.h"
#include "prefill_shapes.h"
#include "step_flops.h"

namespace freezeframe::tools {
namespace {

#define EXPECT_CONTAINS(text, fragment)               \
  EXPECT_NE((text).find(fragment), std::string::npos) \
      << "expected: " << (fragment) << "\ngot: " << (text)

constexpr const char* kSpec = R"(model:
  name: small
  num_layers: 4
  hidden_size: 512
  num_heads: 8
  num_kv_heads: 2
  head_size: 64
  intermediate_size: 1408
  vocab_size: 32000
  max_position_embeddings: 4096
scheduler:
  max_num_seqs: 64
  max_num_batched_tokens: 2048
)";

std::string usage_error(std::string_view list) {
  try {
    (void)parse_prefill_shapes("--prefill", list);
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: '" << list << "'";
  return {};
}

std::string refusal(const PrefillShape& shape, std::int64_t context, std::int32_t blocks = 0) {
  const EngineSpec spec = parse_spec(kSpec, "small.yaml");
  DeploymentLimits limits = DeploymentGeometry::of(spec).limits;
  limits.num_blocks = blocks;
  try {
    check_prefill_shape(shape, context, limits, spec);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.message();
  }
  ADD_FAILURE() << "accepted " << shape.b << "x" << shape.n << " after " << context;
  return {};
}

TEST(BenchPrefill, ReadsAListOfShapes) {
  const auto shapes = parse_prefill_shapes("--prefill", "1x8192,4x2048,16x512,64x128");
  ASSERT_EQ(shapes.size(), 4u);
  EXPECT_EQ(shapes[0].b, 1);
  EXPECT_EQ(shapes[0].n, 8192);
  EXPECT_EQ(shapes[3].b, 64);
  EXPECT_EQ(shapes[3].n, 128);
}

TEST(BenchPrefill, RefusesMalformedListsAsUsageErrors) {
  EXPECT_CONTAINS(usage_error(""), "--prefill: '' is not BxN");
  EXPECT_CONTAINS(usage_error("4*8"), "--prefill: '4*8' is not BxN");
  EXPECT_CONTAINS(usage_error("1x8,,2x4"), "--prefill: '' is not BxN");
  EXPECT_CONTAINS(usage_error("1x8,"), "--prefill: '' is not BxN");
  EXPECT_CONTAINS(usage_error("4x"), "--prefill 4x: N: '' is not a whole number");
  EXPECT_CONTAINS(usage_error("x4"), "--prefill x4: B: '' is not a whole number");
  EXPECT_CONTAINS(usage_error("0x8"), "--prefill 0x8: B: '0' is not a whole number from 1");
  EXPECT_CONTAINS(usage_error("4x-8"), "N: '-8' is not a whole number");
  EXPECT_CONTAINS(usage_error("4x2x3"), "N: '2x3' is not a whole number");
  EXPECT_CONTAINS(usage_error("3000000000x1"), "B: '3000000000' is not a whole number");
}

TEST(BenchPrefill, RefusesShapesPastTheSpecsLimitsNamingTheField) {
  std::string m = refusal({128, 8}, 0);
  EXPECT_CONTAINS(m, "--prefill 128x8: 128 requests in one step; the spec allows 64");
  EXPECT_CONTAINS(m, "small.yaml:12:");
  EXPECT_CONTAINS(m, "scheduler.max_num_seqs");
  m = refusal({4, 1024}, 0);
  EXPECT_CONTAINS(m, "4096 new tokens in one step; the spec allows 2048");
  EXPECT_CONTAINS(m, "small.yaml:13:");
  EXPECT_CONTAINS(m, "scheduler.max_num_batched_tokens");
  m = refusal({1, 2048}, 3000);
  EXPECT_CONTAINS(m, "after 3000 cached tokens (--prefill-context)");
  EXPECT_CONTAINS(m, "sequences of 5048 tokens; the spec allows 4096");
  EXPECT_CONTAINS(m, "scheduler.max_model_len");
  // Once planned, the KV blocks: 16 requests of 128 + 64 tokens need 12 blocks of 16 each.
  m = refusal({16, 128}, 64, 100);
  EXPECT_CONTAINS(m, "192 KV blocks of 16 tokens; the plan has 100");
  EXPECT_CONTAINS(m, "cache.memory_budget");
  const EngineSpec spec = parse_spec(kSpec, "small.yaml");
  DeploymentLimits limits = DeploymentGeometry::of(spec).limits;
  limits.num_blocks = 192;
  EXPECT_NO_THROW(check_prefill_shape({16, 128}, 64, limits, spec));
}

TEST(BenchPrefill, CountsTheModelFlopsOfAStep) {
  const EngineSpec spec = parse_spec(kSpec, "small.yaml");
  // Per layer: qkv (8 + 2·2)·64 × 512, o 512 × 512, gate_up 2·1408 × 512, down 512 × 1408.
  const double layer = (8 + 4) * 64 * 512.0 + 512 * 512.0 + 2 * 1408 * 512.0 + 512 * 1408.0;
  const StepFlops f = prefill_flops(spec, 2, 100, 50);
  EXPECT_DOUBLE_EQ(f.dense, 2 * 4 * layer * 200 + 2 * 32000 * 512.0 * 2);
  // 4·H·D per query-key pair; 100 queries after 50 tokens see 51..150 keys.
  EXPECT_DOUBLE_EQ(f.attention, 4 * 8 * 64.0 * 4 * 2 * double(causal_pairs(50, 100)));
  EXPECT_EQ(causal_pairs(50, 100), 100 * 50 + 100 * 101 / 2);
}

}  // namespace
}  // namespace freezeframe::tools
