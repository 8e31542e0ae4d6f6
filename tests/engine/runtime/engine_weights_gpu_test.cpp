// The engine with a checkpoint's weights (model.builtin_weights false): every planned weight
// on the device holds, bit for bit, what the weight source reads on the host in the model's
// dtype, for safetensors shards, a Llama GGUF (rotary rows restored, quantised tensors), a
// Qwen2 GGUF in f16 (biases, tied LM head) and fp8 checkpoints (dequantised; an fp8 cache
// written with their KV scales); the upload streams through a small pinned buffer in many
// chunks with progress; a step runs on them; and a spec or checkpoint the engine cannot run is
// refused before anything is allocated.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/engine_test_util.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/host_half.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/engine/model/checkpoint_weights.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/runtime/engine.h"
#include "runtime/fp8_rows.h"
#include "support/gpu.h"
#include "support/random.h"
#include "support/scratch_files.h"
#include "support/weight_fixtures.h"

namespace freezeframe {
namespace {

namespace fs = std::filesystem;
using testing::weight_fixtures;
using testing::weights_spec;

struct Progress {
  std::vector<std::int64_t> done;
  std::int64_t total = 0;
};

EngineOptions small_staging(Progress& progress) {
  EngineOptions options;
  options.capture_graphs = false;
  // 512-byte halves: the projections take several chunks, and both halves are reused.
  options.weight_staging_bytes = 1024;
  options.weight_progress = [&progress](std::int64_t done, std::int64_t total) {
    progress.done.push_back(done);
    progress.total = total;
  };
  return options;
}

void expect_device_weights_are_the_sources(const std::string& checkpoint, DType dtype) {
  SCOPED_TRACE(checkpoint);
  const EngineSpec spec = weights_spec(checkpoint);
  ASSERT_EQ(spec.model.dtype, dtype);
  Progress progress;
  Engine engine(spec, small_staging(progress));

  const auto source = WeightSource::open(*spec.model.checkpoint);
  const ModelProgram program = build_model_program(spec);
  const std::vector<const WeightTensor*> tensors = match_weights(*source, program);
  std::int64_t total = 0;
  for (std::size_t w = 0; w < program.weights.size(); ++w) {
    const WeightTensor& t = *tensors[w];
    const TensorView device = engine.weight(program.weights[w].name);
    ASSERT_EQ(device.dtype(), dtype);
    ASSERT_EQ(device.numel(), t.rows() * t.row_elements()) << t.name;
    std::vector<std::byte> want(device.span_bytes()), got(device.span_bytes(), std::byte{0});
    source->read_rows(t, 0, t.rows(), dtype, want);
    ASSERT_EQ(cudaMemcpy(got.data(), device.data(), got.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
        << t.describe() << " differs on the device";
    total += static_cast<std::int64_t>(got.size());
  }
  EXPECT_EQ(progress.total, total);
  ASSERT_FALSE(progress.done.empty());
  EXPECT_EQ(progress.done.back(), total);
  EXPECT_GT(progress.done.size(), program.weights.size()) << "large tensors take several chunks";
  for (std::size_t i = 1; i < progress.done.size(); ++i) {
    EXPECT_GT(progress.done[i], progress.done[i - 1]);
  }

  // A step over them: finite logits for every request.
  std::mt19937 rng(3);
  const testing::TestBatch batch({{1, 9}, {5, 5}}, engine.limits().block_size,
                                 engine.limits().num_blocks, rng, spec.model.vocab_size);
  const StepResult result = engine.step(batch.batch());
  engine.synchronize();
  std::vector<float> logits(static_cast<std::size_t>(result.logits.numel()));
  ASSERT_EQ(cudaMemcpy(logits.data(), result.logits.data(), logits.size() * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (const float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(EngineWeights, SafetensorsShardsOnTheDeviceBitForBit) {
  FF_REQUIRE_GPU();
  expect_device_weights_are_the_sources("llama", DType::kBF16);
}

TEST(EngineWeights, LlamaGgufOnTheDeviceBitForBit) {
  FF_REQUIRE_GPU();
  expect_device_weights_are_the_sources("llama.gguf", DType::kBF16);
}

TEST(EngineWeights, Qwen2GgufInF16WithBiasesOnTheDeviceBitForBit) {
  FF_REQUIRE_GPU();
  expect_device_weights_are_the_sources("qwen2.gguf", DType::kF16);
}

TEST(EngineWeights, Fp8CheckpointsDequantisedOnTheDeviceBitForBit) {
  FF_REQUIRE_GPU();
  for (const char* checkpoint : {"llama-fp8-channel", "llama-fp8-tensor", "llama-fp8-block"}) {
    expect_device_weights_are_the_sources(checkpoint, DType::kBF16);
  }
}

/// Layer 0's fp8 KV cache after one step over `checkpoint`, decoded and scaled by `k` and `v`.
std::vector<float> fp8_cache_after_a_step(const std::string& checkpoint, float k, float v,
                                          std::vector<std::uint8_t>& raw) {
  const EngineSpec spec = weights_spec(checkpoint, "", "  dtype: fp8\n");
  EngineOptions options;
  options.capture_graphs = false;
  Engine engine(spec, options);
  std::mt19937 rng(5);
  const testing::TestBatch batch({{12, 12}, {7, 7}}, engine.limits().block_size,
                                 engine.limits().num_blocks, rng, spec.model.vocab_size);
  (void)engine.step(batch.batch());
  engine.synchronize();
  const TensorView cache = engine.kv_cache(0);
  raw.resize(static_cast<std::size_t>(cache.numel()));
  EXPECT_EQ(cudaMemcpy(raw.data(), cache.data(), raw.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  // Dimension 0 is K, then V (the paged backend's shape, kept outermost).
  std::vector<float> values(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    values[i] = host_half::e4m3_to_f32(raw[i]) * (i < raw.size() / 2 ? k : v);
  }
  return values;
}

TEST(EngineWeights, AnFp8CacheWritesWithTheCheckpointsKvScales) {
  FF_REQUIRE_GPU();
  // The same checkpoint without its kv_cache_scheme: the cache is written with scales of 1.
  const fs::path unscaled = freezeframe::testing::scratch_dir() / "fp8-unscaled-kv";
  fs::create_directories(unscaled);
  fs::copy_file(weight_fixtures() / "llama-fp8-channel" / "model.safetensors",
                unscaled / "model.safetensors", fs::copy_options::overwrite_existing);
  std::ifstream in(weight_fixtures() / "llama" / "config.json");
  std::string config{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  config = config.substr(0, config.rfind('}')) + R"(, "quantization_config": {
      "quant_method": "compressed-tensors", "format": "float-quantized",
      "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8,
      "type": "float", "strategy": "channel"}, "input_activations": {"num_bits": 8,
      "type": "float", "strategy": "token", "dynamic": true}}}}})";
  std::ofstream(unscaled / "config.json") << config;

  std::vector<std::uint8_t> raw_scaled, raw_unscaled;
  const std::vector<float> scaled =
      fp8_cache_after_a_step("llama-fp8-channel", 0.05f, 0.03f, raw_scaled);
  const std::vector<float> plain = fp8_cache_after_a_step(unscaled.string(), 1, 1, raw_unscaled);
  ASSERT_EQ(scaled.size(), plain.size());
  // The same keys and values, each rounded to e4m3 twice over (3 mantissa bits: 2^-4 relative
  // each, 2^-9 absolute below the smallest normal at scale 1), stored as different bytes.
  std::size_t written = 0, differ = 0;
  for (std::size_t i = 0; i < scaled.size(); ++i) {
    const float a = scaled[i], b = plain[i];
    ASSERT_LE(std::fabs(a - b), 0.125f * std::max(std::fabs(a), std::fabs(b)) + 0.004f)
        << "element " << i << ": " << a << " with the checkpoint's scales, " << b << " without";
    written += raw_unscaled[i] != 0;
    differ += raw_scaled[i] != raw_unscaled[i];
  }
  EXPECT_GT(written, 100u) << "the step wrote the cache";
  EXPECT_GT(differ, written / 2) << "the checkpoint's scales changed how the cache is written";
}

/// The logits of one step of two prefills over `engine`.
std::vector<double> logits_of_a_step(Engine& engine, int vocab) {
  std::mt19937 rng(9);
  const testing::TestBatch batch({{9, 9}, {5, 5}}, engine.limits().block_size,
                                 engine.limits().num_blocks, rng, vocab);
  const StepResult result = engine.step(batch.batch());
  engine.synchronize();
  std::vector<float> logits(static_cast<std::size_t>(result.logits.numel()));
  EXPECT_EQ(cudaMemcpy(logits.data(), result.logits.data(), logits.size() * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  return {logits.begin(), logits.end()};
}

TEST(EngineWeights, Fp8ProjectionsHoldTheCheckpointQuantisedPerChannel) {
  FF_REQUIRE_GPU();
  const EngineSpec spec = weights_spec("llama", "  quantization: fp8\n");
  Progress progress;
  Engine engine(spec, small_staging(progress));
  const auto source = WeightSource::open(*spec.model.checkpoint);
  const ModelProgram program = build_model_program(spec);
  const std::vector<const WeightTensor*> tensors = match_weights(*source, program);
  int checked = 0;
  for (std::size_t w = 0; w < program.weights.size(); ++w) {
    if (program.weights[w].dtype != DType::kFp8E4M3) continue;
    const WeightTensor& t = *tensors[w];
    SCOPED_TRACE(t.name);
    std::vector<float> values(static_cast<std::size_t>(t.rows() * t.row_elements()));
    source->read_rows(t, 0, t.rows(), DType::kF32, std::as_writable_bytes(std::span(values)));
    std::vector<std::byte> want(values.size());
    std::vector<float> want_scales(static_cast<std::size_t>(t.rows()));
    quantize_rows_to_fp8(values.data(), t.rows(), t.row_elements(), want.data(),
                         want_scales.data());
    std::vector<std::byte> got(want.size());
    const TensorView device = engine.weight(program.weights[w].name);
    ASSERT_EQ(cudaMemcpy(got.data(), device.data(), got.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(got, want);
    std::vector<float> got_scales(want_scales.size());
    const TensorView scales = engine.weight(program.weights[w].name + ".weight_scale");
    ASSERT_EQ(cudaMemcpy(got_scales.data(), scales.data(), got_scales.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(got_scales, want_scales);
    ++checked;
  }
  EXPECT_EQ(checked, 7);
  EXPECT_EQ(progress.done.back(), progress.total);

  // Its logits against the same checkpoint's in bf16: W8A8 rounds each projection's operands
  // to e4m3's 3 mantissa bits.
  EngineOptions options;
  options.capture_graphs = false;
  Engine bf16(weights_spec("llama"), options);
  const std::vector<double> fp8_logits = logits_of_a_step(engine, spec.model.vocab_size);
  const std::vector<double> bf16_logits = logits_of_a_step(bf16, spec.model.vocab_size);
  const double error = testing::relative_l2(fp8_logits, bf16_logits);
  std::printf("fp8 projections against bf16: logits relative L2 %.4f\n", error);
  EXPECT_LT(error, 0.1);
}

TEST(EngineWeights, Fp8ProjectionsReplayAsTheyRunEagerly) {
  FF_REQUIRE_GPU();
  // Random weights drawn in fp8; graphs (full and piecewise) against eager steps.
  const EngineSpec spec = parse_spec(
      testing::tiny_spec("paged", "  mode: full_and_piecewise\n", "  quantization: fp8\n"),
      "inline.yaml");
  ASSERT_TRUE(spec.model.fp8_linear);
  EngineOptions eager_options;
  eager_options.capture_graphs = false;
  Engine eager(spec, eager_options);
  Engine graphs(spec, EngineOptions{});
  const std::vector<double> a = logits_of_a_step(eager, spec.model.vocab_size);
  const std::vector<double> b = logits_of_a_step(graphs, spec.model.vocab_size);
  for (const double v : a) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(a, b) << "the graphs' logits differ from the eager step's";
}

/// The engine's refusal of `spec`, after checking that nothing was allocated on the device.
Error refusal(const EngineSpec& spec) {
  const AllocationCounters before = allocation_counters();
  try {
    EngineOptions options;
    options.capture_graphs = false;
    Engine engine(spec, options);
  } catch (const Error& e) {
    const AllocationCounters after = allocation_counters();
    EXPECT_EQ(after.device_allocations, before.device_allocations) << "refused after allocating";
    EXPECT_EQ(after.pinned_allocations, before.pinned_allocations) << "refused after staging";
    return e;
  }
  ADD_FAILURE() << "the engine was built";
  return Error(ErrorCode::kInternal, "", "", 0);
}

TEST(EngineWeights, RefusedBeforeAnythingIsAllocated) {
  FF_REQUIRE_GPU();
  // builtin_weights false with no checkpoint to read them from: a spec file is refused where it
  // says so (spec_checkpoint_test); a spec changed after it was read, by the engine.
  EngineSpec none = parse_spec(testing::tiny_spec("reference", "  mode: none\n"), "inline.yaml");
  none.model.builtin_weights = false;
  const Error no_checkpoint = refusal(none);
  EXPECT_EQ(no_checkpoint.code(), ErrorCode::kUnsupported);
  EXPECT_NE(no_checkpoint.message().find("model.builtin_weights"), std::string::npos);
  EXPECT_NE(no_checkpoint.message().find("model.checkpoint"), std::string::npos);

  // A checkpoint whose tensors do not fit the model: every problem, before any upload.
  const Error missing = refusal(weights_spec("broken/missing-tensor.gguf"));
  EXPECT_EQ(missing.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("no tensor blk.0.ffn_up.weight"), std::string::npos)
      << missing.message();
  const Error q4_k = refusal(weights_spec("broken/q4_k.gguf"));
  EXPECT_NE(q4_k.message().find("Q4_K is not read"), std::string::npos) << q4_k.message();
}

}  // namespace
}  // namespace freezeframe
