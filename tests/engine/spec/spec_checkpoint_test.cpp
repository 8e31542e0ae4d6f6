// engine/: a spec whose model section comes from a checkpoint (model.checkpoint): the same
// model as the hand-written configs, the spec's own sections kept, agreeing duplicates
// accepted, disagreements and the checkpoint's problems refused naming both places.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "freezeframe/base/error.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/spec/checkpoint_spec.h"
#include "freezeframe/engine/spec/layer_params.h"
#include "freezeframe/engine/spec/spec.h"
#include "support/gguf_builder.h"
#include "support/scratch_files.h"
#include "support/smollm2.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = FREEZEFRAME_SOURCE_DIR;
// Specs are parsed as if they lay in tests/specs/: checkpoint paths are relative to it.
const std::string kSpecName = (kSource / "tests" / "specs" / "checkpoint.yaml").string();
const std::string kCheckpoints = "../fixtures/checkpoints/";
constexpr std::int64_t kDevice = std::int64_t(141) << 30;

EngineSpec spec_of(const std::string& yaml) { return parse_spec(yaml, kSpecName); }

std::string message_of(const std::string& yaml) {
  try {
    (void)spec_of(yaml);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "the spec was accepted:\n" << yaml;
  return {};
}

std::string config_json(const std::string& folder) {
  return (kSource / "tests" / "fixtures" / "checkpoints" / folder / "config.json").string();
}

/// The model sections of two specs hold the same model.
void expect_same_model(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_size, b.head_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.layers, b.layers);
}

/// Two specs of one model plan the same arena.
void expect_same_plan(const EngineSpec& a, const EngineSpec& b) {
  const MemoryPlan pa = plan_memory(a, kDevice);
  const MemoryPlan pb = plan_memory(b, kDevice);
  ASSERT_EQ(pa.regions().size(), pb.regions().size());
  for (std::size_t i = 0; i < pa.regions().size(); ++i) {
    EXPECT_EQ(pa.regions()[i].name, pb.regions()[i].name);
    EXPECT_EQ(pa.regions()[i].bytes, pb.regions()[i].bytes) << pa.regions()[i].name;
  }
  EXPECT_EQ(pa.kv_cache.num_blocks, pb.kv_cache.num_blocks);
}

TEST(SpecCheckpoint, Llama31FromItsConfigIsTheHandWrittenSpec) {
  const EngineSpec spec = spec_of("model:\n  checkpoint: " + kCheckpoints + "llama-3.1-8b\n");
  const EngineSpec written = load_spec((kSource / "configs" / "llama-3.1-8b.yaml").string());
  expect_same_model(spec.model, written.model);
  expect_same_plan(spec, written);
  EXPECT_EQ(spec.model.name, "llama-3.1-8b");
  EXPECT_EQ(spec.scheduler.max_model_len, 131072);
  ASSERT_TRUE(spec.model.checkpoint.has_value());
  EXPECT_EQ(spec.model.checkpoint->path,
            (kSource / "tests" / "fixtures" / "checkpoints" / "llama-3.1-8b").string())
      << "resolved against the spec's folder, for the weight loader";
  ASSERT_TRUE(spec.model.checkpoint->rope_scaling.has_value());
  EXPECT_EQ(spec.model.checkpoint->rope_scaling->factor, 8.0);
  EXPECT_TRUE(spec.model.builtin_weights) << "unchanged: the weights are still planned";
  EXPECT_FALSE(written.model.checkpoint.has_value());
}

TEST(SpecCheckpoint, MistralsWindowGoesToEveryLayer) {
  const EngineSpec spec =
      spec_of("model:\n  checkpoint: " + kCheckpoints + "mistral-7b-v0.1/config.json\n");
  const EngineSpec written = load_spec((kSource / "configs" / "mistral-7b-v0.1.yaml").string());
  expect_same_model(spec.model, written.model);
  expect_same_plan(spec, written);
  for (const LayerSpec& layer : spec.model.layers) EXPECT_EQ(layer.sliding_window, 4096);
  // ... and to every layer's attention impl, through the parameters the runner builds it with.
  for (int l = 0; l < spec.model.num_layers; ++l) {
    EXPECT_EQ(attention_params(spec, l).sliding_window, 4096) << "layer " << l;
  }
  const EngineSpec tiny = spec_of("model:\n  checkpoint: ../fixtures/reference/tiny-mistral\n");
  ASSERT_EQ(tiny.model.num_layers, 2);
  for (int l = 0; l < 2; ++l) EXPECT_EQ(attention_params(tiny, l).sliding_window, 16);
}

TEST(SpecCheckpoint, Qwen2IsTiedWithQkvBias) {
  const EngineSpec spec = spec_of("model:\n  checkpoint: " + kCheckpoints + "qwen2-0.5b\n");
  EXPECT_EQ(spec.model.num_layers, 24);
  EXPECT_EQ(spec.model.num_heads, 14);
  EXPECT_EQ(spec.model.num_kv_heads, 2);
  EXPECT_EQ(spec.model.head_size, 64);
  EXPECT_TRUE(spec.model.tie_word_embeddings);
  EXPECT_TRUE(spec.model.checkpoint->qkv_bias);
  for (const LayerSpec& layer : spec.model.layers) EXPECT_EQ(layer.sliding_window, 0);
  (void)plan_memory(spec, kDevice);
}

// DeepSeek-V2-Lite's config.json gives the latent attention, the experts and which layers
// have them: the hand-written config, planned the same.
TEST(SpecCheckpoint, DeepSeekV2LiteFromItsConfigIsTheHandWrittenSpec) {
  const std::string sections = R"(cache:
  block_size: 16
  memory_budget: 0.9
scheduler:
  max_num_seqs: 256
  max_num_batched_tokens: 8192
  max_prefill_context_tokens: 32768
)";
  const EngineSpec spec =
      spec_of("model:\n  checkpoint: " + kCheckpoints + "deepseek-v2-lite\n" + sections);
  const EngineSpec written = load_spec((kSource / "configs" / "deepseek-v2-lite.yaml").string());
  expect_same_model(spec.model, written.model);
  ASSERT_TRUE(spec.model.mla && written.model.mla);
  EXPECT_EQ(spec.model.mla->kv_lora_rank, written.model.mla->kv_lora_rank);
  EXPECT_EQ(spec.model.mla->q_lora_rank, 0);
  EXPECT_EQ(spec.model.mla->qk_nope_head_dim, written.model.mla->qk_nope_head_dim);
  EXPECT_EQ(spec.model.mla->qk_rope_head_dim, written.model.mla->qk_rope_head_dim);
  EXPECT_EQ(spec.model.mla->v_head_dim, written.model.mla->v_head_dim);
  ASSERT_TRUE(spec.model.moe && written.model.moe);
  EXPECT_EQ(spec.model.moe->num_experts, 64);
  EXPECT_EQ(spec.model.moe->experts_per_token, 6);
  EXPECT_EQ(spec.model.moe->intermediate_size, 1408);
  EXPECT_EQ(spec.model.moe->num_shared_experts, 2);
  EXPECT_EQ(spec.model.layers[0].mlp, MlpKind::kGatedSilu);
  EXPECT_EQ(spec.model.layers[0].intermediate_size, 10944);
  EXPECT_EQ(spec.model.layers[26].mlp, MlpKind::kMoe);
  EXPECT_EQ(spec.model.layers[1].backend, "reference_mla");
  expect_same_plan(spec, written);
  // The spec written for the checkpoint (generate, serve) takes the MLA backend.
  const EngineSpec generated = spec_for_checkpoint(
      (kSource / "tests" / "fixtures" / "checkpoints" / "deepseek-v2-lite").string(), {});
  EXPECT_EQ(generated.model.layers[0].backend, "reference_mla");
}

// The router's rules come from the checkpoint, whether the spec gives the experts' sizes or not.
TEST(SpecCheckpoint, TheRoutersRulesAreTheCheckpoints) {
  const std::string qlora = "model:\n  checkpoint: ../fixtures/reference/tiny-deepseek-v2-qlora\n";
  for (const std::string& yaml :
       {qlora, qlora + "  moe:\n    num_experts: 4\n    experts_per_token: 2\n"
                       "    intermediate_size: 32\n    num_shared_experts: 1\n"}) {
    const EngineSpec spec = spec_of(yaml);
    ASSERT_TRUE(spec.model.moe);
    EXPECT_EQ(spec.model.moe->num_groups, 2);
    EXPECT_EQ(spec.model.moe->top_groups, 1);
    EXPECT_EQ(spec.model.moe->routed_scaling_factor, 2.0f);
    EXPECT_EQ(spec.model.mla->q_lora_rank, 32);
  }
  const EngineSpec plain =
      spec_of("model:\n  checkpoint: ../fixtures/reference/tiny-deepseek-v2\n");
  EXPECT_EQ(plain.model.moe->num_groups, 1);
  EXPECT_EQ(plain.model.moe->routed_scaling_factor, 1.0f);
}

// Backend mla decodes DeepSeek-V2's latent only (512 + 64); a checkpoint of another is
// refused where the spec names the backend.
TEST(SpecCheckpoint, TheTensorCoreMlaBackendTakesDeepSeeksLatent) {
  const EngineSpec spec = spec_of(
      "model:\n  checkpoint: ../fixtures/reference/tiny-deepseek-v2-latent512\n"
      "  attention:\n    backend: mla\n");
  EXPECT_EQ(spec.model.mla->kv_lora_rank, 512);
  EXPECT_EQ(spec.model.mla->qk_rope_head_dim, 64);
  EXPECT_EQ(spec.model.layers[2].backend, "mla");
  const std::string m = message_of(
      "model:\n  checkpoint: ../fixtures/reference/tiny-deepseek-v2\n"
      "  attention:\n    backend: mla\n");
  EXPECT_NE(m.find(kSpecName + ":4:14: model.attention.backend"), std::string::npos) << m;
  EXPECT_NE(m.find("96"), std::string::npos) << m;
}

TEST(SpecCheckpoint, LatentAttentionAndExpertsMustAgreeWithTheCheckpoints) {
  std::string m = message_of("model:\n  checkpoint: " + kCheckpoints + R"(deepseek-v2-lite
  mla:
    kv_lora_rank: 256
    qk_nope_head_dim: 128
    qk_rope_head_dim: 64
    v_head_dim: 128
  moe:
    num_experts: 64
    experts_per_token: 8
    intermediate_size: 1408
)");
  const std::string json = config_json("deepseek-v2-lite");
  EXPECT_NE(m.find(kSpecName +
                   ":4:19: model.mla.kv_lora_rank: 256 disagrees with the "
                   "checkpoint's 512 (" +
                   json + ":20:19: kv_lora_rank)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(kSpecName +
                   ":10:24: model.moe.experts_per_token: 8 disagrees with the "
                   "checkpoint's 6 (" +
                   json + ":30:26: num_experts_per_tok)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(kSpecName +
                   ":9:5: model.moe: num_shared_experts 0 (not given) disagrees "
                   "with the checkpoint's 2 (" +
                   json + ":27:23: n_shared_experts)"),
            std::string::npos)
      << m;
  m = message_of("model:\n  checkpoint: " + kCheckpoints + R"(qwen2-0.5b
  moe:
    num_experts: 8
    experts_per_token: 2
    intermediate_size: 64
)");
  EXPECT_NE(m.find("model.moe: the checkpoint's architecture 'Qwen2ForCausalLM' has no mixture "
                   "of experts"),
            std::string::npos)
      << m;
}

TEST(SpecCheckpoint, TinyGgufsPlan) {
  const EngineSpec llama = spec_of("model:\n  checkpoint: " + kCheckpoints +
                                   "tiny-llama.gguf\nscheduler:\n  max_num_seqs: 8\n  "
                                   "max_num_batched_tokens: 256\n");
  EXPECT_EQ(llama.model.name, "tiny llama");
  EXPECT_EQ(llama.model.num_layers, 2);
  EXPECT_EQ(llama.model.head_size, 32);
  EXPECT_EQ(llama.model.vocab_size, 32);
  EXPECT_TRUE(llama.model.tie_word_embeddings);
  EXPECT_EQ(llama.model.dtype, DType::kF16) << "general.file_type: all F16";
  EXPECT_EQ(llama.scheduler.max_model_len, 256);
  (void)plan_memory(llama, std::int64_t(1) << 30);

  const EngineSpec qwen = spec_of("model:\n  checkpoint: " + kCheckpoints + "tiny-qwen2.gguf\n");
  EXPECT_EQ(qwen.model.head_size, 32);
  EXPECT_EQ(qwen.model.dtype, DType::kBF16) << "quantised: the spec's default";
  EXPECT_FALSE(qwen.model.tie_word_embeddings);
  (void)plan_memory(qwen, std::int64_t(1) << 30);
}

TEST(SpecCheckpoint, SmolLM2Plans) {
  const std::string path = testing::smollm2_path(kSource);
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path << " (scripts/fetch-smollm2 fetches it)";
  const EngineSpec spec = spec_of("model:\n  checkpoint: " + path + "\n");
  EXPECT_EQ(spec.model.checkpoint->path, path) << "an absolute path is kept";
  EXPECT_EQ(spec.model.num_layers, 30);
  EXPECT_EQ(spec.model.num_heads, 9);
  EXPECT_EQ(spec.model.num_kv_heads, 3);
  EXPECT_EQ(spec.model.head_size, 64);
  EXPECT_EQ(spec.model.vocab_size, 49152);
  EXPECT_TRUE(spec.model.tie_word_embeddings);
  EXPECT_EQ(spec.scheduler.max_model_len, 8192);
  const MemoryPlan plan = plan_memory(spec, kDevice);
  EXPECT_GT(plan.kv_cache.num_blocks, 0);
}

TEST(SpecCheckpoint, TheSpecKeepsItsOwnSections) {
  const EngineSpec spec = spec_of("model:\n  checkpoint: " + kCheckpoints + R"(llama-3.1-8b
  name: mine
  dtype: f16
  attention:
    backend: paged_decode
  layers:
    - layers: 0
      backend: reference
cache:
  block_size: 32
scheduler:
  max_model_len: 8192
  max_num_seqs: 64
cuda_graphs:
  mode: piecewise
)");
  EXPECT_EQ(spec.model.name, "mine");
  EXPECT_EQ(spec.model.dtype, DType::kF16) << "a deployment may run another dtype";
  EXPECT_EQ(spec.model.layers[0].backend, "reference");
  EXPECT_EQ(spec.model.layers[1].backend, "paged") << "an alias gives the backend's own name";
  EXPECT_EQ(spec.cache.block_size, 32);
  EXPECT_EQ(spec.scheduler.max_model_len, 8192);
  EXPECT_EQ(spec.cuda_graphs.mode, CudaGraphMode::kPiecewise);
}

// A checkpoint not fetched yet: the refusal says how to fetch it where the spec says so
// (model.checkpoint_fetch), and the fetch command without a checkpoint is a mistake of its own.
TEST(SpecCheckpoint, AMissingCheckpointNamesItsFetchCommand) {
  std::string m = message_of(
      "model:\n  checkpoint: not-fetched-yet.gguf\n  checkpoint_fetch: scripts/fetch-it\n");
  EXPECT_NE(m.find("No such file or directory (fetch it first: scripts/fetch-it)"),
            std::string::npos)
      << m;
  m = message_of("model:\n  checkpoint: not-fetched-yet.gguf\n");
  EXPECT_EQ(m.find("fetch it first"), std::string::npos) << m;
  m = message_of("model:\n  name: m\n  checkpoint_fetch: scripts/fetch-it\n");
  EXPECT_NE(m.find("model.checkpoint_fetch: says how to fetch model.checkpoint, which the spec "
                   "does not name"),
            std::string::npos)
      << m;
}

// builtin_weights: false without a checkpoint is refused where it is written, not planned
// without weights.
TEST(SpecCheckpoint, CheckpointWeightsWithoutACheckpointAreRefused) {
  const std::string m = message_of(
      "model:\n  name: m\n  num_layers: 2\n  hidden_size: 256\n  num_heads: 4\n"
      "  intermediate_size: 512\n  vocab_size: 1000\n  builtin_weights: false\n");
  EXPECT_NE(m.find(":8:20: model.builtin_weights: false asks for a checkpoint's weights, and "
                   "the spec names no model.checkpoint"),
            std::string::npos)
      << m;
}

TEST(SpecCheckpoint, AgreeingDuplicatesAreFine) {
  const EngineSpec spec = spec_of("model:\n  checkpoint: " + kCheckpoints + R"(llama-3.1-8b
  num_layers: 32
  hidden_size: 4096
  num_heads: 32
  num_kv_heads: 8
  head_size: 128
  intermediate_size: 14336
  vocab_size: 128256
  tie_word_embeddings: false
  rope_theta: 500000.0
  rms_norm_eps: 1.0e-5
  max_position_embeddings: 131072
  attention:
    sliding_window: 0
)");
  EXPECT_EQ(spec.model.num_layers, 32);
  const EngineSpec mistral = spec_of("model:\n  checkpoint: " + kCheckpoints +
                                     "mistral-7b-v0.1\n  attention:\n    sliding_window: 4096\n");
  EXPECT_EQ(mistral.model.layers[5].sliding_window, 4096);
}

TEST(SpecCheckpoint, DisagreementsNameTheSpecLineAndTheCheckpointField) {
  const std::string m = message_of("model:\n  checkpoint: " + kCheckpoints + R"(llama-3.1-8b
  num_layers: 30
  rope_theta: 10000.0
  tie_word_embeddings: true
  head_size: 64
)");
  const std::string json = config_json("llama-3.1-8b");
  EXPECT_NE(m.find(kSpecName + ":3:15: model.num_layers: 30 disagrees with the checkpoint's 32 (" +
                   json + ":17:24: num_hidden_layers)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(kSpecName +
                   ":4:15: model.rope_theta: 10000 disagrees with the checkpoint's "
                   "500000 (" +
                   json + ":28:17: rope_theta)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(kSpecName +
                   ":5:24: model.tie_word_embeddings: true disagrees with the "
                   "checkpoint's false (" +
                   json + ":29:26: tie_word_embeddings)"),
            std::string::npos)
      << m;
  // A field the checkpoint derives rather than states names the file.
  EXPECT_NE(m.find(kSpecName + ":6:14: model.head_size: 64 disagrees with the checkpoint's 128 (" +
                   json + ")"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("has 4 problems"), std::string::npos) << m;
}

TEST(SpecCheckpoint, WindowsMustAgreeWithTheCheckpoints) {
  const std::string json = config_json("mistral-7b-v0.1");
  std::string m = message_of("model:\n  checkpoint: " + kCheckpoints +
                             "mistral-7b-v0.1\n  attention:\n    sliding_window: 0\n");
  EXPECT_NE(m.find(kSpecName +
                   ":4:21: model.attention.sliding_window: 0 disagrees with the "
                   "checkpoint's sliding window of 4096 tokens (" +
                   json + ":18:21: sliding_window)"),
            std::string::npos)
      << m;
  m = message_of("model:\n  checkpoint: " + kCheckpoints +
                 "llama-3.1-8b\n  attention:\n    sliding_window_pattern: [4096, 0]\n");
  EXPECT_NE(m.find("model.attention.sliding_window_pattern: layer 0's window 4096 disagrees "
                   "with the checkpoint, which has no sliding window (" +
                   config_json("llama-3.1-8b") + ")"),
            std::string::npos)
      << m;
  m = message_of("model:\n  checkpoint: " + kCheckpoints + R"(llama-3.1-8b
  mla: {kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128}
)");
  EXPECT_NE(m.find("model.mla: the checkpoint's architecture 'LlamaForCausalLM' has no "
                   "multi-head latent attention"),
            std::string::npos)
      << m;
}

TEST(SpecCheckpoint, TheCheckpointsProblemsAreTheSpecs) {
  // Unreadable: one problem, and no "required" noise about the sizes it would have given.
  std::string m = message_of("model:\n  checkpoint: absent.json\n");
  EXPECT_NE(m.find(kSpecName + ":2:15: model.checkpoint: cannot read checkpoint '" +
                   (kSource / "tests" / "specs" / "absent.json").string() +
                   "': No such file or directory"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("has 1 problem:"), std::string::npos) << m;
  // Problems inside it name the spec's line, then the checkpoint's file, line and field.
  const fs::path bad = testing::scratch_dir() / "bad.json";
  {
    const std::string text =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": \"32\"}";
    testing::scratch(std::vector<char>(text.begin(), text.end()), "bad.json");
  }
  m = message_of("model:\n  checkpoint: " + bad.string() + "\n");
  EXPECT_NE(m.find(kSpecName + ":2:15: model.checkpoint: " + bad.string() +
                   ":1:62: num_hidden_layers: expected an integer, got the string '32'"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(kSpecName + ":2:15: model.checkpoint: " + bad.string() +
                   ":1:1: hidden_size: is required but missing"),
            std::string::npos)
      << m;
  // Past what a spec may hold.
  {
    const std::string text =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 5000, "
        "\"hidden_size\": 64, \"num_attention_heads\": 2, \"intermediate_size\": 128, "
        "\"vocab_size\": 100, \"max_position_embeddings\": 1, \"rms_norm_eps\": 1e-5}";
    testing::scratch(std::vector<char>(text.begin(), text.end()), "bad.json");
  }
  m = message_of("model:\n  checkpoint: " + bad.string() + "\n");
  EXPECT_NE(m.find("model.checkpoint: " + bad.string() +
                   ":1:62: num_hidden_layers: 5000 is outside [1, 4096], the range of "
                   "model.num_layers"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("max_position_embeddings: 1 is outside [2, 268435456]"), std::string::npos) << m;
  EXPECT_EQ(m.find("scheduler.max_model_len"), std::string::npos) << "no noise: " << m;
  m = message_of("model:\n  checkpoint: [a, b]\n");
  EXPECT_NE(m.find(kSpecName + ":2:15: model.checkpoint: expected a string, got a list"),
            std::string::npos)
      << m;
}

TEST(SpecCheckpoint, AHeadSizeTheBackendRefusesPointsAtTheCheckpointLine) {
  // The paged backend (named by its alias) runs head sizes 64, 128 and 256; tiny-qwen2's is 32.
  const std::string m = message_of("model:\n  checkpoint: " + kCheckpoints +
                                   "tiny-qwen2.gguf\n  attention:\n    backend: paged_decode\n");
  EXPECT_NE(m.find(kSpecName + ":2:15: model.head_size: layers 0..2: backend 'paged' "
                               "cannot run head size 32"),
            std::string::npos)
      << m;
}

// A spec made for a checkpoint (freezeframe generate): the checkpoint's model on its own
// weights, the scheduler and cache as asked, and a checkpoint that cannot be read refused at
// model.checkpoint.
TEST(SpecForCheckpoint, RunsTheCheckpointsWeights) {
  const std::string folder =
      (kSource / "tests" / "fixtures" / "checkpoints" / "weights" / "llama").string();
  CheckpointSpecOptions options;
  options.max_model_len = 100;
  options.max_num_seqs = 1;
  options.max_num_batched_tokens = 256;
  options.backend = "reference";
  options.memory_budget = "512MiB";
  const EngineSpec spec = spec_for_checkpoint(folder, options);
  EXPECT_FALSE(spec.model.builtin_weights);
  ASSERT_TRUE(spec.model.checkpoint);
  EXPECT_EQ(spec.model.checkpoint->config_file, (fs::path(folder) / "config.json").string());
  EXPECT_EQ(spec.scheduler.max_model_len, 100);
  EXPECT_EQ(spec.scheduler.max_num_seqs, 1);
  EXPECT_EQ(spec.scheduler.max_num_batched_tokens, 256);
  EXPECT_EQ(spec.model.layers[0].backend, "reference");
  EXPECT_EQ(spec.cuda_graphs.mode, CudaGraphMode::kFullAndPiecewise);
  const MemoryPlan plan = plan_memory(spec, kDevice);
  EXPECT_EQ(plan.capacity_bytes(), std::int64_t(512) << 20);
  EXPECT_NE(plan.find("weights"), nullptr) << "the checkpoint's weights are planned";
  // By default the context is the checkpoint's, and the backend the paged one where it runs
  // the head size (this tiny Llama's 32 it does not).
  const EngineSpec whole = spec_for_checkpoint(folder);
  EXPECT_EQ(whole.scheduler.max_model_len, whole.model.checkpoint->max_position_embeddings);
  EXPECT_EQ(whole.model.layers[0].backend, "reference");
  const EngineSpec llama31 = spec_for_checkpoint(config_json("llama-3.1-8b"));
  EXPECT_EQ(llama31.model.layers[0].backend, "paged");
  EXPECT_TRUE(llama31.model.checkpoint->rope_scaling.has_value())
      << "the spec is made; the engine refuses its weights (RoPE scaling) when built";

  try {
    (void)spec_for_checkpoint("no/such/model.gguf");
    ADD_FAILURE() << "a missing checkpoint was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the spec written for no/such/model.gguf has 1 problem:"), std::string::npos)
        << m;
    EXPECT_NE(m.find("cannot read checkpoint '"), std::string::npos) << m;
    EXPECT_NE(m.find("model.gguf"), std::string::npos) << m;
  }
  // Paths with quotes and backslashes survive the spec's text.
  EXPECT_NE(checkpoint_spec_text("/a \"b\"\\c").find(R"("/a \"b\"\\c")"), std::string::npos);
}

/// A small Llama GGUF (metadata only) of `layers` layers.
std::string gguf_of_layers(std::uint32_t layers) {
  testing::GgufBuilder g;
  g.str("general.architecture", "llama")
      .u32("llama.block_count", layers)
      .u32("llama.context_length", 2048)
      .u32("llama.embedding_length", 256)
      .u32("llama.feed_forward_length", 512)
      .u32("llama.attention.head_count", 8)
      .f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .u32("llama.vocab_size", 1000);
  return g.write("layers.gguf");
}

TEST(SpecCheckpoint, AGgufValueOutsideTheSpecsRangeIsNamedByItsKey) {
  const std::string gguf = gguf_of_layers(100000);
  const std::string expected =
      gguf +
      ": metadata 'llama.block_count': 100000 is outside [1, 4096], the range of "
      "model.num_layers";
  // A spec written for the checkpoint: no line and column of text no one saw.
  try {
    (void)spec_for_checkpoint(gguf);
    ADD_FAILURE() << "100000 layers were accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the spec written for " + gguf + " has 1 problem:\n  " + expected),
              std::string::npos)
        << m;
    EXPECT_EQ(m.find(".gguf:2:"), std::string::npos) << m;
  }
  // A spec file naming it: the spec's line, then the key.
  const std::string m = message_of("model:\n  checkpoint: " + gguf + "\n");
  EXPECT_NE(m.find(kSpecName + ":2:15: model.checkpoint: " + expected), std::string::npos) << m;
}

}  // namespace
}  // namespace freezeframe
