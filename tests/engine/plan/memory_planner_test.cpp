// engine/: the model program and the memory plan, against numbers worked out by hand.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include <cstdlib>
#include <memory>
#include <string>

#include "freezeframe/backends/dcp_shard.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/base/error.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/plan/plan_views.h"
#include "freezeframe/engine/spec/spec.h"
#include "freezeframe/engine/spec/tensor_parallel.h"
#include "freezeframe/memory/arena.h"

namespace freezeframe {
namespace {

const std::string kConfigs = FREEZEFRAME_SOURCE_DIR "/configs/";
constexpr std::int64_t GiB = std::int64_t(1) << 30;

constexpr const char* kTiny = R"(model:
  name: tiny
  num_layers: 4
  hidden_size: 1024
  num_heads: 8
  num_kv_heads: 2
  intermediate_size: 2048
  vocab_size: 32000
  max_position_embeddings: 4096
scheduler:
  max_num_seqs: 16
  max_num_batched_tokens: 1024
)";

TEST(ModelProgram, Llama31_8bHasEightBillionParameters) {
  const EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  const ModelProgram program = build_model_program(spec);
  // Per layer: q 4096² + k, v 1024·4096 each + o 4096² + gate, up, down 14336·4096 each + two
  // norms = 218,112,000; ×32, + embeddings and lm_head 2·128256·4096, + final norm 4096.
  EXPECT_EQ(program.weight_bytes(),
            2 * (32 * std::int64_t(218'112'000) + 2 * std::int64_t(128256) * 4096 + 4096));
  // embedding, 10 ops per layer, final norm, lm_head, sample.
  EXPECT_EQ(program.ops.size(), 1u + 32u * 10u + 3u);
  EXPECT_EQ(program.ops.back().kind(), OpKind::kSample);
  EXPECT_EQ(program.ops[1].kind(), OpKind::kRmsNorm);
  EXPECT_EQ(program.ops[5].kind(), OpKind::kAttention);
  EXPECT_EQ(program.tensors[program.tensor_index("layers.3.qkv")].width, (32 + 2 * 8) * 128);
  const auto lifetimes = program.lifetimes();
  const int hidden = program.tensor_index("hidden");
  EXPECT_EQ(lifetimes[hidden].first_op, 0);
  EXPECT_EQ(lifetimes[hidden].last_op, static_cast<int>(program.ops.size()) - 3)
      << "the residual stream lives until the final norm";
  EXPECT_EQ(program.tensors[hidden].dtype, DType::kBF16);
}

// model.residual_dtype: f32 keeps the residual stream in f32; everything else stays bf16.
TEST(ModelProgram, ResidualStreamInF32) {
  EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  spec.model.residual = DType::kF32;
  const ModelProgram program = build_model_program(spec);
  for (const ProgramTensor& t : program.tensors) {
    if (t.name == "hidden") {
      EXPECT_EQ(t.dtype, DType::kF32);
    } else if (t.name == "layers.0.qkv" || t.name == "layers.0.attn_in") {
      EXPECT_EQ(t.dtype, DType::kBF16) << t.name;
    }
  }
}

// model.quantization: fp8 holds the projections in fp8 with f32 scales per output channel,
// and quantises each projection's input per token first; the rest stays bf16.
TEST(ModelProgram, Fp8ProjectionsHalveTheirWeightsAndQuantiseTheirInputs) {
  EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  spec.model.fp8_linear = true;
  const ModelProgram program = build_model_program(spec);
  // Per layer: the projections' 218,103,808 values at a byte each, their 4096 + 1024 + 1024 +
  // 4096 + 14336 · 2 + 4096 channel scales at four bytes, the two norms in bf16.
  const std::int64_t per_layer =
      218'103'808 + 4 * std::int64_t(4096 + 2 * 1024 + 4096 + 2 * 14336 + 4096) + 2 * 2 * 4096;
  EXPECT_EQ(program.weight_bytes(), 32 * per_layer + 2 * (2 * std::int64_t(128256) * 4096 + 4096));
  // The norms and SiLU·mul write their rows in fp8 (with a scale per row) for the projection
  // right after them, and nothing in 16 bits; attention's output is quantised by an op of its
  // own before o_proj: one op more per layer.
  EXPECT_EQ(program.ops.size(), 1u + 32u * 11u + 3u);
  auto expect_fp8_rows_read_next = [&](std::size_t i, int rows, int scale) {
    EXPECT_EQ(program.tensors[rows].dtype, DType::kFp8E4M3);
    EXPECT_EQ(program.tensors[scale].dtype, DType::kF32);
    EXPECT_EQ(program.tensors[scale].width, 1);
    ASSERT_LT(i + 1, program.ops.size());
    const ProgramOp& next = program.ops[i + 1];
    EXPECT_EQ(next.reads.front(), rows) << to_string(next.kind()) << " reads the fp8 rows";
    EXPECT_NE(std::find(next.reads.begin(), next.reads.end(), scale), next.reads.end());
  };
  int quantize = 0, fused = 0;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const ProgramOp& op = program.ops[i];
    if (op.kind() == OpKind::kQuantizeRows) {
      ++quantize;
      const auto& q = op.as<ops::QuantizeRows>();
      EXPECT_EQ(program.tensors[q.in].name, "layers." + std::to_string(op.layer) + ".attn_out");
      expect_fp8_rows_read_next(i, q.out, q.scale);
    } else if (op.kind() == OpKind::kRmsNorm) {
      const auto& n = op.as<ops::RmsNorm>();
      EXPECT_EQ(n.out, -1) << "only the fp8 rows are read";
      ASSERT_TRUE(n.fp8.defined());
      ++fused;
      expect_fp8_rows_read_next(i, n.fp8.rows, n.fp8.scale);
    } else if (op.kind() == OpKind::kSiluAndMul) {
      const auto& m = op.as<ops::SiluAndMul>();
      EXPECT_EQ(m.act, -1) << "only the fp8 rows are read";
      ASSERT_TRUE(m.fp8.defined());
      ++fused;
      expect_fp8_rows_read_next(i, m.fp8.rows, m.fp8.scale);
    }
  }
  EXPECT_EQ(quantize, 32);
  EXPECT_EQ(fused, 3 * 32);
  for (const ProgramTensor& t : program.tensors) {
    EXPECT_FALSE(t.name.ends_with(".attn_in") || t.name.ends_with(".mlp_in") ||
                 t.name.ends_with(".mlp_act"))
        << t.name << " is written only in fp8";
  }
  // Each fp8 weight has its scales, right after the weights of its GEMM, in their order.
  for (const ProgramWeight& w : program.weights) {
    if (w.scales_of < 0) continue;
    const ProgramWeight& m = program.weights[w.scales_of];
    EXPECT_EQ(m.dtype, DType::kFp8E4M3) << m.name;
    EXPECT_EQ(w.name, m.name + ".weight_scale");
    EXPECT_EQ(w.dtype, DType::kF32);
    EXPECT_EQ(w.shape, std::vector<std::int64_t>{m.shape[0]});
  }
  const auto& qkv = program.ops[2].as<ops::QkvProj>();
  ASSERT_EQ(qkv.fp8.weight_scales.size(), 3u);
  EXPECT_EQ(qkv.fp8.weight_scales[1], qkv.fp8.weight_scales[0] + 1);
  EXPECT_EQ(program.weights[qkv.weights[0]].name, "layers.0.self_attn.q_proj");
  for (const ProgramWeight& w : program.weights) {
    if (w.name == "embed_tokens" || w.name == "lm_head" || w.name.ends_with("layernorm")) {
      EXPECT_EQ(w.dtype, DType::kBF16) << w.name;
    }
  }
}

TEST(ModelProgram, Fp8ProjectionsNeedInputsOfWholeSixteenByteRows) {
  EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  spec.model.fp8_linear = true;
  spec.model.hidden_size = 4104;  // 8 more than a multiple of 16
  try {
    (void)build_model_program(spec);
    ADD_FAILURE() << "built";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("model.quantization: fp8"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("layers.0.attn_in is 4104"), std::string::npos) << e.message();
  }
}

// What fp8 projections buy Llama-3.1-8B on one 141 GiB GPU: the weights' bytes saved go to the
// KV cache.
TEST(MemoryPlanner, Fp8ProjectionsGiveTheirBytesToTheKvCache) {
  EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  const MemoryPlan bf16 = plan_memory(spec, 141 * GiB);
  spec.model.fp8_linear = true;
  const MemoryPlan fp8 = plan_memory(spec, 141 * GiB);
  const std::int64_t saved = bf16.region("weights").bytes - fp8.region("weights").bytes;
  EXPECT_GT(saved, std::int64_t(6) * GiB);
  EXPECT_GT(fp8.kv_cache.num_blocks, bf16.kv_cache.num_blocks);
  // Each 2 MiB block of the cache (32 layers · 16 tokens · 2 · 8 heads · 128 · 2 bytes) that
  // the weights no longer take, less what the quantised activations add.
  EXPECT_NEAR(double(fp8.kv_cache.num_blocks - bf16.kv_cache.num_blocks),
              double(saved) / double(2 * 1024 * 1024), 400.0);
}

TEST(ModelProgram, MlaLayersUseTheirOwnProjections) {
  const EngineSpec spec = load_spec(kConfigs + "deepseek-v2-lite.yaml");
  const ModelProgram program = build_model_program(spec);
  std::int64_t kv_b = 0, q = 0, dense_mlp = 0;
  for (const ProgramWeight& w : program.weights) {
    if (w.name == "layers.0.self_attn.kv_b_proj") kv_b = w.bytes();
    if (w.name == "layers.0.self_attn.q_proj") q = w.bytes();
    if (w.name.starts_with("layers.0.mlp.")) dense_mlp += w.bytes();
  }
  EXPECT_EQ(kv_b, 2 * 16 * (128 + 128) * 512);
  EXPECT_EQ(q, 2 * 16 * (128 + 64) * 2048) << "no q_lora: q_proj reads the hidden state";
  EXPECT_EQ(dense_mlp, 2 * 3 * 10944 * 2048) << "layer 0's dense MLP";
}

// DeepSeek-V2-Lite whole: its 15.7B parameters as published, the experts included.
TEST(ModelProgram, DeepSeekV2LiteHoldsEveryExpert) {
  const EngineSpec spec = load_spec(kConfigs + "deepseek-v2-lite.yaml");
  const ModelProgram program = build_model_program(spec);
  const std::int64_t h = 2048;
  // Per layer: q_proj 16·192·h, kv_a 576·h, its norm 512, kv_b 16·256·512, o_proj h·16·128,
  // two norms.
  const std::int64_t attention =
      16 * 192 * h + 576 * h + 512 + 16 * 256 * 512 + h * 16 * 128 + 2 * h;
  // A MoE layer: the router 64·h, 64 experts of 3·1408·h, the shared pair as one MLP 2816 wide.
  const std::int64_t moe = 64 * h + 64 * 3 * 1408 * h + 3 * 2816 * h;
  const std::int64_t params =
      27 * attention + 3 * 10944 * h + 26 * moe + 2 * std::int64_t(102400) * h + h;
  EXPECT_EQ(program.weight_bytes(), 2 * params);
  EXPECT_NEAR(double(params), 15.7e9, 0.05e9);
  // The routed experts of a layer: one op, whose scratch is T·k rows of each of its tensors.
  int moe_ops = 0;
  for (const ProgramOp& op : program.ops) {
    if (op.kind() != OpKind::kMoeExperts) continue;
    ++moe_ops;
    const auto& m = op.as<ops::MoeExperts>();
    EXPECT_EQ(m.experts.size(), 3u * 64u);
    EXPECT_EQ(program.tensors[m.topk_ids].width, 6);
    EXPECT_EQ(program.tensors[m.router_logits].width, 64);
    EXPECT_EQ(program.tensors[m.sorted_rows].width, 6);
    EXPECT_EQ(program.tensors[m.gate_up].width, 6 * 2 * 1408);
    EXPECT_EQ(program.tensors[m.expert_out].width, 6 * h);
  }
  EXPECT_EQ(moe_ops, 26);
  // Over 4 ranks each expert's width is split as a dense MLP's is.
  EngineSpec tp4 = spec;
  tp4.tp.world_size = 4;
  for (const ProgramWeight& w : build_model_program(tp4).weights) {
    if (w.name == "layers.1.mlp.experts.7.gate_proj") {
      EXPECT_EQ(w.shape, (std::vector<std::int64_t>{352, h}));
    }
    if (w.name == "layers.1.mlp.shared_experts.down_proj") {
      EXPECT_EQ(w.shape, (std::vector<std::int64_t>{h, 704}));
    }
    if (w.name == "layers.1.mlp.gate") {
      EXPECT_EQ(w.shape, (std::vector<std::int64_t>{64, h}));
    }
  }
  EXPECT_EQ(weight_shard(tp4, "layers.1.mlp.experts.7.down_proj", 2).offset, 2 * 352);
  EXPECT_EQ(weight_shard(tp4, "layers.1.mlp.shared_experts.up_proj", 1).offset, 704);
}

/// configs/llama-3.1-8b.yaml on the reference backend, which plans no attention workspace and
/// the smallest plan slice: the case worked out by hand below (the config's own backend, the
/// paged one, takes 5 blocks more: tensor_parallel_test).
EngineSpec llama_on_the_reference_backend() {
  const std::string path = kConfigs + "llama-3.1-8b.yaml";
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t at = text.find("backend: paged");
  EXPECT_NE(at, std::string::npos) << path << " names no paged backend";
  text.replace(at, std::string("backend: paged").size(), "backend: reference");
  return parse_spec(text, path);
}

// The hand-computed case: Llama-3.1-8B, 80 GiB device, budget 0.9 → 77,309,411,328 bytes.
// At 8192 batched tokens and 256 sequences (every size below is a multiple of 256, so no
// alignment padding):
//   weights              16,060,522,496  (8,030,261,248 bf16 parameters)
//   activations             771,751,936  (hidden 8192·4096·2 + gate_up 8192·28672·2
//                                         + act 8192·14336·2, live together at silu_and_mul;
//                                         each layer's attention output, 8192·4096·2, lives
//                                         from attention to o_proj and takes less)
//   staging                   8,566,528  (token ids 8192·4 + positions 8192·8 + LM head rows
//                                         256·4 → 1,024 + sampling parameters 256·32 = 8,192;
//                                         the attention metadata: table shape 256
//                                         + query_start_loc 1,280 + seq_lens 1,024
//                                         + seq_start_loc 1,280 + slot_mapping 65,536
//                                         = 69,376; the reference backend's plan, each
//                                         request's first new position, 256·4 = 1,024; the
//                                         block table once, 256·8192·4 = 8,388,608)
//   outputs                 131,335,168  (logits 256·128256·4 + sampled token ids 256·4)
//   cublas_workspace         33,554,432
//   fixed total          17,005,730,560
// KV: 77,309,411,328 − 17,005,730,560 = 60,303,680,768 bytes; one block over 32 layers is
// 32 · 2 (K, V) · 16 tokens · 8 heads · 128 · 2 bytes = 2,097,152; 60,303,680,768 / 2,097,152
// = 28,755.04 → 28,755 blocks = 460,080 tokens; a 131,072-token sequence needs 8,192 blocks,
// so 3 fit at once. (A buffer per layer for the attention outputs, 2 GiB, would cost 1,024
// blocks: 16,384 tokens; metadata per backend with the block table twice, 8 MiB more, 4.)
TEST(MemoryPlanner, Llama31_8bKvBlocksByHand) {
  const EngineSpec spec = llama_on_the_reference_backend();
  const MemoryPlan plan = plan_memory(spec, 80 * GiB);
  EXPECT_EQ(plan.capacity_bytes(), 77'309'411'328);
  EXPECT_EQ(plan.region("weights").bytes, 16'060'522'496);
  EXPECT_EQ(plan.region("activations").bytes, 771'751'936);
  EXPECT_EQ(plan.activations.lower_bound_bytes, 771'751'936);
  EXPECT_EQ(plan.region("staging").bytes, 8'566'528);
  EXPECT_EQ(plan.region("outputs").bytes, 131'335'168);
  EXPECT_EQ(plan.find("attention_outputs"), nullptr) << "attention outputs are activations";
  int attention_outputs = 0;
  for (const Placement& p : plan.region("activations").placements) {
    if (p.name.ends_with(".attn_out")) {
      ++attention_outputs;
      EXPECT_EQ(p.bytes, 8192 * 4096 * 2) << p.name;
      EXPECT_EQ(p.last_step - p.first_step, 1) << p.name << " lives from attention to o_proj";
    }
  }
  EXPECT_EQ(attention_outputs, 32);
  std::vector<std::string> slices;
  for (const Placement& p : plan.region("staging").placements) slices.push_back(p.name);
  EXPECT_EQ(slices,
            (std::vector<std::string>{"token_ids", "positions", "lm_head_rows", "sampling_params",
                                      "metadata", "plan.reference", "block_table"}))
      << "one staged image, the reference backend's plan a slice of it";
  EXPECT_EQ(plan.find("split_kv_workspace"), nullptr) << "split-KV decode uses attention_workspace";
  EXPECT_EQ(plan.region("cublas_workspace").bytes, 33'554'432);
  EXPECT_EQ(plan.find("attention_workspace"), nullptr) << "the reference impl needs none";
  EXPECT_EQ(plan.region("kv_cache").offset, 17'005'730'560);
  EXPECT_EQ(plan.kv_cache.bytes_per_block, 2'097'152);
  EXPECT_EQ(plan.kv_cache.num_blocks, 28'755);
  EXPECT_EQ(plan.kv_cache.tokens_per_rank, 460'080);
  EXPECT_EQ(plan.kv_cache.max_concurrent_sequences, 3);
  EXPECT_EQ(plan.region("kv_cache").bytes, 28'755 * std::int64_t(2'097'152));
  EXPECT_EQ(plan.region("kv_cache").placements.size(), 32u);
  EXPECT_LE(plan.used_bytes(), plan.capacity_bytes());
  EXPECT_GT(plan.used_bytes() + plan.kv_cache.bytes_per_block, plan.capacity_bytes())
      << "whatever is left is less than one block";
}

TEST(MemoryPlanner, EveryShippedModelPlansAtTheBound) {
  for (const char* name : {"llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.1", "deepseek-v2-lite"}) {
    const MemoryPlan plan = plan_memory(load_spec(kConfigs + name + ".yaml"), 141 * GiB);
    SCOPED_TRACE(name);
    EXPECT_GE(plan.activations.peak_bytes, plan.activations.lower_bound_bytes);
    EXPECT_LE(double(plan.activations.peak_bytes),
              1.02 * double(plan.activations.lower_bound_bytes));
    EXPECT_GT(plan.kv_cache.max_concurrent_sequences, 0);
    std::int64_t end = 0;
    for (const MemoryRegion& r : plan.regions()) {
      EXPECT_EQ(r.offset % 256, 0) << r.name;
      EXPECT_GE(r.offset, end) << r.name << " overlaps the region before it";
      end = r.end();
      for (const Placement& p : r.placements) {
        EXPECT_GE(p.offset, r.offset) << p.name;
        EXPECT_LE(p.offset + p.bytes, r.end()) << p.name;
      }
    }
  }
}

TEST(MemoryPlanner, MlaCacheIsOneLatentPerToken) {
  const MemoryPlan plan = plan_memory(load_spec(kConfigs + "deepseek-v2-lite.yaml"), 80 * GiB);
  // 27 layers · 16 tokens · (512 + 64) · 2 bytes.
  EXPECT_EQ(plan.kv_cache.bytes_per_block, 27 * 16 * 576 * 2);
  EXPECT_GT(plan.region("attention_workspace").bytes, 0) << "the reference MLA impl needs one";
}

// Backend mla keeps the latent in fp8 where the spec asks: half the bytes a token, twice the
// tokens (reference_mla refuses such a cache, naming the line).
TEST(MemoryPlanner, AnFp8LatentCacheHoldsTwiceTheTokens) {
  std::ifstream file(kConfigs + "deepseek-v2-lite.yaml");
  const std::string text{std::istreambuf_iterator<char>(file), {}};
  auto with = [&](const std::string& backend, const std::string& dtype) {
    std::string t = text;
    t.replace(t.find("backend: reference_mla"), 22, "backend: " + backend);
    t.replace(t.find("  dtype: auto"), 13, "  dtype: " + dtype);
    return t;
  };
  const MemoryPlan bf16 = plan_memory(parse_spec(with("mla", "bf16"), "lite.yaml"), 80 * GiB);
  const MemoryPlan fp8 = plan_memory(parse_spec(with("mla", "fp8_e4m3"), "lite.yaml"), 80 * GiB);
  EXPECT_EQ(fp8.kv_cache.bytes_per_block, 27 * 16 * 576);
  EXPECT_EQ(fp8.kv_cache.bytes_per_block * 2, bf16.kv_cache.bytes_per_block);
  EXPECT_GE(fp8.kv_cache.num_blocks, 2 * bf16.kv_cache.num_blocks - 1);
  try {
    (void)parse_spec(with("reference_mla", "fp8_e4m3"), "lite.yaml");
    ADD_FAILURE() << "reference_mla took an fp8 latent cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend 'reference_mla' cannot keep a fp8_e4m3 KV cache"),
              std::string::npos)
        << e.what();
  }
}

TEST(MemoryPlanner, LayersSharingKvAliasOneCache) {
  const EngineSpec plain = parse_spec(kTiny);
  const std::string text =
      std::string(kTiny).replace(std::string(kTiny).find("scheduler:"), 0,
                                 "  layers:\n    - layers: [2, 3]\n      kv_sharing_target: 1\n");
  const EngineSpec sharing = parse_spec(text);
  const MemoryPlan a = plan_memory(plain, 8 * GiB), b = plan_memory(sharing, 8 * GiB);
  EXPECT_EQ(b.kv_cache.bytes_per_block * 2, a.kv_cache.bytes_per_block) << "4 caches → 2";
  EXPECT_EQ(b.kv_cache.cache_layers, 2);
  const auto& placements = b.region("kv_cache").placements;
  const Placement* layer1 = nullptr;
  const Placement* layer3 = nullptr;
  for (const Placement& p : placements) {
    if (p.name == "layers.1.kv_cache") layer1 = &p;
    if (p.name == "layers.3.kv_cache") layer3 = &p;
  }
  ASSERT_TRUE(layer1 && layer3);
  EXPECT_EQ(layer3->offset, layer1->offset);
  EXPECT_EQ(layer3->aliases, "layers.1.kv_cache");
  EXPECT_GT(b.kv_cache.num_blocks, a.kv_cache.num_blocks);
}

TEST(MemoryPlanner, DcpShardsTheCacheAndPlansLseAsActivations) {
  // DCP runs over tensor-parallel ranks: 8 ranks replicate each of the 2 KV heads 4 times,
  // and the 4 ranks holding one head split its tokens.
  const std::string text = std::string(kTiny) + "tp:\n  world_size: 8\ndcp:\n  world_size: 4\n";
  const MemoryPlan one = plan_memory(parse_spec(kTiny), 8 * GiB);
  const MemoryPlan four = plan_memory(parse_spec(text), 8 * GiB);
  int lse = 0;
  for (const Placement& p : four.region("activations").placements) {
    if (!p.name.ends_with(".attn_lse")) continue;
    ++lse;
    // The group's gathered queries: 8 heads / 8 ranks · 4 ranks of the group.
    EXPECT_EQ(p.bytes, 1024 * 4 * 4) << "[tokens, heads] f32";
  }
  EXPECT_EQ(lse, 4) << "one per layer, packed by lifetime";
  for (const Placement& p : one.region("activations").placements) {
    EXPECT_FALSE(p.name.ends_with(".attn_lse")) << "no LSE without DCP";
  }
  // Each rank holds a quarter of every sequence: 4096 tokens → 1024 per rank = 64 blocks.
  EXPECT_EQ(four.kv_cache.max_concurrent_sequences, four.kv_cache.num_blocks / 64);
  EXPECT_EQ(one.kv_cache.max_concurrent_sequences, one.kv_cache.num_blocks / 256);
  EXPECT_GT(four.kv_cache.max_concurrent_sequences, 3 * one.kv_cache.max_concurrent_sequences);
}

TEST(MemoryPlanner, DcpRankTokensFollowTheInterleave) {
  // W = 2, I = 1: positions alternate; an odd length gives rank 0 the extra token.
  EXPECT_EQ(dcp_shard_tokens<std::int64_t>(11, 2, 1, 0), 6);
  EXPECT_EQ(dcp_shard_tokens<std::int64_t>(11, 2, 1, 1), 5);
  // W = 4, I = 16: 100 tokens = one full round of 64, then 36 = 16 + 16 + 4 + 0.
  EXPECT_EQ(dcp_shard_tokens<std::int64_t>(100, 4, 16, 0), 32);
  EXPECT_EQ(dcp_shard_tokens<std::int64_t>(100, 4, 16, 1), 32);
  EXPECT_EQ(dcp_shard_tokens<std::int64_t>(100, 4, 16, 2), 20);
  EXPECT_EQ(dcp_shard_tokens<std::int64_t>(100, 4, 16, 3), 16);
  EXPECT_EQ(dcp_shard_tokens<std::int64_t>(7, 1, 1, 0), 7);
}

TEST(MemoryPlanner, ABudgetWithoutRoomForOneSequenceSaysWhatIsMissing) {
  const EngineSpec spec = llama_on_the_reference_backend();
  try {
    (void)plan_memory(spec, 24 * GiB);  // 0.9 · 24 GiB < 17.0 GB fixed + 16 GiB of KV
    FAIL() << "the plan was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("llama-3.1-8b.yaml:21:18: cache.memory_budget"), std::string::npos) << msg;
    EXPECT_NE(msg.find("131072 tokens = 8192 blocks"), std::string::npos) << msg;
    // needed: 17,005,730,560 + 8192 · 2 MiB = 34,185,599,744; budget 0.9 · 24 GiB
    // = 23,192,823,398 → 10,992,776,346 missing.
    EXPECT_NE(msg.find("10992776346 bytes"), std::string::npos) << msg;
  }
}

TEST(MemoryPlanner, OffGridCaptureSizesWarn) {
  const MemoryPlan plan = plan_memory(
      parse_spec(std::string(kTiny) + "cuda_graphs:\n  capture_sizes: [1, 2, 3, 8]\n"), 8 * GiB);
  ASSERT_EQ(plan.warnings.size(), 1u);
  EXPECT_NE(plan.warnings[0].find("sizes 3 are off the default ladder"), std::string::npos)
      << plan.warnings[0];
}

TEST(PlanViews, EveryTensorIsAViewInsideItsPlacement) {
  // Host memory stands in for the device: the views and their checks are the same.
  const std::string text =
      std::string(kTiny).replace(std::string(kTiny).find("scheduler:"), 0,
                                 "  layers:\n    - layers: [3]\n      kv_sharing_target: 1\n"
                                 "cache:\n  memory_budget: 300MiB\n");
  const EngineSpec spec = parse_spec(text);
  const MemoryPlan plan = plan_memory(spec, 8 * GiB);
  const ModelProgram program = build_model_program(spec);
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  const auto bytes = static_cast<std::size_t>(align_up(plan.used_bytes(), 256));
  std::unique_ptr<std::byte, Free> memory(static_cast<std::byte*>(std::aligned_alloc(256, bytes)));
  ASSERT_TRUE(memory);
  const Arena arena = Arena::borrow(plan, memory.get(), plan.used_bytes(), Device::cpu());
  const PlanViews views = bind_plan(spec, program, arena);

  EXPECT_EQ(views.weights[0].size(0), 32000) << program.weights[0].name;
  EXPECT_EQ(views.weights[0].size(1), 1024);
  const TensorView qkv = views.tensors[program.tensor_index("layers.2.qkv")];
  EXPECT_EQ(qkv.size(0), 1024);
  EXPECT_EQ(qkv.size(1), (8 + 2 * 2) * 128);
  const TensorView logits = views.tensors[program.tensor_index("logits")];
  EXPECT_EQ(logits.size(0), 16) << "one row per sequence";
  EXPECT_EQ(logits.dtype(), DType::kF32);

  const AttentionBackend& backend = find_backend("reference");
  const auto shape = backend.kv_cache_shape(plan.kv_cache.num_blocks, 16, 2, 128, DType::kBF16);
  const TensorView cache1 = views.kv_caches[1];
  ASSERT_EQ(cache1.dim(), static_cast<int>(shape.size()));
  for (int d = 0; d < cache1.dim(); ++d) EXPECT_EQ(cache1.size(d), shape[d]) << "dim " << d;
  EXPECT_EQ(views.kv_caches[3].data(), cache1.data()) << "layer 3 shares layer 1's cache";
  EXPECT_NE(views.kv_caches[2].data(), cache1.data());
  const std::byte* end = memory.get() + plan.used_bytes();
  EXPECT_LE(
      static_cast<const std::byte*>(views.kv_caches[2].data()) + views.kv_caches[2].span_bytes(),
      end);

  // An arena smaller than the plan fails before any view is made.
  EXPECT_THROW((void)Arena::borrow(plan, memory.get(), plan.used_bytes() - 256, Device::cpu()),
               Error);
}

}  // namespace
}  // namespace freezeframe
