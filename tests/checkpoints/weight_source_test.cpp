// engine/: a checkpoint's weights under the model program's names (WeightSource) against the
// fixtures of scripts/fixtures/make_weight_fixtures.py: safetensors shards as they are; GGUF
// mapped from llama.cpp's names, its exact tensors equal to the safetensors bit for bit (the
// q rows through the converter's rotary permutation and back) and its quantised ones equal to
// the GGUF reader's values permuted the converter's way again; Qwen2 read unpermuted, with its
// biases; the real SmolLM2 GGUF where it has been fetched; rows read in any chunks joining to
// the whole; conversions rounding as CUDA's do.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/base/dtype.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/host_half.h"
#include "freezeframe/checkpoints/gguf_file.h"
#include "freezeframe/core/element_value.h"
#include "freezeframe/engine/model/checkpoint_weights.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "support/smollm2.h"
#include "support/weight_fixtures.h"

namespace freezeframe {
namespace {

using testing::read_all;
using testing::weight_fixtures;
using testing::weights_spec;

std::unique_ptr<WeightSource> source_of(const std::string& checkpoint) {
  return WeightSource::open(read_checkpoint_config((weight_fixtures() / checkpoint).string()));
}

std::vector<float> as_floats(const std::vector<std::byte>& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

/// llama.cpp's converter's layout of a q or k projection [heads · d, cols], step by step as
/// its script does it: reshape to (heads, 2, d / 2, cols), swap axes 1 and 2, reshape back.
std::vector<float> converter_permute(const std::vector<float>& w, std::int64_t heads,
                                     std::int64_t rows, std::int64_t cols) {
  const std::int64_t half = rows / heads / 2;
  std::vector<float> out(w.size());
  // out[h][b][a][c] (shape (heads, d/2, 2, cols)) = w[h][a][b][c] (shape (heads, 2, d/2, cols)).
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t a = 0; a < 2; ++a) {
      for (std::int64_t b = 0; b < half; ++b) {
        for (std::int64_t c = 0; c < cols; ++c) {
          out[((h * half + b) * 2 + a) * cols + c] = w[((h * 2 + a) * half + b) * cols + c];
        }
      }
    }
  }
  return out;
}

TEST(WeightSource, SafetensorsShardsUnderTheProgramsNames) {
  const auto source = source_of("llama");
  EXPECT_EQ(source->format(), "safetensors");
  EXPECT_EQ(source->tensors().size(), 12u) << "embedding, final norm, LM head, 9 of the layer";
  const WeightTensor* q = source->find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, "BF16");
  EXPECT_EQ(q->shape, (std::vector<std::int64_t>{64, 32}));
  EXPECT_EQ(q->rows(), 64);
  EXPECT_EQ(q->row_elements(), 32);
  EXPECT_TRUE(q->file.ends_with("model-00001-of-00002.safetensors"));
  EXPECT_EQ(source->find("model.layers.0.self_attn.o_proj.weight")->type, "F16");
  EXPECT_EQ(source->stored_name("lm_head.weight"), "lm_head.weight");

  const EngineSpec spec = weights_spec("llama");
  const ModelProgram program = build_model_program(spec);
  const std::vector<const WeightTensor*> matched = match_weights(*source, program);
  ASSERT_EQ(matched.size(), program.weights.size());
  for (std::size_t w = 0; w < matched.size(); ++w) {
    EXPECT_EQ(matched[w]->name, hf_weight_name(program.weights[w]));
    EXPECT_EQ(matched[w]->shape, program.weights[w].shape);
  }
  // Every tensor as bf16 (the model's dtype) is its f32 value rounded once, in any chunks.
  for (const WeightTensor& t : source->tensors()) {
    const std::vector<float> f32 = as_floats(read_all(*source, t, DType::kF32));
    for (const std::int64_t chunk : {1, 3, 1 << 30}) {
      const std::vector<std::byte> bf16 = read_all(*source, t, DType::kBF16, chunk);
      for (std::size_t i = 0; i < f32.size(); ++i) {
        std::uint16_t expected, got;
        store_from_float(&expected, DType::kBF16, f32[i]);
        std::memcpy(&got, bf16.data() + 2 * i, 2);
        ASSERT_EQ(got, expected) << t.name << " value " << i << " in chunks of " << chunk;
      }
    }
  }
}

TEST(WeightSource, PlannedWhenTheyComeFromTheCheckpoint) {
  const EngineSpec spec = weights_spec("llama");
  EXPECT_FALSE(spec.model.builtin_weights);
  const MemoryPlan plan = plan_memory(spec, std::int64_t(1) << 30);
  ASSERT_NE(plan.find("weights"), nullptr) << "the checkpoint's weights need their buffers";
  EXPECT_GE(plan.region("weights").bytes, build_model_program(spec).weight_bytes());
}

TEST(WeightSource, GgufExactTensorsAreTheSafetensorsBitForBit) {
  const auto hf = source_of("llama");
  const auto gguf = source_of("llama.gguf");
  EXPECT_EQ(gguf->format(), "GGUF");
  EXPECT_EQ(gguf->tensors().size(), hf->tensors().size());
  // attn_q went through the converter's rotary permutation: equal means it was undone.
  const char* exact[] = {"model.embed_tokens.weight",
                         "model.norm.weight",
                         "model.layers.0.input_layernorm.weight",
                         "model.layers.0.self_attn.q_proj.weight",
                         "model.layers.0.post_attention_layernorm.weight",
                         "model.layers.0.mlp.down_proj.weight"};
  for (const char* name : exact) {
    const WeightTensor* a = hf->find(name);
    const WeightTensor* b = gguf->find(name);
    ASSERT_NE(a, nullptr) << name;
    ASSERT_NE(b, nullptr) << name;
    EXPECT_EQ(a->shape, b->shape) << name;
    for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      EXPECT_EQ(read_all(*hf, *a, dtype), read_all(*gguf, *b, dtype, 5))
          << name << " as " << name_of(dtype);
    }
  }
  const WeightTensor* q = gguf->find("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q->stored_name, "blk.0.attn_q.weight");
  EXPECT_EQ(q->describe(), "blk.0.attn_q.weight (model.layers.0.self_attn.q_proj.weight)");
  EXPECT_EQ(gguf->stored_name("lm_head.weight"), "output.weight");
  EXPECT_EQ(gguf->stored_name("model.layers.12.mlp.up_proj.weight"), "blk.12.ffn_up.weight");
  EXPECT_EQ(gguf->stored_name("model.layers.3.self_attn.k_proj.bias"), "blk.3.attn_k.bias");
  EXPECT_EQ(gguf->stored_name("model.rotary.inv_freq"), "model.rotary.inv_freq");
  (void)match_weights(*gguf, build_model_program(weights_spec("llama.gguf")));
}

// The tiny DeepSeek-V2s transformers saved (scripts/fixtures/make_deepseek_fixtures.py): their
// latent attention, dense first layer, router, experts and shared expert under the program's
// names and shapes.
class TinyDeepSeekV2 : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyDeepSeekV2, IsTheProgramsWeights) {
  const EngineSpec spec = weights_spec(std::string("../../reference/") + GetParam());
  ASSERT_TRUE(spec.model.mla && spec.model.moe);
  EXPECT_EQ(spec.model.layers[0].mlp, MlpKind::kGatedSilu);
  EXPECT_EQ(spec.model.layers[2].mlp, MlpKind::kMoe);
  const auto source = WeightSource::open(*spec.model.checkpoint);
  const ModelProgram program = build_model_program(spec);
  const std::vector<const WeightTensor*> matched = match_weights(*source, program);
  ASSERT_EQ(matched.size(), program.weights.size());
  ASSERT_EQ(matched.size(), source->tensors().size()) << "every tensor of the checkpoint is used";
  for (std::size_t w = 0; w < matched.size(); ++w) {
    EXPECT_EQ(matched[w]->name, hf_weight_name(program.weights[w]));
    EXPECT_EQ(matched[w]->shape, program.weights[w].shape);
  }
  for (const char* name :
       {"model.layers.1.mlp.gate.weight", "model.layers.2.mlp.experts.3.down_proj.weight",
        "model.layers.1.mlp.shared_experts.up_proj.weight",
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight"}) {
    EXPECT_NE(source->find(name), nullptr) << name;
  }
  // The compressed query's projections, where the checkpoint has them.
  const bool q_lora = spec.model.mla->q_lora_rank > 0;
  EXPECT_EQ(source->find("model.layers.0.self_attn.q_a_proj.weight") != nullptr, q_lora);
  EXPECT_EQ(source->find("model.layers.0.self_attn.q_proj.weight") != nullptr, !q_lora);
}

// tiny-deepseek-v2-qlora: the query compressed, the experts chosen within groups;
// -latent512: DeepSeek-V2's latent of 512 + 64.
INSTANTIATE_TEST_SUITE_P(Checkpoints, TinyDeepSeekV2,
                         ::testing::Values("tiny-deepseek-v2", "tiny-deepseek-v2-qlora",
                                           "tiny-deepseek-v2-latent512"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(WeightSource, GgufQuantisedRowsAreTheReadersPermutedBack) {
  const CheckpointConfig config =
      read_checkpoint_config((weight_fixtures() / "llama.gguf").string());
  const auto source = WeightSource::open(config);
  const GgufFile file = GgufFile::open(config.path);
  int quantised = 0;
  for (const WeightTensor& t : source->tensors()) {
    const GgufTensor& stored = file.tensor(t.stored_name);
    EXPECT_EQ(t.type, gguf_type_name(stored.type));
    std::vector<float> expected(static_cast<std::size_t>(stored.elements()));
    file.read_f32(stored, expected);
    std::vector<float> got = as_floats(read_all(*source, t, DType::kF32, 7));
    const bool q = t.stored_name.find(".attn_q.") != std::string::npos;
    const bool k = t.stored_name.find(".attn_k.") != std::string::npos;
    if (q || k) {
      got = converter_permute(got, q ? config.num_heads : config.num_kv_heads, t.rows(),
                              t.row_elements());
    }
    ASSERT_EQ(got.size(), expected.size()) << t.name;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(expected[i]))
          << t.describe() << " value " << i;
    }
    quantised += t.type.starts_with("Q") ? 1 : 0;
  }
  EXPECT_EQ(quantised, 6) << "k, v, o, gate, up and the LM head are quantised";
}

TEST(WeightSource, RotaryRowsUndoTheConvertersPermutation) {
  for (const std::int64_t heads : {1, 3, 8}) {
    for (const std::int64_t d : {2, 8, 64}) {
      const std::int64_t rows = heads * d, cols = 3;
      std::vector<float> w(static_cast<std::size_t>(rows * cols));
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
      const std::vector<float> stored = converter_permute(w, heads, rows, cols);
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t from = gguf_rotary_row(r, d);
        ASSERT_GE(from, 0);
        ASSERT_LT(from, rows);
        for (std::int64_t c = 0; c < cols; ++c) {
          ASSERT_EQ(stored[from * cols + c], w[r * cols + c])
              << heads << " heads of " << d << ": row " << r << " read from " << from;
        }
      }
    }
  }
}

TEST(WeightSource, Qwen2IsReadUnpermutedWithItsBiasesAndTiedHead) {
  const CheckpointConfig config =
      read_checkpoint_config((weight_fixtures() / "qwen2.gguf").string());
  EXPECT_EQ(config.family, ModelFamily::kQwen2);
  const auto source = WeightSource::open(config);
  EXPECT_EQ(source->find("lm_head.weight"), nullptr);
  ASSERT_NE(source->find("model.layers.0.self_attn.q_proj.bias"), nullptr);

  const EngineSpec spec = weights_spec("qwen2.gguf");
  EXPECT_EQ(spec.model.dtype, DType::kF16) << "general.file_type 1: mostly F16";
  const ModelProgram program = build_model_program(spec);
  const std::vector<const WeightTensor*> matched = match_weights(*source, program);
  int biases = 0, lm_heads = 0;
  for (std::size_t w = 0; w < matched.size(); ++w) {
    biases += matched[w]->name.ends_with(".bias") ? 1 : 0;
    lm_heads += program.weights[w].name == "lm_head" ? 1 : 0;
  }
  EXPECT_EQ(biases, 3);
  EXPECT_EQ(lm_heads, 0) << "tied: the LM head is the embedding";

  const GgufFile file = GgufFile::open(config.path);
  for (const WeightTensor& t : source->tensors()) {
    const GgufTensor& stored = file.tensor(t.stored_name);
    std::vector<float> expected(static_cast<std::size_t>(stored.elements()));
    file.read_f32(stored, expected);
    const std::vector<std::byte> f16 = read_all(*source, t, DType::kF16, 4);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      std::uint16_t want, got;
      store_from_float(&want, DType::kF16, expected[i]);
      std::memcpy(&got, f16.data() + 2 * i, 2);
      ASSERT_EQ(got, want) << t.describe() << " value " << i << ": stored as it is";
    }
  }
}

TEST(WeightSource, SmolLM2MatchesItsModelAndReadsBack) {
  const std::string path = testing::smollm2_path(FREEZEFRAME_SOURCE_DIR);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path << " (scripts/fetch-smollm2)";
  const EngineSpec spec = weights_spec(path);
  const CheckpointConfig& config = *spec.model.checkpoint;
  const auto source = WeightSource::open(config);
  const ModelProgram program = build_model_program(spec);
  EXPECT_EQ(match_weights(*source, program).size(), program.weights.size());
  // The last layer's q (9 heads of 64) and k (3 heads), Q4_1, rows put back.
  const GgufFile file = GgufFile::open(path);
  for (const char* name :
       {"model.layers.29.self_attn.q_proj.weight", "model.layers.29.self_attn.k_proj.weight"}) {
    const WeightTensor& t = *source->find(name);
    EXPECT_EQ(t.type, "Q4_1");
    std::vector<float> expected(static_cast<std::size_t>(t.rows() * t.row_elements()));
    file.read_f32(file.tensor(t.stored_name), expected);
    const bool q = t.stored_name.find("attn_q") != std::string::npos;
    const std::vector<float> got =
        converter_permute(as_floats(read_all(*source, t, DType::kF32, 100)),
                          q ? config.num_heads : config.num_kv_heads, t.rows(), t.row_elements());
    EXPECT_EQ(got, expected) << name;
  }
}

TEST(WeightSource, ReferenceCheckpointsGiveEveryWeightAndPlan) {
  // The checkpoints transformers wrote (scripts/fixtures/make_reference_logits.py), with the
  // specs their GPU tests run: every weight matched, and a plan with room for their prompts.
  const std::filesystem::path reference =
      std::filesystem::path(FREEZEFRAME_SOURCE_DIR) / "tests" / "fixtures" / "reference";
  for (const char* checkpoint : {"tiny-llama3", "tiny-llama3.gguf", "tiny-mistral", "tiny-qwen2"}) {
    SCOPED_TRACE(checkpoint);
    const EngineSpec spec = weights_spec((reference / checkpoint).string(),
                                         "  attention:\n    backend: paged_decode\n");
    const auto source = WeightSource::open(*spec.model.checkpoint);
    const ModelProgram program = build_model_program(spec);
    EXPECT_EQ(match_weights(*source, program).size(), program.weights.size());
    (void)plan_memory(spec, std::int64_t(1) << 30);  // refused without room for a sequence
  }
  // The GGUF holds the safetensors' weights bit for bit, its q and k rows put back.
  const auto hf = WeightSource::open(read_checkpoint_config((reference / "tiny-llama3").string()));
  const auto gguf =
      WeightSource::open(read_checkpoint_config((reference / "tiny-llama3.gguf").string()));
  ASSERT_EQ(gguf->tensors().size(), hf->tensors().size());
  for (const WeightTensor& t : hf->tensors()) {
    const WeightTensor* g = gguf->find(t.name);
    ASSERT_NE(g, nullptr) << t.name;
    EXPECT_EQ(read_all(*hf, t, DType::kBF16), read_all(*gguf, *g, DType::kBF16)) << t.name;
  }
}

TEST(WeightSource, ProgramNamesAreHuggingFaces) {
  ProgramWeight w;
  w.name = "layers.2.mlp.down_proj";
  EXPECT_EQ(hf_weight_name(w), "model.layers.2.mlp.down_proj.weight");
  w.name = "layers.2.self_attn.q_proj.bias";
  EXPECT_EQ(hf_weight_name(w), "model.layers.2.self_attn.q_proj.bias");
  w.name = "embed_tokens";
  EXPECT_EQ(hf_weight_name(w), "model.embed_tokens.weight");
  w.name = "lm_head";
  EXPECT_EQ(hf_weight_name(w), "lm_head.weight");
}

TEST(WeightSource, ConversionsRoundAsCudasDo) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -2.5f,
                               65504.0f,
                               65519.0f,
                               65520.0f,
                               1e30f,
                               -1e-30f,
                               6.1e-5f,
                               5.96e-8f,
                               2.98e-8f,
                               2.99e-8f,
                               1e-45f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::max(),
                               3.3895314e38f};
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (!std::isnan(f)) values.push_back(f);
  }
  // Exactly halfway between neighbours, both ways, in f16's normal and subnormal range.
  for (std::uint32_t m = 0; m < 4096; ++m) {
    values.push_back(std::bit_cast<float>(0x3F800000u | (m << 12) | 0x1000u));
    values.push_back(std::bit_cast<float>(0x33800000u + (m << 10)));
    values.push_back(std::bit_cast<float>(0x3F800000u | (m << 15) | 0x8000u));
  }
  for (const float f : values) {
    std::uint16_t want_bf16, want_f16;
    store_from_float(&want_bf16, DType::kBF16, f);
    store_from_float(&want_f16, DType::kF16, f);
    ASSERT_EQ(host_half::f32_to_bf16(f), want_bf16)
        << f << " (bits " << std::hex << std::bit_cast<std::uint32_t>(f) << ")";
    ASSERT_EQ(host_half::f32_to_f16(f), want_f16)
        << f << " (bits " << std::hex << std::bit_cast<std::uint32_t>(f) << ")";
  }
  EXPECT_TRUE(std::isnan(host_half::bf16_to_f32(host_half::f32_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(host_half::f16_to_f32(host_half::f32_to_f16(std::nanf("")))));
}

}  // namespace
}  // namespace freezeframe
