// engine/: one tensor-parallel rank's share of the model and of the plan, against numbers
// worked out by hand; the KV capacity a deployment of T ranks with DCP over D of them holds.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/plan/plan_views.h"
#include "freezeframe/engine/spec/deployment.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/engine/spec/tensor_parallel.h"
#include "freezeframe/memory/arena.h"

namespace freezeframe {
namespace {

const std::string kConfigs = FREEZEFRAME_SOURCE_DIR "/configs/";
constexpr std::int64_t GiB = std::int64_t(1) << 30;

std::string read_config(const std::string& config) {
  std::ifstream in(kConfigs + config);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A shipped config (which has neither section) with tp and dcp sections appended, validated.
EngineSpec with_parallel(const std::string& config, int tp, int dcp) {
  return parse_spec(read_config(config) + "tp:\n  world_size: " + std::to_string(tp) +
                        "\ndcp:\n  world_size: " + std::to_string(dcp) + "\n",
                    config);
}

// Llama-3.1-8B in bf16 (2 bytes a parameter): hidden 4096, 32 layers, 32 query heads and 8 KV
// heads of 128, intermediate 14336, vocabulary 128256 (a multiple of 8: no padding).
// Per layer and rank:
//   q_proj  4096/T · 4096          (column-parallel: 32/T heads of 128 rows)
//   k, v    (8/T · 128) · 4096 each = 1024 · 4096 / T for T ≤ 8
//   o_proj  4096 · 4096/T          (row-parallel: its input columns)
//   gate, up, down  14336/T · 4096 each
//   sharded: (2 · 4096² + 2 · 1024 · 4096 + 3 · 14336 · 4096) / T = 218,103,808 / T
//   two norms, replicated: 2 · 4096 = 8,192
// Embedding and LM head, vocabulary-parallel: 2 · 128256/T · 4096; final norm 4096.
//   T = 1: 32 · (218,103,808 + 8,192) + 1,050,673,152 + 4,096 = 8,030,261,248 → 16,060,522,496 B
//   T = 2: 32 · (109,051,904 + 8,192) +   525,336,576 + 4,096 = 4,015,263,744 →  8,030,527,488 B
//   T = 4: 32 · ( 54,525,952 + 8,192) +   262,668,288 + 4,096 = 2,007,764,992 →  4,015,529,984 B
//   T = 8: 32 · ( 27,262,976 + 8,192) +   131,334,144 + 4,096 = 1,004,015,616 →  2,008,031,232 B
TEST(TensorParallel, Llama31_8bWeightBytesPerRank) {
  const std::int64_t expected[] = {16'060'522'496, 8'030'527'488, 4'015'529'984, 2'008'031'232};
  int i = 0;
  for (const int t : {1, 2, 4, 8}) {
    const EngineSpec spec = with_parallel("llama-3.1-8b.yaml", t, 1);
    EXPECT_EQ(build_model_program(spec).weight_bytes(), expected[i++]) << "T = " << t;
  }
}

TEST(TensorParallel, ARanksShapes) {
  const EngineSpec spec = with_parallel("llama-3.1-8b.yaml", 4, 1);
  const ModelProgram program = build_model_program(spec);
  // 32/4 = 8 query heads and 8/4 = 2 KV heads of 128.
  EXPECT_EQ(program.tensors[program.tensor_index("layers.0.qkv")].width, (8 + 2 * 2) * 128);
  EXPECT_EQ(program.tensors[program.tensor_index("layers.0.attn_out")].width, 8 * 128);
  EXPECT_EQ(program.tensors[program.tensor_index("layers.0.gate_up")].width, 2 * 14336 / 4);
  EXPECT_EQ(program.tensors[program.tensor_index("layers.0.mlp_act")].width, 14336 / 4);
  EXPECT_EQ(program.tensors[program.tensor_index("hidden")].width, 4096) << "all-reduced, whole";
  EXPECT_EQ(program.tensors[program.tensor_index("logits_shard")].width, 128256 / 4);
  EXPECT_EQ(program.tensors[program.tensor_index("logits")].width, 128256) << "gathered";
  const DeploymentGeometry g = DeploymentGeometry::of(spec, 3, 0);
  EXPECT_EQ(g.rank.tp_size, 4);
  EXPECT_EQ(g.rank.tp_rank, 3);
  EXPECT_EQ(g.kv.num_kv_heads, 2);
  EXPECT_THROW((void)DeploymentGeometry::of(spec, 4, 0), Error) << "rank 4 of 4";
  // Past the 8 KV heads each is replicated: one per rank.
  EXPECT_EQ(DeploymentGeometry::of(with_parallel("llama-3.1-8b.yaml", 16, 1)).kv.num_kv_heads, 1);
}

TEST(TensorParallel, TheVocabularyIsPaddedToAMultipleOfT) {
  const EngineSpec spec = parse_spec(R"(model:
  name: odd-vocab
  num_layers: 2
  hidden_size: 512
  num_heads: 8
  num_kv_heads: 2
  intermediate_size: 1024
  vocab_size: 32001
  max_position_embeddings: 2048
tp:
  world_size: 4
)");
  const TpShard shard = tp_shard(spec);
  EXPECT_EQ(shard.padded_vocab, 32004);
  EXPECT_EQ(shard.vocab_rows, 8001);
  const ModelProgram program = build_model_program(spec);
  EXPECT_EQ(program.weights[0].name, "embed_tokens");
  EXPECT_EQ(program.weights[0].shape[0], 8001);
  EXPECT_EQ(program.tensors[program.tensor_index("logits")].width, 32001) << "padding dropped";
}

TEST(TensorParallel, DcpRanksAttendTheirGroupsHeads) {
  // DeepSeek-V2-Lite, 16 heads, T = 4, D = 4: a rank owns 16/4 = 4 heads (its o_proj columns),
  // and its MLA attention computes the 4 · 4 = 16 heads of its DCP group against its shard of
  // the latent, each with its LSE: it holds their q_proj and kv_b_proj rows (the query's input
  // is on every rank, so nothing is gathered), and the merge hands it back its own 4.
  const EngineSpec spec = with_parallel("deepseek-v2-lite.yaml", 4, 4);
  const TpShard shard = tp_shard(spec);
  EXPECT_EQ(shard.query_heads, 4);
  EXPECT_EQ(shard.attention_heads, 16);
  EXPECT_EQ(shard.kv_heads, 1) << "the latent, on every rank";
  const ModelProgram program = build_model_program(spec);
  EXPECT_EQ(program.tensors[program.tensor_index("layers.0.attn_lse")].width, 16);
  EXPECT_EQ(program.tensors[program.tensor_index("layers.0.attn_partial")].width, 16 * 128);
  EXPECT_EQ(program.tensors[program.tensor_index("layers.0.attn_out")].width, 4 * 128);
  auto shape_of = [&](const std::string& name) {
    for (const ProgramWeight& w : program.weights) {
      if (w.name == name) return w.shape;
    }
    ADD_FAILURE() << "no weight " << name;
    return std::vector<std::int64_t>{};
  };
  EXPECT_EQ(shape_of("layers.0.self_attn.q_proj"), (std::vector<std::int64_t>{16 * 192, 2048}));
  EXPECT_EQ(shape_of("layers.0.self_attn.kv_b_proj"), (std::vector<std::int64_t>{16 * 256, 512}));
  EXPECT_EQ(shape_of("layers.0.self_attn.o_proj"), (std::vector<std::int64_t>{2048, 4 * 128}));
  // Each DCP group holds all 16 heads' rows from the start; o_proj stays the rank's own.
  for (int r = 0; r < 4; ++r) {
    const WeightShard q = weight_shard(spec, "layers.0.self_attn.q_proj", r);
    EXPECT_EQ(q.axis, 0);
    EXPECT_EQ(q.offset, 0);
    EXPECT_EQ(q.whole, 16 * 192);
    EXPECT_EQ(weight_shard(spec, "layers.0.self_attn.kv_b_proj", r).offset, 0);
    EXPECT_EQ(weight_shard(spec, "layers.0.self_attn.o_proj", r).offset, r * 4 * 128);
  }
  // T = 4, D = 2: two groups of two ranks, each attending its group's 8 heads.
  const EngineSpec pairs = with_parallel("deepseek-v2-lite.yaml", 4, 2);
  EXPECT_EQ(weight_shard(pairs, "layers.0.self_attn.q_proj", 1).offset, 0);
  EXPECT_EQ(weight_shard(pairs, "layers.0.self_attn.q_proj", 2).offset, 8 * 192);
  EXPECT_EQ(weight_shard(pairs, "layers.0.self_attn.kv_b_proj", 3).offset, 8 * 256);
}

// KV capacity in tokens of a deployment: num_blocks · block_size · D (a block id names a virtual
// block of block_size · D positions over the DCP group). Each rank's blocks fill what its budget
// leaves after its own weights, activations and workspaces.
struct Capacity {
  std::int64_t blocks, bytes_per_block, tokens;
};
Capacity capacity(const EngineSpec& spec) {
  const MemoryPlan plan = plan_memory(spec, 80 * GiB);
  EXPECT_EQ(plan.kv_cache.deployment_tokens,
            plan.kv_cache.num_blocks * 16 * std::int64_t(spec.dcp.world_size));
  EXPECT_EQ(plan.kv_cache.tp_world_size, spec.tp.world_size);
  EXPECT_GT(plan.used_bytes() + plan.kv_cache.bytes_per_block, plan.capacity_bytes())
      << "whatever is left is less than one block";
  return {plan.kv_cache.num_blocks, plan.kv_cache.bytes_per_block, plan.kv_cache.deployment_tokens};
}

TEST(TensorParallel, KvCapacityWhenHeadsSplit) {
  // Llama-3.1-8B: a block is 32 layers · K and V · 8/T heads · 128 · 16 tokens · 2 bytes.
  const Capacity one = capacity(with_parallel("llama-3.1-8b.yaml", 1, 1));
  const Capacity two = capacity(with_parallel("llama-3.1-8b.yaml", 2, 1));
  EXPECT_EQ(one.bytes_per_block, 32 * 2 * 8 * 128 * 16 * 2);  // 2 MiB
  EXPECT_EQ(two.bytes_per_block, 32 * 2 * 4 * 128 * 16 * 2);  // 1 MiB
  // memory_planner_test's count by hand on the reference backend is 28,755; the config's paged
  // backend plans an attention workspace and a larger plan slice: 10 MiB, 5 blocks.
  EXPECT_EQ(one.blocks, 28'750);
  EXPECT_EQ(one.tokens, 28'750 * 16);
  // Half the bytes per block, and half the weights too: more than twice the blocks a rank.
  EXPECT_GT(two.blocks, 2 * one.blocks);
  EXPECT_EQ(two.tokens, two.blocks * 16);
}

TEST(TensorParallel, KvCapacityOfAReplicatedLatentGrowsWithDcp) {
  // DeepSeek-V2-Lite: one latent of 512 + 64 per token and layer, replicated on every rank:
  // a block is 27 · 576 · 16 · 2 = 497,664 bytes whatever T is.
  const Capacity c11 = capacity(with_parallel("deepseek-v2-lite.yaml", 1, 1));
  const Capacity c21 = capacity(with_parallel("deepseek-v2-lite.yaml", 2, 1));
  const Capacity c22 = capacity(with_parallel("deepseek-v2-lite.yaml", 2, 2));
  const Capacity c44 = capacity(with_parallel("deepseek-v2-lite.yaml", 4, 4));
  for (const Capacity& c : {c11, c21, c22, c44}) EXPECT_EQ(c.bytes_per_block, 497'664);
  // T = 2 without DCP: each rank's blocks grow only by what its halved weights free; the
  // deployment holds the same tokens twice.
  EXPECT_GT(c21.blocks, c11.blocks);
  EXPECT_LT(c21.blocks, 2 * c11.blocks);
  EXPECT_EQ(c21.tokens, c21.blocks * 16);
  // DCP over the 2 ranks: nearly the same blocks a rank, each holding 2 · 16 positions (a rank
  // holds the query and key/value up-projection rows of its group's heads, and its attention's
  // activations grow by them: 1.2% of its blocks here).
  EXPECT_EQ(c22.tokens, c22.blocks * 16 * 2);
  EXPECT_GT(c22.tokens, 2 * c21.tokens * 98 / 100);
  EXPECT_EQ(c44.tokens, c44.blocks * 16 * 4);
  EXPECT_GT(c44.tokens, 4 * c11.tokens);
}

TEST(TensorParallel, AnExplicitTOfOneLeavesThePlanAsItWas) {
  const MemoryPlan before = plan_memory(load_spec(kConfigs + "llama-3.1-8b.yaml"), 80 * GiB);
  const MemoryPlan after = plan_memory(with_parallel("llama-3.1-8b.yaml", 1, 1), 80 * GiB);
  ASSERT_EQ(before.regions().size(), after.regions().size());
  for (std::size_t i = 0; i < before.regions().size(); ++i) {
    EXPECT_EQ(before.regions()[i].name, after.regions()[i].name);
    EXPECT_EQ(before.regions()[i].offset, after.regions()[i].offset);
    EXPECT_EQ(before.regions()[i].bytes, after.regions()[i].bytes);
  }
  EXPECT_EQ(after.kv_cache.deployment_tokens, after.kv_cache.tokens_per_rank);
}

TEST(TensorParallel, DcpThatTheKvHeadsCannotShareIsRefused) {
  // Llama-3.1-8B's 8 KV heads over 2 ranks: 4 each, none replicated, so no DCP group can split
  // the same heads by token.
  try {
    (void)with_parallel("llama-3.1-8b.yaml", 2, 2);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama-3.1-8b.yaml:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dcp.world_size: must divide the replication"),
              std::string::npos)
        << e.what();
  }
  // 16 ranks replicate each KV head twice: DCP over 2 of them is fine.
  EXPECT_NO_THROW((void)with_parallel("llama-3.1-8b.yaml", 16, 2));
}

TEST(TensorParallel, ARanksPlanHoldsItsViews) {
  // 8 heads and 2 KV heads over 4 ranks, DCP over 2: a rank has 2 query heads, one KV head
  // (each replicated on 2 ranks, which DCP splits by token) and attends 2 · 2 = 4 heads.
  const EngineSpec spec = parse_spec(R"(model:
  name: tiny
  num_layers: 2
  hidden_size: 1024
  num_heads: 8
  num_kv_heads: 2
  intermediate_size: 2048
  vocab_size: 32000
  max_position_embeddings: 4096
cache:
  memory_budget: 300MiB
scheduler:
  max_num_seqs: 16
  max_num_batched_tokens: 1024
tp:
  world_size: 4
dcp:
  world_size: 2
)");
  const MemoryPlan plan = plan_memory(spec, 8 * GiB);
  const ModelProgram program = build_model_program(spec);
  // Host memory stands in for the device: the views and their checks are the same.
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  const auto bytes = static_cast<std::size_t>(align_up(plan.used_bytes(), 256));
  std::unique_ptr<std::byte, Free> memory(static_cast<std::byte*>(std::aligned_alloc(256, bytes)));
  ASSERT_TRUE(memory);
  const Arena arena = Arena::borrow(plan, memory.get(), plan.used_bytes(), Device::cpu());
  const PlanViews views = bind_plan(spec, program, arena);
  EXPECT_EQ(views.weights[0].size(0), 32000 / 4) << program.weights[0].name;
  EXPECT_EQ(views.tensors[program.tensor_index("layers.1.qkv")].size(1), (2 + 2 * 1) * 128);
  EXPECT_EQ(views.tensors[program.tensor_index("layers.1.q_group")].size(1), 4 * 128);
  EXPECT_EQ(views.tensors[program.tensor_index("layers.1.attn_partial")].size(1), 4 * 128);
  EXPECT_EQ(views.tensors[program.tensor_index("layers.1.attn_lse")].size(1), 4);
  EXPECT_EQ(views.tensors[program.tensor_index("layers.1.attn_out")].size(1), 2 * 128)
      << "o_proj's input: the rank's own heads, merged";
  const auto shape =
      spec.backend(0).kv_cache_shape(plan.kv_cache.num_blocks, 16, 1, 128, DType::kBF16);
  ASSERT_EQ(views.kv_caches[0].dim(), static_cast<int>(shape.size()));
  for (int d = 0; d < views.kv_caches[0].dim(); ++d) {
    EXPECT_EQ(views.kv_caches[0].size(d), shape[d]) << "dim " << d;
  }
  EXPECT_EQ(plan.kv_cache.deployment_tokens, plan.kv_cache.num_blocks * 16 * 2);
}

// Every weight of a rank is a block of the whole weight (weight_shard): over the T ranks the
// blocks along the split axis cover the whole extent, each index by as many ranks as replicate
// it (KV heads past their number), and the other axis is whole. Checked for every weight of
// dense models with split and replicated KV heads, Qwen2's biases and tied embeddings, and the
// vocabulary's padding.
void expect_shards_tile_the_whole(const std::string& config, int t) {
  SCOPED_TRACE(config + ", T = " + std::to_string(t));
  const EngineSpec whole_spec = with_parallel(config, 1, 1);
  const EngineSpec spec = with_parallel(config, t, 1);
  const ModelProgram whole = build_model_program(whole_spec);
  const ModelProgram rank = build_model_program(spec);
  ASSERT_EQ(whole.weights.size(), rank.weights.size());
  for (std::size_t w = 0; w < rank.weights.size(); ++w) {
    const ProgramWeight& weight = rank.weights[w];
    SCOPED_TRACE(weight.name);
    ASSERT_EQ(weight.name, whole.weights[w].name);
    const std::vector<std::int64_t>& full = whole.weights[w].shape;
    ASSERT_EQ(weight.shape.size(), full.size());
    std::vector<int> covered;  // ranks holding each index along the split axis
    int axis = -2;
    for (int r = 0; r < t; ++r) {
      const WeightShard part = weight_shard(spec, weight.name, r);
      if (axis == -2) axis = part.axis;
      ASSERT_EQ(part.axis, axis) << "every rank splits a weight along the same axis";
      if (axis < 0) {
        EXPECT_EQ(weight.shape, full) << "replicated weights are whole";
        continue;
      }
      const auto a = static_cast<std::size_t>(std::min<int>(axis, int(full.size()) - 1));
      ASSERT_EQ(part.whole, full[a]);
      for (std::size_t d = 0; d < full.size(); ++d) {
        if (d != a) {
          EXPECT_EQ(weight.shape[d], full[d]) << "the other axis is whole";
        }
      }
      covered.resize(static_cast<std::size_t>(part.whole), 0);
      ASSERT_GE(part.offset, 0);
      for (std::int64_t i = part.offset; i < part.offset + weight.shape[a]; ++i) {
        // The vocabulary's last block may reach past the whole: padding rows.
        if (i < part.whole) ++covered[static_cast<std::size_t>(i)];
      }
    }
    if (axis < 0) continue;
    const int each = covered.empty() ? 0 : covered[0];
    EXPECT_GE(each, 1);
    for (std::size_t i = 0; i < covered.size(); ++i) {
      ASSERT_EQ(covered[i], each) << "index " << i << " of the whole weight";
    }
  }
}

TEST(TensorParallel, EachRanksWeightsAreBlocksThatTileTheWhole) {
  for (const int t : {2, 4, 8, 16}) expect_shards_tile_the_whole("llama-3.1-8b.yaml", t);
  for (const int t : {2, 4}) expect_shards_tile_the_whole("qwen2.5-7b.yaml", t);
  // Llama's 8 KV heads over 16 ranks: rank r keeps head r div 2.
  const EngineSpec spec = with_parallel("llama-3.1-8b.yaml", 16, 1);
  const WeightShard k = weight_shard(spec, "layers.5.self_attn.k_proj", 13);
  EXPECT_EQ(k.axis, 0);
  EXPECT_EQ(k.offset, 6 * 128);
  EXPECT_EQ(k.whole, 8 * 128);
  const WeightShard o = weight_shard(spec, "layers.5.self_attn.o_proj", 13);
  EXPECT_EQ(o.axis, 1) << "row-parallel: its input columns";
  EXPECT_EQ(o.offset, 13 * 2 * 128);
  EXPECT_EQ(weight_shard(spec, "layers.5.input_layernorm", 13).axis, -1);
  EXPECT_THROW((void)weight_shard(spec, "layers.5.self_attn.k_proj", 16), Error);
}

/// Ops of `kind` in the program.
std::ptrdiff_t count_ops(const ModelProgram& p, OpKind kind) {
  return std::count_if(p.ops.begin(), p.ops.end(),
                       [&](const ProgramOp& op) { return op.kind() == kind; });
}

TEST(TensorParallel, UnderDcpAttentionGathersQueriesAndMergesPartials) {
  // Llama-3.1-8B over T = 16 ranks (2 query heads and 1 KV head a rank, each KV head on 2
  // ranks) with DCP over D = 2: each layer gathers its group's 2 · 2 queries, attends them to
  // the rank's shard with their LSEs, and merges the group's partials back to its own 2 heads
  // before o_proj. None of it without DCP.
  const ModelProgram tp = build_model_program(with_parallel("llama-3.1-8b.yaml", 16, 1));
  const ModelProgram dcp = build_model_program(with_parallel("llama-3.1-8b.yaml", 16, 2));
  EXPECT_EQ(count_ops(tp, OpKind::kDcpGatherQueries) + count_ops(tp, OpKind::kDcpMerge), 0);
  EXPECT_EQ(count_ops(dcp, OpKind::kDcpGatherQueries), 32);
  EXPECT_EQ(count_ops(dcp, OpKind::kDcpMerge), 32);
  EXPECT_EQ(dcp.ops.size(), tp.ops.size() + 2 * 32);
  auto width = [&](int tensor) { return dcp.tensors[tensor].width; };
  EXPECT_EQ(count_ops(dcp, OpKind::kAttention), 0) << "every attention op is DCP's own kind";
  EXPECT_EQ(count_ops(dcp, OpKind::kDcpAttention), 32);
  for (std::size_t i = 0; i < dcp.ops.size(); ++i) {
    if (dcp.ops[i].kind() != OpKind::kDcpAttention) continue;
    SCOPED_TRACE("layer " + std::to_string(dcp.ops[i].layer));
    ASSERT_GE(i, 1u);
    ASSERT_LT(i + 2, dcp.ops.size());
    ASSERT_EQ(dcp.ops[i - 1].kind(), OpKind::kDcpGatherQueries);
    ASSERT_EQ(dcp.ops[i + 1].kind(), OpKind::kDcpMerge);
    ASSERT_EQ(dcp.ops[i + 2].kind(), OpKind::kOProjResidual);
    const auto& gather = dcp.ops[i - 1].as<ops::DcpGatherQueries>();
    const auto& attention = dcp.ops[i].as<ops::DcpAttention>();
    const auto& merge = dcp.ops[i + 1].as<ops::DcpMerge>();
    const auto& o_proj = dcp.ops[i + 2].as<ops::OProjResidual>();
    // The gather reads the rank's qkv (2 query heads, 1 KV head) and writes the group's queries.
    EXPECT_EQ(width(gather.qkv), (2 + 2 * 1) * 128);
    EXPECT_EQ(width(gather.q_group), 4 * 128);
    EXPECT_EQ(attention.qkv, gather.qkv);
    EXPECT_EQ(attention.q_group, gather.q_group);
    // Attention: the group's partial outputs and their LSEs (f32), both the merge's inputs.
    EXPECT_EQ(width(attention.partial), 4 * 128);
    EXPECT_EQ(width(attention.lse), 4);
    EXPECT_EQ(dcp.tensors[attention.lse].dtype, DType::kF32);
    EXPECT_EQ(merge.partial, attention.partial);
    EXPECT_EQ(merge.lse, attention.lse);
    // The merge: the rank's own heads, which o_proj (2 heads' columns) reads.
    EXPECT_EQ(width(merge.out), 2 * 128);
    EXPECT_EQ(o_proj.in, merge.out);
    EXPECT_EQ(dcp.weights[o_proj.weight].shape[1], 2 * 128);
    // What the planner reads follows from the operands.
    EXPECT_EQ(dcp.ops[i].reads, (std::vector<int>{attention.qkv, attention.q_group}));
    EXPECT_EQ(dcp.ops[i].writes, (std::vector<int>{attention.partial, attention.lse}));
  }
  // Every buffer of the collectives is planned: the plan of a rank holds them all.
  const EngineSpec spec = with_parallel("llama-3.1-8b.yaml", 16, 2);
  EXPECT_NO_THROW((void)plan_memory(spec, 141 * GiB));
}

TEST(TensorParallel, TheProgramSumsPartialsAndGathersTheLogits) {
  // One all_reduce after the embedding and after each o_proj and down_proj; the LM head's
  // vocabulary rows gathered into the logits before the sample; none of it at T = 1.
  const ModelProgram one = build_model_program(with_parallel("llama-3.1-8b.yaml", 1, 1));
  const ModelProgram four = build_model_program(with_parallel("llama-3.1-8b.yaml", 4, 1));
  EXPECT_EQ(count_ops(one, OpKind::kAllReduce), 0);
  EXPECT_EQ(count_ops(one, OpKind::kGatherLogits), 0);
  EXPECT_EQ(count_ops(four, OpKind::kAllReduce), 1 + 2 * 32);
  EXPECT_EQ(four.ops.size(), one.ops.size() + 1 + 2 * 32 + 1);
  for (std::size_t i = 1; i < four.ops.size(); ++i) {
    const OpKind before = four.ops[i - 1].kind();
    const bool partial = before == OpKind::kEmbedding || before == OpKind::kOProjResidual ||
                         before == OpKind::kDownProjResidual;
    EXPECT_EQ(four.ops[i].kind() == OpKind::kAllReduce, partial) << "op " << i;
  }
  const auto gather = std::find_if(four.ops.begin(), four.ops.end(), [](const ProgramOp& op) {
    return op.kind() == OpKind::kGatherLogits;
  });
  ASSERT_NE(gather, four.ops.end());
  EXPECT_EQ((gather - 1)->kind(), OpKind::kLmHead);
  EXPECT_EQ((gather + 1)->kind(), OpKind::kSample);
  EXPECT_EQ(four.tensors[gather->as<ops::GatherLogits>().shard].name, "logits_shard");
  EXPECT_EQ(four.tensors[gather->as<ops::GatherLogits>().logits].name, "logits");
}

}  // namespace
}  // namespace freezeframe
