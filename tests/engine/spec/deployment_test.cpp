// engine/: the deployment geometry, derived once from a spec, and the plan's use of it.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/backends/dcp_shard.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/base/error.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/spec/deployment.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe {
namespace {

const std::string kConfigs = FREEZEFRAME_SOURCE_DIR "/configs/";
constexpr std::int64_t GiB = std::int64_t(1) << 30;

TEST(DeploymentGeometry, DenseModel) {
  const EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  const DeploymentGeometry g = DeploymentGeometry::of(spec);
  EXPECT_EQ(g.kv.num_kv_heads, 8);
  EXPECT_EQ(g.kv.head_width, 128);
  EXPECT_FALSE(g.kv.latent);
  EXPECT_EQ(g.kv.dtype, DType::kBF16);
  EXPECT_EQ(g.rank, RankView{}) << "one GPU: rank 0 of groups of one";
  EXPECT_EQ(g.limits.max_num_seqs, 256);
  EXPECT_EQ(g.limits.max_num_batched_tokens, 8192);
  EXPECT_EQ(g.limits.max_model_len, 131072);
  EXPECT_EQ(g.limits.max_blocks_per_req, 131072 / 16);
  EXPECT_EQ(g.limits.num_blocks, 0) << "until planned";
  EXPECT_EQ(g.limits.vocab_size, 128256);

  const BatchLimits b = g.with_num_blocks(1000).batch_limits();
  EXPECT_EQ(b.max_num_reqs, 256);
  EXPECT_EQ(b.max_num_tokens, 8192);
  EXPECT_EQ(b.max_blocks_per_req, 8192);
  EXPECT_EQ(b.block_size, 16);
  EXPECT_EQ(b.num_blocks, 1000);
}

TEST(DeploymentGeometry, LatentCacheOfAnMlaModel) {
  const DeploymentGeometry g =
      DeploymentGeometry::of(load_spec(kConfigs + "deepseek-v2-lite.yaml"));
  EXPECT_TRUE(g.kv.latent);
  EXPECT_EQ(g.kv.num_kv_heads, 1);
  EXPECT_EQ(g.kv.head_width, 512 + 64) << "kv_lora_rank + qk_rope_head_dim";
}

TEST(DeploymentGeometry, DcpRowsCoverThisRanksShare) {
  EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  spec.dcp.world_size = 4;
  spec.dcp.interleave_size = 16;
  const DeploymentGeometry g = DeploymentGeometry::of(spec, 0, 3);
  EXPECT_EQ(g.rank.dcp_world_size, 4);
  EXPECT_EQ(g.rank.dcp_rank, 3);
  EXPECT_EQ(g.limits.max_blocks_per_req, 131072 / 4 / 16);
  EXPECT_EQ(dcp_shard_tokens<std::int64_t>(100, g.rank.dcp_world_size, g.rank.dcp_interleave_size,
                                           g.rank.dcp_rank),
            16)
      << "100 = 64 + 16 + 16 + 4: rank 3 holds 16 of the first 64";
  EXPECT_THROW((void)DeploymentGeometry::of(spec, 0, 4), Error) << "rank 4 of 4";
}

TEST(DeploymentGeometry, BlockIdsAre32Bit) {
  const DeploymentGeometry g = DeploymentGeometry::of(load_spec(kConfigs + "llama-3.1-8b.yaml"));
  EXPECT_EQ(g.with_num_blocks(kMaxKvBlocks).limits.num_blocks, 0x7fffffff);
  EXPECT_THROW((void)g.with_num_blocks(kMaxKvBlocks + 1), Error);
}

// A tiny model under a huge budget: the cache would take more blocks than 32-bit ids name.
TEST(MemoryPlanner, CapsTheCacheAtTheLargestBlockId) {
  const EngineSpec spec = parse_spec(R"(model:
  name: small
  num_layers: 1
  hidden_size: 64
  num_heads: 1
  head_size: 64
  mlp: none
  vocab_size: 16
  max_position_embeddings: 64
cache:
  block_size: 1
)");
  const std::int64_t device = std::int64_t(1) << 50;  // 1 PiB
  const MemoryPlan plan = plan_memory(spec, device);
  EXPECT_EQ(plan.kv_cache.num_blocks, kMaxKvBlocks);
  ASSERT_EQ(plan.warnings.size(), 1u);
  EXPECT_NE(plan.warnings[0].find("block ids are 32-bit"), std::string::npos) << plan.warnings[0];
  const DeploymentGeometry g =
      DeploymentGeometry::of(spec).with_num_blocks(plan.kv_cache.num_blocks);
  EXPECT_EQ(g.limits.num_blocks, 0x7fffffff);
}

// The planner asks each layer's backend for its workspace, given the device's properties: it
// names no backend, and the same properties give the same plan with or without a GPU.
class SizedBackend final : public AttentionBackend {
 public:
  std::string_view name() const override { return "workspace_probe"; }
  bool is_mla() const override { return false; }
  GraphSupport graph_support() const override { return GraphSupport::kAlways; }
  std::vector<std::int64_t> kv_cache_shape(std::int64_t blocks, int block_size, int heads,
                                           int head_size, DType) const override {
    return {2, blocks, block_size, heads, head_size};
  }
  std::vector<int> kv_cache_stride_order() const override { return {0, 1, 2, 3, 4}; }
  bool accept_output_buffer() const override { return true; }
  bool supports_quant_query_input() const override { return false; }
  std::span<const int> supported_head_sizes() const override { return kSizes; }
  std::span<const DType> supported_kv_cache_dtypes() const override { return kDTypes; }
  std::unique_ptr<AttentionImpl> make_impl(const AttentionParams& p, DcpGroup dcp) const override {
    return find_backend("reference").make_impl(p, dcp);
  }
  std::size_t workspace_bytes(const AttentionParams& params, const BatchLimits& limits,
                              const DeviceProperties& device) const override {
    return std::size_t(1000) * device.sm_count + limits.max_num_tokens + params.num_heads;
  }

 private:
  static constexpr int kSizes[] = {128};
  static constexpr DType kDTypes[] = {DType::kBF16};
};

TEST(MemoryPlanner, WorkspacesAreWhatBackendsStateForTheDevice) {
  if (!BackendRegistry::global().contains("workspace_probe")) {
    BackendRegistry::global().add(std::make_unique<SizedBackend>());
  }
  EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  for (LayerSpec& layer : spec.model.layers) layer.backend = "workspace_probe";
  DeviceProperties h200 = DeviceProperties::h200(), half = h200;
  half.sm_count = 66;
  const MemoryPlan a = plan_memory(spec, 141 * GiB, h200);
  const MemoryPlan b = plan_memory(spec, 141 * GiB, half);
  EXPECT_EQ(a.region("attention_workspace").bytes, 132'000 + 8192 + 32);
  EXPECT_EQ(b.region("attention_workspace").bytes, 66'000 + 8192 + 32);
  EXPECT_EQ(plan_memory(spec, 141 * GiB).region("attention_workspace").bytes,
            a.region("attention_workspace").bytes)
      << "without properties the plan assumes an H200";
}

TEST(MemoryPlanner, PagedDecodeWorkspaceFollowsTheSmCountOnly) {
  EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  for (LayerSpec& layer : spec.model.layers) layer.backend = "paged_decode";
  DeviceProperties props = DeviceProperties::h200();
  const std::int64_t h200 = plan_memory(spec, 141 * GiB, props).region("attention_workspace").bytes;
  props.name = "another name, same SMs";
  props.total_memory = 80 * GiB;
  EXPECT_EQ(plan_memory(spec, 141 * GiB, props).region("attention_workspace").bytes, h200);
  props.sm_count = 264;
  EXPECT_GT(plan_memory(spec, 141 * GiB, props).region("attention_workspace").bytes, h200)
      << "more SMs allow more splits at large batches";
}

// The DCP layout against brute force: for many (world, interleave, block size, length),
// placing every position of a sequence token by token. Each rank's positions, in order, must
// fill its own blocks in order (the k-th position a rank holds is at block k div block_size,
// offset k mod block_size of its row), so its local length is what dcp_shard_tokens says,
// slots are distinct and in range, and the row is table_width long.
TEST(DcpSharding, MatchesPlacingEveryTokenInTurn) {
  std::mt19937 rng(17);
  int cases = 0;
  for (const int world : {1, 2, 3, 4, 8}) {
    for (const int interleave : {1, 2, 4, 16}) {
      for (const int block_size : {16, 32, 64}) {
        if (block_size % interleave != 0) continue;
        const DcpSharding d{world, interleave, block_size};
        for (const std::int64_t length : {1, 2, 7, 15, 16, 17, 63, 64, 65, 100, 1000, 4097}) {
          const std::int64_t width = d.table_width(length);
          EXPECT_EQ(width, (length + std::int64_t(block_size) * world - 1) /
                               (std::int64_t(block_size) * world));
          // Virtual block ids: distinct, shuffled.
          std::vector<std::int32_t> blocks(static_cast<std::size_t>(width));
          std::iota(blocks.begin(), blocks.end(), 100);
          std::shuffle(blocks.begin(), blocks.end(), rng);
          std::vector<std::int64_t> held(world, 0);
          for (std::int64_t p = 0; p < length; ++p) {
            const int owner = static_cast<int>((p / interleave) % world);
            ASSERT_EQ(d.owner(p), owner);
            for (int r = 0; r < world; ++r) {
              const std::int64_t slot = d.slot(blocks.data(), p, r);
              if (r != owner) {
                ASSERT_EQ(slot, -1) << "rank " << r << " does not hold position " << p;
                continue;
              }
              // The k-th position this rank holds: block k div block_size of its row.
              const std::int64_t k = held[r]++;
              const std::int64_t want =
                  std::int64_t(blocks[k / block_size]) * block_size + k % block_size;
              ASSERT_EQ(slot, want) << "W " << world << " I " << interleave << " block "
                                    << block_size << " position " << p << " rank " << r;
            }
          }
          for (int r = 0; r < world; ++r) {
            ASSERT_EQ(held[r], dcp_shard_tokens<std::int64_t>(length, world, interleave, r))
                << "W " << world << " I " << interleave << " length " << length << " rank " << r;
            ASSERT_LE((held[r] + block_size - 1) / block_size, width) << "the row holds it";
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 500);
}

TEST(DeploymentGeometry, BlockTableRowsHoldVirtualBlocks) {
  EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  for (const int world : {1, 2, 4}) {
    spec.dcp.world_size = world;
    spec.dcp.interleave_size = 1;
    const DeploymentGeometry g = DeploymentGeometry::of(spec);
    EXPECT_EQ(g.limits.max_blocks_per_req, 131072 / (16 * world));
    EXPECT_EQ(g.dcp_sharding().virtual_block_size(), 16 * world);
  }
}

}  // namespace
}  // namespace freezeframe
