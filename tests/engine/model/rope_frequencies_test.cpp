// engine/: the rotary embedding's inverse frequencies against the ones transformers' Llama
// rotary embedding holds (tests/fixtures/reference/rope-frequencies.safetensors, written by
// scripts/fixtures/make_reference_logits.py): Llama 3's scaling for Llama-3.1-8B's config.json
// and the tiny Llama 3's, the same scaling as GGUF's rope_freqs.weight factors, and the
// unscaled frequencies, which stay bit for bit what the rope launcher always computed.
//
// transformers computes in f32 (a pow, a division, then the scaling's arithmetic, each
// rounded), the engine in double rounded once; the two agree within a few f32 ulp.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/checkpoints/checkpoint_config.h"
#include "freezeframe/checkpoints/safetensors_file.h"
#include "freezeframe/engine/spec/layer_params.h"
#include "freezeframe/engine/spec/spec.h"
#include "model/rope_frequencies.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
const fs::path kSource = FREEZEFRAME_SOURCE_DIR;
const fs::path kReference = kSource / "tests" / "fixtures" / "reference";
constexpr std::int64_t kMaxUlps = 4;

std::vector<float> reference(const std::string& name,
                             const char* file_name = "rope-frequencies.safetensors") {
  const SafetensorsFile file = SafetensorsFile::open((kReference / file_name).string());
  const SafetensorsTensor& t = file.tensor(name);
  std::vector<float> values(static_cast<std::size_t>(t.elements()));
  file.read_f32(t, values);
  return values;
}

/// Distance in units in the last place between two positive floats.
std::int64_t ulps(float a, float b) {
  return std::abs(std::int64_t{std::bit_cast<std::int32_t>(a)} -
                  std::int64_t{std::bit_cast<std::int32_t>(b)});
}

void expect_within_ulps(const std::vector<float>& got, const std::vector<float>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(ulps(got[i], want[i]), kMaxUlps)
        << what << ": pair " << i << " is " << got[i] << ", transformers has " << want[i];
  }
}

/// What the rope launcher computed before the frequencies could be scaled.
std::vector<float> unscaled(float theta, int rotary_dim) {
  std::vector<float> f;
  for (int i = 0; i < rotary_dim / 2; ++i) {
    f.push_back(static_cast<float>(
        std::pow(static_cast<double>(theta), -2.0 * i / static_cast<double>(rotary_dim))));
  }
  return f;
}

struct Case {
  const char* name;
  fs::path config;  ///< the checkpoint whose rope_scaling it is
};

class RopeFrequencies : public ::testing::TestWithParam<Case> {};

TEST_P(RopeFrequencies, Llama3ScalingIsTransformers) {
  const Case& c = GetParam();
  const CheckpointConfig config = read_checkpoint_config(c.config.string());
  ASSERT_TRUE(config.rope_scaling.has_value());
  const std::vector<float> got =
      rope_inv_frequencies(config.rope_theta, config.head_size, config.rope_scaling, {});
  expect_within_ulps(got, reference(std::string(c.name) + ".inv_freq"), c.name);

  // The three bands: kept exactly, divided exactly by the factor, interpolated between.
  const std::vector<float> plain = unscaled(config.rope_theta, config.head_size);
  const Llama3RopeScaling& s = *config.rope_scaling;
  int kept = 0, divided = 0, between = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double f = std::pow(static_cast<double>(config.rope_theta),
                              -2.0 * static_cast<double>(i) / config.head_size);
    const double wavelength = 2.0 * std::numbers::pi / f;
    const double original = static_cast<double>(s.original_max_position_embeddings);
    if (wavelength < original / s.high_freq_factor) {
      EXPECT_EQ(got[i], plain[i]) << c.name << ": pair " << i << " is kept";
      ++kept;
    } else if (wavelength > original / s.low_freq_factor) {
      EXPECT_EQ(got[i], static_cast<float>(f / s.factor)) << c.name << ": pair " << i;
      ++divided;
    } else {
      EXPECT_LT(got[i], plain[i]) << c.name << ": pair " << i;
      EXPECT_GT(got[i], static_cast<float>(f / s.factor)) << c.name << ": pair " << i;
      ++between;
    }
  }
  EXPECT_GT(kept, 0) << c.name;
  EXPECT_GT(divided, 0) << c.name;
  EXPECT_GT(between, 0) << c.name;
}

TEST_P(RopeFrequencies, GgufFactorsGiveTheSameFrequencies) {
  // llama.cpp stores the scaling as a factor per pair that divides the unscaled frequency.
  const Case& c = GetParam();
  const CheckpointConfig config = read_checkpoint_config(c.config.string());
  const std::vector<float> factors = reference(std::string(c.name) + ".gguf_factors");
  const std::vector<float> got =
      rope_inv_frequencies(config.rope_theta, config.head_size, std::nullopt, factors);
  expect_within_ulps(got, reference(std::string(c.name) + ".inv_freq"), c.name);
}

TEST_P(RopeFrequencies, UnscaledAreWhatTheyWere) {
  const Case& c = GetParam();
  const CheckpointConfig config = read_checkpoint_config(c.config.string());
  const std::vector<float> got =
      rope_inv_frequencies(config.rope_theta, config.head_size, std::nullopt, {});
  EXPECT_EQ(got, unscaled(config.rope_theta, config.head_size)) << "bit for bit";
  expect_within_ulps(got, reference(std::string(c.name) + ".default_inv_freq"), c.name);
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoints, RopeFrequencies,
    ::testing::Values(Case{"llama-3.1-8b", kSource / "tests" / "fixtures" / "checkpoints" /
                                               "llama-3.1-8b" / "config.json"},
                      Case{"tiny-llama3", kReference / "tiny-llama3" / "config.json"}),
    [](const auto& info) {
      std::string name = info.param.name;
      for (char& ch : name) {
        if (ch == '-' || ch == '.') ch = '_';
      }
      return name;
    });

TEST(RopeFrequencies, UnscaledKeepTheirOldBitsForManyShapes) {
  for (const float theta : {10000.0f, 500000.0f, 1000000.0f, 1e12f, 3.5f}) {
    for (const int dim : {2, 32, 40, 64, 80, 128, 256, 512}) {
      EXPECT_EQ(rope_inv_frequencies(theta, dim, std::nullopt, {}), unscaled(theta, dim))
          << "theta " << theta << ", rotary_dim " << dim;
    }
  }
}

/// The model's frequencies as the runner takes them: through the spec's checkpoint.
std::vector<float> of_spec(const fs::path& checkpoint) {
  const std::string yaml = "model:\n  checkpoint: " + checkpoint.string() + "\n";
  return rope_inv_frequencies(parse_spec(yaml, (kReference / "spec.yaml").string()).model);
}

TEST(RopeFrequencies, TheModelTakesItsCheckpointsScaling) {
  const std::vector<float> want = reference("tiny-llama3.inv_freq");
  // config.json's rope_parameters (llama3), and the GGUF of the same model's factors.
  expect_within_ulps(of_spec(kReference / "tiny-llama3"), want, "tiny-llama3 config.json");
  expect_within_ulps(of_spec(kReference / "tiny-llama3.gguf"), want, "tiny-llama3.gguf");
  // Without a checkpoint, or with one that does not scale: the plain frequencies.
  const EngineSpec plain = parse_spec(
      "model:\n  num_layers: 1\n  hidden_size: 256\n  num_heads: 2\n  vocab_size: 8\n"
      "  intermediate_size: 64\n  max_position_embeddings: 1024\n  rope_theta: 500000\n",
      "inline.yaml");
  EXPECT_EQ(rope_inv_frequencies(plain.model), unscaled(500000.0f, 128));
  const fs::path mistral = kReference / "tiny-mistral";
  EXPECT_EQ(of_spec(mistral), unscaled(10000.0f, 64));
}

std::vector<float> yarn_reference(const std::string& name, const std::string& what) {
  return reference(name + "." + what, "deepseek-yarn.safetensors");
}

// YaRN (DeepSeek-V2): DeepSeek-V2-Lite's config.json, whose high frequencies are kept and
// low ones divided by 40, and the tiny DeepSeek-V2's, whose mscale and mscale_all_dim differ so
// that cos and sin are scaled too (tests/fixtures/reference/deepseek-yarn.safetensors, written
// by scripts/fixtures/make_deepseek_fixtures.py).
TEST(RopeFrequencies, YarnIsTransformersDeepSeekV2s) {
  struct Case {
    const char* name;
    YarnRopeScaling scaling;
    int rotary_dim;
  };
  const YarnRopeScaling lite{40.0, 4096, 32.0, 1.0, 0.707, 0.707};
  const YarnRopeScaling tiny{4.0, 32, 32.0, 1.0, 1.0, 0.707};
  for (const Case& c : {Case{"deepseek_v2_lite", lite, 64}, Case{"tiny", tiny, 32}}) {
    SCOPED_TRACE(c.name);
    const YarnRope got = yarn_rope(10000.0, c.rotary_dim, c.scaling);
    expect_within_ulps(got.inv_freq, yarn_reference(c.name, "inv_freq"), c.name);
    EXPECT_LE(ulps(got.attention_factor, yarn_reference(c.name, "attention_factor")[0]), kMaxUlps);
    // transformers folds the factor into 1/√(nope + rope) (192 for the Lite, 64 the tiny).
    const double head = c.rotary_dim == 64 ? 192.0 : 64.0;
    EXPECT_LE(ulps(static_cast<float>(got.softmax_scale_factor / std::sqrt(head)),
                   yarn_reference(c.name, "softmax_scale")[0]),
              kMaxUlps);
  }
  // The Lite's highest frequencies are theta's own, its lowest divided by the factor.
  const YarnRope lite_rope = yarn_rope(10000.0, 64, lite);
  EXPECT_EQ(lite_rope.inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(lite_rope.inv_freq[31], static_cast<float>(std::pow(10000.0, -62.0 / 64) / 40));
  EXPECT_FLOAT_EQ(lite_rope.attention_factor, 1.0f) << "mscale and mscale_all_dim are equal";
  EXPECT_THROW((void)yarn_rope(10000.0, 64, YarnRopeScaling{0.5, 4096}), Error);
  EXPECT_THROW((void)yarn_rope(10000.0, 64, YarnRopeScaling{4.0, 0}), Error);
}

// The tiny DeepSeek-V2's MLA impl rotates by its YaRN and scales its softmax by it.
TEST(RopeFrequencies, TheMlaImplTakesTheCheckpointsYarn) {
  const EngineSpec spec =
      parse_spec("model:\n  checkpoint: " + (kReference / "tiny-deepseek-v2").string() + "\n",
                 (kReference / "spec.yaml").string());
  MlaParams params = mla_params(spec);
  EXPECT_TRUE(params.rope_inv_freq.empty());
  scale_mla_rope(params, spec.model);
  expect_within_ulps(params.rope_inv_freq, yarn_reference("tiny", "inv_freq"), "tiny");
  EXPECT_LE(ulps(params.rope_scale, yarn_reference("tiny", "attention_factor")[0]), kMaxUlps);
  EXPECT_LE(ulps(params.scale, yarn_reference("tiny", "softmax_scale")[0]), kMaxUlps);
}

TEST(RopeFrequencies, Refusals) {
  const auto refusal = [](auto&& call) -> std::string {
    try {
      (void)call();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.message();
      return e.message();
    }
    ADD_FAILURE() << "accepted";
    return "";
  };
  EXPECT_NE(refusal([] {
              return rope_inv_frequencies(1e4, 63, std::nullopt, {});
            }).find("rotary_dim must be even"),
            std::string::npos);
  EXPECT_NE(refusal([] {
              return rope_inv_frequencies(0.0, 64, std::nullopt, {});
            }).find("theta must be finite and > 0"),
            std::string::npos);
  const std::vector<float> three(3, 1.0f);
  EXPECT_NE(refusal([&] {
              return rope_inv_frequencies(1e4, 64, std::nullopt, three);
            }).find("3 frequency factors for 32 rotary pairs"),
            std::string::npos);
  std::vector<float> factors(32, 1.0f);
  factors[5] = std::nanf("");
  EXPECT_NE(refusal([&] {
              return rope_inv_frequencies(1e4, 64, std::nullopt, factors);
            }).find("factor 5 must be finite and > 0"),
            std::string::npos);
}

}  // namespace
}  // namespace freezeframe
