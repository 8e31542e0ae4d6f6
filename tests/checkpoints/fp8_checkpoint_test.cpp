// checkpoints/: fp8 checkpoints (scripts/fixtures/make_fp8_fixtures.py) read with their
// schemes: compressed-tensors per channel with KV scales, per tensor with static input scales,
// the "fp8" method's blocks that do not divide the weights. Each fp8 weight is read dequantised
// bit for bit as numpy computes it (stored value × scale, in f32), in any chunks of rows, and
// rounded to bf16 as CUDA rounds; the other tensors are the unquantised checkpoint's. What is
// not a scheme read, or a scale that does not fit it, is refused naming the field or tensor.

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/base/host_half.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/checkpoints/safetensors_file.h"
#include "freezeframe/checkpoints/weight_source.h"
#include "freezeframe/engine/model/checkpoint_weights.h"
#include "freezeframe/engine/model/model_program.h"
#include "support/scratch_files.h"
#include "support/weight_fixtures.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
using testing::read_all;
using testing::weight_fixtures;
using Scales = Fp8Scheme::WeightScales;
using Activations = Fp8Scheme::Activations;

std::vector<float> values(const SafetensorsFile& file, std::string_view name) {
  const SafetensorsTensor& t = file.tensor(name);
  std::vector<float> v(static_cast<std::size_t>(t.elements()));
  file.read_f32(t, v);
  return v;
}

CheckpointConfig config_of(const std::string& folder) {
  return read_checkpoint_config((weight_fixtures() / folder).string());
}

TEST(Fp8Checkpoint, SchemesAreReadAsTheirConfigsState) {
  const CheckpointConfig channel = config_of("llama-fp8-channel");
  ASSERT_TRUE(channel.fp8.has_value());
  EXPECT_EQ(channel.fp8->method, "compressed-tensors");
  EXPECT_EQ(channel.fp8->weight_scales, Scales::kChannel);
  EXPECT_EQ(channel.fp8->activations, Activations::kDynamicPerToken);
  EXPECT_TRUE(channel.fp8->kv_cache_scales);
  EXPECT_EQ(channel.fp8->scale_suffix, "weight_scale");
  EXPECT_EQ(channel.fp8->ignore, std::vector<std::string>{"lm_head"});
  EXPECT_NE(channel.fp8->origin.find("config.json:"), std::string::npos) << channel.fp8->origin;

  const CheckpointConfig tensor = config_of("llama-fp8-tensor");
  ASSERT_TRUE(tensor.fp8.has_value());
  EXPECT_EQ(tensor.fp8->weight_scales, Scales::kTensor);
  EXPECT_EQ(tensor.fp8->activations, Activations::kStaticPerTensor);
  EXPECT_FALSE(tensor.fp8->kv_cache_scales);

  const CheckpointConfig block = config_of("llama-fp8-block");
  ASSERT_TRUE(block.fp8.has_value());
  EXPECT_EQ(block.fp8->method, "fp8");
  EXPECT_EQ(block.fp8->weight_scales, Scales::kBlock);
  EXPECT_EQ(block.fp8->block_rows, 24);
  EXPECT_EQ(block.fp8->block_cols, 8);
  EXPECT_EQ(block.fp8->activations, Activations::kDynamicPerTokenGroup);
  EXPECT_EQ(block.fp8->scale_suffix, "weight_scale_inv");
  EXPECT_EQ(describe(*block.fp8),
            "fp8 e4m3 weights, a scale per block of 24 x 8, activations quantised per token and "
            "group of columns at run time (fp8)");

  EXPECT_FALSE(config_of("llama").fp8.has_value());
}

class Fp8CheckpointWeights : public ::testing::TestWithParam<const char*> {};

TEST_P(Fp8CheckpointWeights, ReadDequantisedBitForBitInAnyChunks) {
  const CheckpointConfig config = config_of(GetParam());
  const auto source = WeightSource::open(config);
  const SafetensorsFile expected =
      SafetensorsFile::open((weight_fixtures() / GetParam() / "dequantised.safetensors").string());
  ASSERT_EQ(expected.tensors().size(), 7u) << "the seven linear layers of the one layer";
  for (const SafetensorsTensor& e : expected.tensors()) {
    SCOPED_TRACE(e.name);
    const WeightTensor* t = source->find(e.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, "F8_E4M3");
    EXPECT_TRUE(t->unreadable.empty()) << t->unreadable;
    EXPECT_EQ(t->scale, e.name.substr(0, e.name.size() - 6) + config.fp8->scale_suffix);
    const std::vector<float> want = values(expected, e.name);
    for (const std::int64_t chunk : {std::int64_t(1 << 20), std::int64_t(5), std::int64_t(1)}) {
      const std::vector<std::byte> got = read_all(*source, *t, DType::kF32, chunk);
      ASSERT_EQ(got.size(), want.size() * 4);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << "chunk " << chunk;
    }
    const std::vector<std::byte> bf16 = read_all(*source, *t, DType::kBF16, 7);
    for (std::size_t i = 0; i < want.size(); ++i) {
      std::uint16_t b;
      std::memcpy(&b, bf16.data() + 2 * i, 2);
      ASSERT_EQ(b, host_half::f32_to_bf16(want[i])) << "element " << i;
    }
  }
}

TEST_P(Fp8CheckpointWeights, OtherTensorsAreTheUnquantisedCheckpoints) {
  const auto fp8 = WeightSource::open(config_of(GetParam()));
  const auto base = WeightSource::open(config_of("llama"));
  for (const char* name : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                           "model.layers.0.input_layernorm.weight"}) {
    SCOPED_TRACE(name);
    const WeightTensor* a = fp8->find(name);
    const WeightTensor* b = base->find(name);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_TRUE(a->scale.empty());
    EXPECT_EQ(read_all(*fp8, *a, DType::kF32, 1 << 20), read_all(*base, *b, DType::kF32, 1 << 20));
  }
}

TEST_P(Fp8CheckpointWeights, MatchTheModelProgramAsTheUnquantisedCheckpointDoes) {
  const CheckpointConfig config = config_of(GetParam());
  const auto source = WeightSource::open(config);
  const EngineSpec spec = testing::weights_spec(GetParam());
  const ModelProgram program = build_model_program(spec);
  const std::vector<const WeightTensor*> matched = match_weights(*source, program);
  ASSERT_EQ(matched.size(), program.weights.size());
}

INSTANTIATE_TEST_SUITE_P(Schemes, Fp8CheckpointWeights,
                         ::testing::Values("llama-fp8-channel", "llama-fp8-tensor",
                                           "llama-fp8-block"),
                         [](const auto& info) {
                           std::string name = std::string(info.param).substr(10);
                           return name;
                         });

/// A scratch checkpoint: `weights_of`'s safetensors beside `config` (config.json text).
std::string scratch_checkpoint(const std::string& name, const std::string& weights_of,
                               const std::string& config) {
  const fs::path dir = freezeframe::testing::scratch_dir() / name;
  fs::create_directories(dir);
  fs::copy_file(weight_fixtures() / weights_of / "model.safetensors", dir / "model.safetensors",
                fs::copy_options::overwrite_existing);
  std::ofstream(dir / "config.json") << config;
  return dir.string();
}

std::string config_text(const std::string& folder) {
  std::ifstream in(weight_fixtures() / folder / "config.json");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Why the source cannot read `name`, as match_weights reports it.
std::string unreadable(const std::string& checkpoint, const std::string& name) {
  const auto source = WeightSource::open(read_checkpoint_config(checkpoint));
  const WeightTensor* t = source->find(name);
  EXPECT_NE(t, nullptr) << name;
  return t == nullptr ? "" : t->unreadable;
}

TEST(Fp8Checkpoint, WeightsWhoseScaleDoesNotFitAreRefusedNamingIt) {
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  // fp8 tensors and no quantization_config: nothing says how they scale.
  const std::string none =
      scratch_checkpoint("fp8-no-config", "llama-fp8-channel", config_text("llama"));
  EXPECT_NE(unreadable(none, q).find("no quantization_config"), std::string::npos)
      << unreadable(none, q);
  // Per-tensor scales ([1]) under a per-channel config.
  const std::string shape =
      scratch_checkpoint("fp8-wrong-shape", "llama-fp8-tensor", config_text("llama-fp8-channel"));
  const std::string why = unreadable(shape, q);
  EXPECT_NE(why.find("q_proj.weight_scale"), std::string::npos) << why;
  EXPECT_NE(why.find("has shape [1]"), std::string::npos) << why;
  EXPECT_NE(why.find("[64, 1]"), std::string::npos) << why;
  // A block config over a checkpoint whose scales are named weight_scale: none is found.
  const std::string missing =
      scratch_checkpoint("fp8-no-scale", "llama-fp8-channel", config_text("llama-fp8-block"));
  EXPECT_NE(unreadable(missing, q).find("q_proj.weight_scale_inv' is not in the checkpoint"),
            std::string::npos)
      << unreadable(missing, q);
  // match_weights lists the problems before anything is read.
  const auto source = WeightSource::open(read_checkpoint_config(missing));
  const ModelProgram program = build_model_program(testing::weights_spec("llama-fp8-channel"));
  try {
    (void)match_weights(*source, program);
    ADD_FAILURE() << "matched";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("down_proj.weight_scale_inv"), std::string::npos) << e.message();
  }
}

TEST(Fp8Checkpoint, KvCacheScalesAreTheCheckpointsWhereItStatesThem) {
  const CheckpointConfig channel = config_of("llama-fp8-channel");
  const std::vector<KvCacheScales> scales =
      checkpoint_kv_cache_scales(*WeightSource::open(channel), channel, 1);
  ASSERT_EQ(scales.size(), 1u);
  EXPECT_EQ(scales[0].k, 0.05f);
  EXPECT_EQ(scales[0].v, 0.03f);
  const CheckpointConfig tensor = config_of("llama-fp8-tensor");
  EXPECT_TRUE(checkpoint_kv_cache_scales(*WeightSource::open(tensor), tensor, 1).empty());
  // A kv_cache_scheme whose scales are not in the file.
  const std::string dir =
      scratch_checkpoint("fp8-no-kv-scales", "llama-fp8-tensor", config_text("llama-fp8-channel"));
  const CheckpointConfig missing = read_checkpoint_config(dir);
  try {
    (void)checkpoint_kv_cache_scales(*WeightSource::open(missing), missing, 1);
    ADD_FAILURE() << "read";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("no tensor model.layers.0.self_attn.k_scale"), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("kv_cache_scheme"), std::string::npos) << e.message();
  }
}

/// The problems read_checkpoint_config finds in llama-fp8-channel's config with
/// `quantization` as its quantization_config.
std::string refusal(const std::string& quantization) {
  std::string text = config_text("llama");
  text =
      text.substr(0, text.rfind('}')) + ",\n  \"quantization_config\": " + quantization + "\n}\n";
  const std::string dir = scratch_checkpoint("fp8-refused", "llama-fp8-channel", text);
  try {
    (void)read_checkpoint_config(dir);
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << quantization << " was read";
  return "";
}

std::string ct_group(const std::string& weights, const std::string& activations = "null",
                     const std::string& extra = "") {
  return R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": )" +
         weights + R"(, "input_activations": )" + activations + extra + "}}}";
}

TEST(Fp8Checkpoint, SchemesNotReadAreRefusedNamingTheField) {
  const std::string fp8_channel =
      R"({"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": false})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"quant_method": "awq", "bits": 4})", "quant_method: 'awq' is not supported"},
      {R"({"bits": 4})", "quantization_config.quant_method: is required"},
      {R"("fp8")", "quantization_config: expected an object"},
      {ct_group(R"({"num_bits": 8, "type": "int", "strategy": "channel"})"),
       "group_0.weights.type: 'int' is not supported (integer quantisation)"},
      {ct_group(R"({"num_bits": 8, "strategy": "channel"})"),
       "group_0.weights.type: is missing, which means int"},
      {ct_group(R"({"num_bits": 4, "type": "float", "strategy": "tensor_group"})"),
       "group_0.weights.num_bits: 4-bit values are not supported"},
      {ct_group(R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128})"),
       "group_0.weights.strategy: 'group' is not supported; supported: tensor, channel, block"},
      {ct_group(R"({"num_bits": 8, "type": "float", "strategy": "block"})"),
       "group_0.weights.block_structure: is required but missing"},
      {ct_group(R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": true})"),
       "group_0.weights.dynamic: true is not supported"},
      {ct_group(R"({"num_bits": 8, "type": "float", "symmetric": false})"),
       "group_0.weights.symmetric: false is not supported"},
      {ct_group(fp8_channel, R"({"num_bits": 8, "type": "float", "strategy": "token"})"),
       "input_activations.dynamic: a per-token scale is computed at run time"},
      {ct_group(fp8_channel,
                R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": "local"})"),
       "input_activations.dynamic: the string 'local' is not supported"},
      {ct_group(fp8_channel, "null", R"(, "output_activations": {"num_bits": 8})"),
       "group_0.output_activations: quantised outputs are not supported"},
      {R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
          "config_groups": {"g": {"targets": ["Linear"], "weights": {}}}})",
       "quantization_config.format: 'pack-quantized' is not supported"},
      {R"({"quant_method": "compressed-tensors", "format": "float-quantized"})",
       "quantization_config.config_groups: is required but missing"},
      {R"({"quant_method": "compressed-tensors", "format": "float-quantized",
          "quantization_status": "calibration", "config_groups": {"g": {"targets": ["Linear"],
          "weights": )" +
           fp8_channel + "}}}",
       "'calibration' is not supported (not a finished checkpoint)"},
      {R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {
          "a": {"targets": ["re:.*q_proj$"], "weights": )" +
           fp8_channel + R"(}, "b": {"targets": ["re:.*mlp.*"], "weights": {"num_bits": 8,
          "type": "float", "strategy": "tensor"}}}})",
       "config_groups.b: quantises differently from group 'a'"},
      {R"({"quant_method": "fp8", "fmt": "e5m2"})", "quantization_config.fmt: 'e5m2'"},
      {R"({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]})",
       "static activation scales with weight blocks are not supported"},
      {R"({"quant_method": "fp8", "weight_block_size": [128]})",
       "quantization_config.weight_block_size: expected [rows, columns]"},
      {R"({"quant_method": "fp8", "weight_block_size": [0, 128]})",
       "quantization_config.weight_block_size: must be in [1, "},
  };
  for (const auto& [quantization, want] : cases) {
    SCOPED_TRACE(quantization);
    const std::string message = refusal(quantization);
    EXPECT_NE(message.find(want), std::string::npos) << message;
    // Each names config.json with a line and column.
    EXPECT_NE(message.find("config.json:"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace freezeframe
