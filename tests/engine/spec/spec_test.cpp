// engine/: reading specs — the shipped configs, defaults, per-layer patterns and overrides, and
// byte sizes as people write them.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "freezeframe/base/error.h"
#include "freezeframe/engine/spec/byte_size.h"
#include "freezeframe/engine/spec/spec.h"

namespace freezeframe {
namespace {

const std::string kConfigs = FREEZEFRAME_SOURCE_DIR "/configs/";

/// A small valid spec; tests append or replace lines.
constexpr const char* kTiny = R"(model:
  name: tiny
  num_layers: 6
  hidden_size: 1024
  num_heads: 8
  num_kv_heads: 2
  intermediate_size: 2048
  vocab_size: 32000
  max_position_embeddings: 4096
)";

std::string message_of(const std::string& yaml) {
  try {
    (void)parse_spec(yaml, "inline.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "the spec was accepted:\n" << yaml;
  return {};
}

TEST(Spec, Llama31_8bMatchesItsPublishedConfig) {
  const EngineSpec spec = load_spec(kConfigs + "llama-3.1-8b.yaml");
  const ModelSpec& m = spec.model;
  EXPECT_EQ(m.num_layers, 32);
  EXPECT_EQ(m.hidden_size, 4096);
  EXPECT_EQ(m.num_heads, 32);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_size, 128);
  EXPECT_EQ(m.intermediate_size, 14336);
  EXPECT_EQ(m.vocab_size, 128256);
  EXPECT_EQ(m.dtype, DType::kBF16);
  EXPECT_FLOAT_EQ(m.rope_theta, 500000.0f);
  EXPECT_EQ(spec.scheduler.max_model_len, 131072) << "defaults to max_position_embeddings";
  ASSERT_EQ(m.layers.size(), 32u);
  EXPECT_EQ(m.layers[31].backend, "paged");
  EXPECT_EQ(m.layers[0].sliding_window, 0);
  EXPECT_EQ(spec.kv_cache_dtype(), DType::kBF16) << "auto resolves to the model dtype";
  EXPECT_EQ(m.residual_dtype(), DType::kBF16) << "the residual stream in the model dtype";
}

TEST(Spec, ResidualStreamInF32) {
  EXPECT_EQ(parse_spec(kTiny).model.residual_dtype(), parse_spec(kTiny).model.dtype);
  std::string text = kTiny;
  const std::string anchor = "model:\n";
  ASSERT_EQ(text.rfind(anchor, 0), 0u);
  text.insert(anchor.size(), "  residual_dtype: f32\n");
  const EngineSpec spec = parse_spec(text);
  EXPECT_EQ(spec.model.dtype, DType::kBF16);
  EXPECT_EQ(spec.model.residual_dtype(), DType::kF32);
}

TEST(Spec, QuantizationFp8IsTheProjectionsOnly) {
  EXPECT_FALSE(parse_spec(kTiny).model.fp8_linear);
  std::string text = kTiny;
  text.insert(std::string("model:\n").size(), "  quantization: fp8\n");
  const EngineSpec spec = parse_spec(text);
  EXPECT_TRUE(spec.model.fp8_linear);
  EXPECT_EQ(spec.model.dtype, DType::kBF16) << "the rest of the model keeps its dtype";
}

TEST(Spec, EveryShippedConfigLoads) {
  for (const char* name : {"llama-3.1-8b", "qwen2.5-7b", "mistral-7b-v0.1", "deepseek-v2-lite"}) {
    EXPECT_NO_THROW((void)load_spec(kConfigs + name + ".yaml")) << name;
  }
  const EngineSpec qwen = load_spec(kConfigs + "qwen2.5-7b.yaml");
  EXPECT_EQ(qwen.model.num_kv_heads, 4);
  EXPECT_EQ(qwen.model.intermediate_size, 18944);
  EXPECT_EQ(qwen.scheduler.max_model_len, 32768);
  const EngineSpec mistral = load_spec(kConfigs + "mistral-7b-v0.1.yaml");
  for (const LayerSpec& l : mistral.model.layers) EXPECT_EQ(l.sliding_window, 4096);
}

TEST(Spec, DeepSeekV2LiteIsMlaWithADenseFirstLayerThenExperts) {
  const EngineSpec spec = load_spec(kConfigs + "deepseek-v2-lite.yaml");
  ASSERT_TRUE(spec.model.is_mla());
  EXPECT_EQ(spec.model.mla->kv_lora_rank, 512);
  EXPECT_EQ(spec.model.mla->q_lora_rank, 0) << "q_lora_rank: null means no query compression";
  EXPECT_EQ(spec.model.mla->qk_rope_head_dim, 64);
  EXPECT_EQ(spec.model.num_kv_heads, 1);
  EXPECT_EQ(spec.model.layers[0].mlp, MlpKind::kGatedSilu);
  EXPECT_EQ(spec.model.layers[0].intermediate_size, 10944);
  for (int l = 1; l < 27; ++l) EXPECT_EQ(spec.model.layers[l].mlp, MlpKind::kMoe) << l;
  ASSERT_TRUE(spec.model.moe.has_value());
  EXPECT_EQ(spec.model.moe->num_experts, 64);
  EXPECT_EQ(spec.model.moe->experts_per_token, 6);
  EXPECT_EQ(spec.model.moe->intermediate_size, 1408);
  EXPECT_EQ(spec.model.moe->num_shared_experts, 2);
  EXPECT_EQ(spec.model.layers[5].backend, "reference_mla");
}

// The world sizes, read before any device is asked: absent sections are 1; an unreadable file
// or text that is not a spec gives nothing (load_spec reports it).
TEST(Spec, ParallelSizesAreReadWithoutTheRest) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + name;
    std::ofstream(path) << text;
    return path;
  };
  const auto both = read_parallel_sizes(
      write("parallel.yaml", "model:\n  name: x\ntp:\n  world_size: 4\ndcp:\n  world_size: 2\n"));
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->tp, 4);
  EXPECT_EQ(both->dcp, 2);
  const auto none = read_parallel_sizes(kConfigs + "llama-3.1-8b.yaml");
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->tp, 1);
  EXPECT_EQ(none->dcp, 1);
  EXPECT_FALSE(read_parallel_sizes(dir + "no-such-spec.yaml").has_value());
  EXPECT_FALSE(read_parallel_sizes(write("bad.yaml", "tp: [unclosed\n")).has_value());
  EXPECT_FALSE(read_parallel_sizes(write("word.yaml", "tp:\n  world_size: four\n")).has_value());
}

TEST(Spec, DefaultsAreTheDocumentedOnes) {
  const EngineSpec spec = parse_spec(kTiny);
  EXPECT_EQ(spec.model.head_size, 128) << "hidden_size / num_heads";
  EXPECT_EQ(spec.cache.block_size, 16);
  EXPECT_DOUBLE_EQ(spec.cache.memory_budget.fraction, 0.9);
  EXPECT_EQ(spec.scheduler.max_num_seqs, 256);
  EXPECT_EQ(spec.scheduler.max_num_batched_tokens, 8192);
  EXPECT_EQ(spec.cuda_graphs.mode, CudaGraphMode::kFullAndPiecewise);
  EXPECT_EQ(spec.tp.world_size, 1);
  EXPECT_EQ(spec.dcp.world_size, 1);
  EXPECT_EQ(spec.dcp.interleave_size, 1);
  // min(2 · 256 sequences, 512) = 512: 1, 2, 4, 8..248 by 8, 256..512 by 16.
  const std::vector<int>& sizes = spec.cuda_graphs.capture_sizes;
  ASSERT_EQ(sizes.size(), 3u + 31u + 17u);
  EXPECT_EQ(sizes[0], 1);
  EXPECT_EQ(sizes[3], 8);
  EXPECT_EQ(sizes[33], 248);
  EXPECT_EQ(sizes[34], 256);
  EXPECT_EQ(sizes.back(), 512);
  EXPECT_EQ(spec.cuda_graphs.max_capture_size, 512);
  EXPECT_EQ(spec.cuda_graphs.piecewise_sharing, PiecewiseSharing::kAcrossSizes);
  EXPECT_FALSE(spec.cuda_graphs.layer_by_layer);
}

TEST(Spec, CaptureLadderIsCappedByTokensAndFollowsMaxCaptureSize) {
  EXPECT_EQ(default_capture_sizes(4), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(default_capture_sizes(20), (std::vector<int>{1, 2, 4, 8, 16}));
  const EngineSpec small = parse_spec(
      std::string(kTiny) + "scheduler:\n  max_num_seqs: 8\n  max_num_batched_tokens: 12\n");
  EXPECT_EQ(small.cuda_graphs.capture_sizes, (std::vector<int>{1, 2, 4, 8})) << "min(16, 12)";
  const EngineSpec explicit_max =
      parse_spec(std::string(kTiny) + "cuda_graphs:\n  max_capture_size: 40\n");
  EXPECT_EQ(explicit_max.cuda_graphs.capture_sizes.back(), 40);
  const EngineSpec none = parse_spec(std::string(kTiny) + "cuda_graphs:\n  mode: none\n");
  EXPECT_TRUE(none.cuda_graphs.capture_sizes.empty());
  EXPECT_EQ(none.cuda_graphs.max_capture_size, 0);
  const EngineSpec own =
      parse_spec(std::string(kTiny) + "cuda_graphs:\n  share_piecewise_executables: false\n");
  EXPECT_EQ(own.cuda_graphs.piecewise_sharing, PiecewiseSharing::kNone);
  const EngineSpec by_layer = parse_spec(
      std::string(kTiny) + "cuda_graphs:\n  share_piecewise_executables: across_layers\n");
  EXPECT_EQ(by_layer.cuda_graphs.piecewise_sharing, PiecewiseSharing::kAcrossLayers);
  // kTiny has 9 lines, so the option's value sits on line 11, column 32.
  const std::string msg =
      message_of(std::string(kTiny) + "cuda_graphs:\n  share_piecewise_executables: sometimes\n");
  EXPECT_NE(msg.find("inline.yaml:11:32: cuda_graphs.share_piecewise_executables: expected one "
                     "of across_sizes, across_layers, none, true, false; got 'sometimes'"),
            std::string::npos)
      << msg;
}

TEST(Spec, SlidingWindowPatternAlternatesLikeGemma2) {
  const EngineSpec spec = parse_spec(std::string(kTiny) +
                                     "  attention:\n"
                                     "    sliding_window_pattern: [4096, 0]\n"
                                     "    logits_soft_cap: 50.0\n");
  for (int l = 0; l < 6; ++l) {
    EXPECT_EQ(spec.model.layers[l].sliding_window, l % 2 == 0 ? 4096 : 0) << "layer " << l;
    EXPECT_FLOAT_EQ(spec.model.layers[l].logits_soft_cap, 50.0f);
  }
}

TEST(Spec, LayerOverridesApplyInOrderToIndicesAndRanges) {
  const EngineSpec spec = parse_spec(std::string(kTiny) +
                                     "  layers:\n"
                                     "    - layers: \"2..4\"\n"
                                     "      sliding_window: 256\n"
                                     "    - layers: [4, 5]\n"
                                     "      kv_sharing_target: 1\n"
                                     "      alibi: true\n"
                                     "    - layers: 0\n"
                                     "      mlp: none\n");
  const auto& L = spec.model.layers;
  EXPECT_EQ(L[1].sliding_window, 0);
  EXPECT_EQ(L[2].sliding_window, 256);
  EXPECT_EQ(L[4].sliding_window, 256);
  EXPECT_EQ(L[4].kv_sharing_target, 1);
  EXPECT_EQ(L[5].kv_sharing_target, 1);
  EXPECT_TRUE(L[5].alibi);
  EXPECT_EQ(L[3].kv_sharing_target, -1);
  EXPECT_EQ(L[0].mlp, MlpKind::kNone);
  EXPECT_EQ(L[1].mlp, MlpKind::kGatedSilu);
}

TEST(Spec, BudgetIsAFractionOrASize) {
  EXPECT_DOUBLE_EQ(parse_spec(std::string(kTiny) + "cache:\n  memory_budget: 0.5\n")
                       .cache.memory_budget.fraction,
                   0.5);
  const EngineSpec bytes = parse_spec(std::string(kTiny) + "cache:\n  memory_budget: 70GiB\n");
  EXPECT_EQ(bytes.cache.memory_budget.bytes, std::int64_t(70) << 30);
  EXPECT_EQ(bytes.cache.memory_budget.resolve(std::int64_t(80) << 30), std::int64_t(70) << 30);
  const EngineSpec plain = parse_spec(std::string(kTiny) + "cache:\n  memory_budget: 1000000\n");
  EXPECT_EQ(plain.cache.memory_budget.bytes, 1000000);
}

TEST(Spec, AllProblemsAreReportedTogetherWithLocations) {
  const std::string msg = message_of(
      "model:\n"
      "  num_layers: 0\n"
      "  hidden_size: 1024\n"
      "  num_heads: 8\n"
      "  vocab_size: 32000\n"
      "  intermediate_size: 100\n"
      "  max_position_embeddings: 4096\n"
      "cache:\n"
      "  block_size: 24\n"
      "scheduler:\n"
      "  max_num_seqz: 4\n");
  EXPECT_NE(msg.find("has 3 problems"), std::string::npos) << msg;
  EXPECT_NE(msg.find("inline.yaml:2:15: model.num_layers: must be in [1, 4096], got 0"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("inline.yaml:9:15: cache.block_size: must be a power of two"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("inline.yaml:11:3: scheduler.max_num_seqz: unknown key 'max_num_seqz'; did "
                     "you mean 'max_num_seqs'?"),
            std::string::npos)
      << msg;
}

TEST(Spec, TheExampleInTheDocsIsValid) {
  std::ifstream in(FREEZEFRAME_SOURCE_DIR "/docs/spec.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::size_t begin = doc.find("```yaml\n");
  ASSERT_NE(begin, std::string::npos) << "docs/spec.md has no yaml example";
  const std::size_t end = doc.find("```", begin + 8);
  const EngineSpec spec = parse_spec(doc.substr(begin + 8, end - begin - 8), "docs/spec.md");
  EXPECT_EQ(spec.model.layers[24].kv_sharing_target, 19);
  EXPECT_EQ(spec.model.layers[2].sliding_window, 4096);
  EXPECT_EQ(spec.model.layers[3].sliding_window, 0);
  EXPECT_EQ(spec.cuda_graphs.max_capture_size, 128);
}

TEST(Spec, MissingFileIsNotFound) {
  try {
    (void)load_spec("/nonexistent/spec.yaml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

TEST(ByteSize, UnitsAndMistakes) {
  EXPECT_EQ(parse_byte_size("141GiB"), std::int64_t(141) << 30);
  EXPECT_EQ(parse_byte_size("80GB"), std::int64_t(80'000'000'000));
  EXPECT_EQ(parse_byte_size("80G"), std::int64_t(80'000'000'000));
  EXPECT_EQ(parse_byte_size("512 MiB"), std::int64_t(512) << 20);
  EXPECT_EQ(parse_byte_size("1.5KiB"), 1536);
  EXPECT_EQ(parse_byte_size("4096"), 4096);
  EXPECT_EQ(parse_byte_size("4096B"), 4096);
  EXPECT_FALSE(parse_byte_size(""));
  EXPECT_FALSE(parse_byte_size("GiB"));
  EXPECT_FALSE(parse_byte_size("-4GiB"));
  EXPECT_FALSE(parse_byte_size("4 parsecs"));
  EXPECT_FALSE(parse_byte_size("1.2.3GB"));
  EXPECT_FALSE(parse_byte_size("0.9")) << "a fraction is not a size";
  EXPECT_FALSE(parse_byte_size("99999999TiB"));
  EXPECT_FALSE(parse_byte_size(std::string(400, '9') + "GiB")) << "past a double";
  EXPECT_FALSE(parse_byte_size("0." + std::string(400, '0') + "1GiB"));
}

}  // namespace
}  // namespace freezeframe
