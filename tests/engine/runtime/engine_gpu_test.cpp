// The engine on the GPU: graph replay against eager execution, padding, eager fallback, a
// capture that fails, batches that are refused, user pieces, and the steady state allocating
// nothing.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/engine_test_util.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/runtime/local_group.h"
#include "freezeframe/engine/spec/spec.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

using testing::random_shape;
using testing::TestBatch;
using testing::tiny_spec;

std::vector<float> logits_of(Engine& engine, const StepResult& result) {
  engine.synchronize();
  std::vector<float> host(static_cast<std::size_t>(result.logits.numel()));
  EXPECT_EQ(cudaMemcpy(host.data(), result.logits.data(), host.size() * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

/// Runs `batch` through the dispatched graph, then eagerly padded the same way, and returns
/// both logits (the caller compares bits). Poisons the output buffer before each run so a
/// replay that writes nothing cannot pass.
struct Pair {
  StepResult graph;
  std::vector<float> replayed, eager;
};
Pair replay_and_eager(Engine& engine, const StepBatch& batch) {
  Pair p;
  auto poison = [&] {
    const StepResult probe = engine.step(batch, {.eager = true});
    engine.synchronize();
    ASSERT_EQ(
        cudaMemsetAsync(probe.logits.data(), 0xFF, probe.logits.span_bytes(), engine.stream()),
        cudaSuccess);
  };
  poison();
  p.graph = engine.step(batch);
  p.replayed = logits_of(engine, p.graph);
  poison();
  p.eager = logits_of(engine, engine.step(batch, {.eager_like_graph = true}));
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

struct ModeCase {
  std::string backend;
  std::string mode;
  int max_len = 1024;  ///< 32768: block-table rows of 2,048 blocks, uploaded compact
};

class EngineReplay : public ::testing::TestWithParam<ModeCase> {};

// For every captured size and sizes off the ladder, decode-only and mixed batches with shuffled
// block tables: the replay's logits equal eager execution of the same padded step bit for bit,
// and the unpadded eager step within bf16 noise.
TEST_P(EngineReplay, ReplayEqualsEagerForEverySize) {
  FF_REQUIRE_GPU();
  const ModeCase& c = GetParam();
  // Layer 1 has a sliding window and layer 0 a soft cap, so both variants run in graphs.
  Engine engine(parse_spec(tiny_spec(c.backend, "  mode: " + c.mode + "\n  max_capture_size: 64\n",
                                     "  layers:\n    - layers: \"0\"\n      logits_soft_cap: 30.0\n"
                                     "    - layers: \"1\"\n      sliding_window: 48\n",
                                     c.max_len)));
  ASSERT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;
  std::mt19937 rng(7);
  std::vector<int> sizes(engine.dispatcher().capture_sizes().begin(),
                         engine.dispatcher().capture_sizes().end());
  for (int off : {3, 7, 25, 45, 63}) sizes.push_back(off);
  const DeploymentLimits& limits = engine.limits();
  int full = 0, piecewise = 0;
  for (const int n : sizes) {
    for (const bool mixed : {false, true}) {
      if (mixed && n < 3) continue;
      const int prefills = mixed ? 1 + n / 16 : 0;
      auto shape = random_shape(n - 2 * prefills, prefills, 2, 300, rng);
      if (mixed) {  // prefill chunks of 2 tokens each; the decodes fill the rest
        int tokens = 0;
        for (const auto& r : shape) tokens += r.first;
        ASSERT_EQ(tokens, n);
      }
      const TestBatch batch(shape, limits.block_size, limits.num_blocks, rng);
      const Pair p = replay_and_eager(engine, batch.batch());
      SCOPED_TRACE("size " + std::to_string(n) + (mixed ? " mixed" : " decode") + " ran " +
                   std::string(to_string(p.graph.mode)) + " " + p.graph.descriptor.describe());
      EXPECT_NE(p.graph.mode, RuntimeMode::kEager);
      full += p.graph.mode == RuntimeMode::kFull;
      piecewise += p.graph.mode == RuntimeMode::kPiecewise;
      EXPECT_TRUE(same_bits(p.replayed, p.eager));
      const std::vector<float> unpadded =
          logits_of(engine, engine.step(batch.batch(), {.eager = true}));
      // Different row counts may pick different GEMM algorithms and split counts: the same
      // math in another order, so bf16 rounding (2⁻⁸) bounds the difference.
      EXPECT_LT(relative_l2(unpadded, p.eager), 2e-2);
    }
  }
  if (c.mode == "full" || c.mode == "full_and_piecewise") {
    EXPECT_GT(full, 0);
  }
  if (c.mode == "piecewise" || c.mode == "full_and_piecewise") {
    EXPECT_GT(piecewise, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, EngineReplay,
                         ::testing::Values(ModeCase{"paged_decode", "full_and_piecewise"},
                                           ModeCase{"paged_decode", "full"},
                                           ModeCase{"paged_decode", "piecewise"},
                                           ModeCase{"reference", "full_and_piecewise"},
                                           ModeCase{"reference", "full"},
                                           ModeCase{"paged_decode", "full_and_piecewise", 32768}),
                         [](const auto& info) {
                           return info.param.backend + "_" + info.param.mode +
                                  (info.param.max_len > 1024 ? "_long_rows" : "");
                         });

TEST(Engine, GraphCountMatchesTheSpec) {
  FF_REQUIRE_GPU();
  Engine engine(parse_spec(tiny_spec("paged_decode",
                                     "  mode: full_and_piecewise\n"
                                     "  capture_sizes: [1, 2, 4, 8, 16]\n")));
  const CaptureReport& report = engine.capture_report();
  ASSERT_TRUE(report.failure.empty()) << report.failure;
  // Five uniform-decode full graphs and five piecewise sizes of 3 pieces each (2 layers: the
  // pieces before, between and after the two attention calls).
  ASSERT_EQ(report.captured.size(), 10u);
  EXPECT_EQ(engine.num_graphs(), 5 + 5 * 3);
  EXPECT_EQ(report.captured.front().descriptor, (BatchDescriptor{16, 16, true}));
  EXPECT_EQ(report.captured.front().mode, RuntimeMode::kFull);
  EXPECT_EQ(report.captured[5].descriptor, (BatchDescriptor{16, 0, false}));
  EXPECT_EQ(report.captured[5].graphs, 3);
  for (const CapturedGraphInfo& info : report.captured) EXPECT_GT(info.nodes, 0u);
  // Piece k of every size shares executables (a 2-layer model's three pieces all differ, so
  // none is shared across layers): at least one per piece, fewer than the graphs.
  EXPECT_GE(engine.num_executables(), 5 + 3);
  EXPECT_LT(engine.num_executables(), engine.num_graphs());

  // Not shared: one executable per graph, and the same logits for mixed steps of every size.
  Engine own(parse_spec(tiny_spec("paged_decode",
                                  "  mode: full_and_piecewise\n"
                                  "  capture_sizes: [1, 2, 4, 8, 16]\n"
                                  "  share_piecewise_executables: false\n")));
  EXPECT_EQ(own.num_graphs(), 5 + 5 * 3);
  EXPECT_EQ(own.num_executables(), own.num_graphs());
  std::mt19937 rng(5);
  for (const int decodes : {0, 9, 2, 13, 5}) {
    const TestBatch batch(random_shape(decodes, 1, 3, 150, rng), 16, engine.limits().num_blocks,
                          rng);
    const StepResult shared_step = engine.step(batch.batch());
    const std::vector<float> shared_logits = logits_of(engine, shared_step);
    const StepResult own_step = own.step(batch.batch());
    EXPECT_EQ(shared_step.mode, RuntimeMode::kPiecewise);
    EXPECT_EQ(own_step.mode, RuntimeMode::kPiecewise);
    EXPECT_TRUE(same_bits(shared_logits, logits_of(own, own_step))) << decodes << " decodes";
  }
}

TEST(Engine, PiecewiseExecutablesAreSharedAcrossLayers) {
  FF_REQUIRE_GPU();
  // Four layers: five pieces a size, the three middle ones (a layer's tail and the next
  // one's head) with the same ops.
  auto spec_with = [](const std::string& sharing) {
    std::string text = tiny_spec("paged_decode",
                                 "  mode: piecewise\n"
                                 "  capture_sizes: [1, 2, 4, 8, 16]\n"
                                 "  share_piecewise_executables: " +
                                     sharing + "\n");
    text.replace(text.find("num_layers: 2"), 13, "num_layers: 4");
    return parse_spec(text);
  };
  Engine layers(spec_with("across_layers")), sizes(spec_with("across_sizes")),
      own(spec_with("none"));
  for (const Engine* e : {&layers, &sizes, &own}) EXPECT_EQ(e->num_graphs(), 5 * 5);
  EXPECT_EQ(own.num_executables(), 5 * 5);
  EXPECT_GE(sizes.num_executables(), 5);
  EXPECT_LT(sizes.num_executables(), 5 * 5);
  EXPECT_GE(layers.num_executables(), 3);
  EXPECT_LT(layers.num_executables(), sizes.num_executables());

  // Every step switches the shared executables between layers (and sizes); the logits stay
  // those of graphs with executables of their own, bit for bit.
  std::mt19937 rng(11);
  for (const int decodes : {0, 9, 2, 13, 5, 1}) {
    const TestBatch batch(random_shape(decodes, 1, 3, 150, rng), 16, own.limits().num_blocks, rng);
    const StepResult own_step = own.step(batch.batch());
    const std::vector<float> want = logits_of(own, own_step);
    for (Engine* e : {&layers, &sizes}) {
      const StepResult step = e->step(batch.batch());
      EXPECT_EQ(step.mode, RuntimeMode::kPiecewise);
      EXPECT_TRUE(same_bits(want, logits_of(*e, step))) << decodes << " decodes";
    }
  }
}

TEST(Engine, LargerBatchesRunEagerly) {
  FF_REQUIRE_GPU();
  Engine engine(parse_spec(tiny_spec("paged_decode", "  max_capture_size: 16\n")));
  std::mt19937 rng(3);
  const TestBatch batch(random_shape(20, 0, 1, 200, rng), 16, engine.limits().num_blocks, rng);
  const StepResult r = engine.step(batch.batch());
  EXPECT_EQ(r.mode, RuntimeMode::kEager);
  EXPECT_EQ(r.descriptor, (BatchDescriptor{20, 20, true}));
  for (const float v : logits_of(engine, r)) ASSERT_TRUE(std::isfinite(v));
}

// The model's cache path end to end: a sequence prefilled in one step and the same sequence
// prefilled minus one token, then decoded, give the same last-token logits.
TEST(Engine, DecodeAfterPrefillMatchesOnePrefill) {
  FF_REQUIRE_GPU();
  for (const char* backend : {"paged_decode", "reference"}) {
    SCOPED_TRACE(backend);
    Engine engine(parse_spec(tiny_spec(backend, "  max_capture_size: 32\n")));
    std::mt19937 rng(11);
    const int length = 77;
    std::vector<std::int32_t> tokens(length);
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 1000);
    const std::vector<std::int32_t> blocks_a = {3, 9, 1, 7, 5}, blocks_b = {8, 2, 6, 0, 4};

    StepBatch whole;
    whole.requests = {{length, length, blocks_a}};
    whole.token_ids = tokens;
    const std::vector<float> one = logits_of(engine, engine.step(whole));

    StepBatch prefill;
    prefill.requests = {{length - 1, length - 1, blocks_b}};
    prefill.token_ids = std::span<const std::int32_t>(tokens).first(length - 1);
    (void)engine.step(prefill);
    StepBatch decode;
    decode.requests = {{1, length, blocks_b}};
    decode.token_ids = std::span<const std::int32_t>(tokens).last(1);
    const StepResult r = engine.step(decode);
    EXPECT_EQ(r.mode, RuntimeMode::kFull);  // a uniform decode of one request
    const std::vector<float> two = logits_of(engine, r);
    // Only the reduction order differs (one causal pass vs cache reads), in bf16.
    EXPECT_LT(relative_l2(two, one), 2e-2);
  }
}

TEST(Engine, BadBatchIsRefusedAndDisturbsNothing) {
  FF_REQUIRE_GPU();
  Engine engine(parse_spec(tiny_spec("paged_decode", "  max_capture_size: 16\n")));
  std::mt19937 rng(5);
  const TestBatch good(random_shape(4, 1, 8, 200, rng), 16, engine.limits().num_blocks, rng);
  const std::vector<float> before = logits_of(engine, engine.step(good.batch()));

  const std::vector<std::int32_t> blocks(70, 0);
  StepBatch too_long;
  too_long.requests = {{1, 1025, blocks}};  // max_model_len is 1024
  EXPECT_THROW((void)engine.step(too_long), Error);
  const std::vector<std::int32_t> outside = {engine.limits().num_blocks};
  StepBatch bad_block;
  bad_block.requests = {{1, 5, outside}};
  EXPECT_THROW((void)engine.step(bad_block), Error);
  // A block id outside the pool in one row of a step like the last: the staging, which checks
  // the rows that changed, refuses it.
  StepBatch bad_row = good.batch();
  bad_row.slot_mapping = {};
  std::vector<std::int32_t> row(bad_row.requests[1].block_ids.begin(),
                                bad_row.requests[1].block_ids.end());
  row.front() = -1;
  bad_row.requests[1].block_ids = row;
  try {
    (void)engine.step(bad_row);
    ADD_FAILURE() << "block id -1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("request 1: block_ids[0] = -1 is outside the KV cache"),
              std::string::npos)
        << e.message();
  }
  const std::vector<std::int32_t> ids = {1000};  // vocab is 1000
  const std::vector<std::int32_t> one_block = {0};
  StepBatch bad_token;
  bad_token.requests = {{1, 5, one_block}};
  bad_token.token_ids = ids;
  EXPECT_THROW((void)engine.step(bad_token), Error);

  EXPECT_TRUE(same_bits(logits_of(engine, engine.step(good.batch())), before));
}

TEST(Engine, UserPiecesRunInsideGraphs) {
  FF_REQUIRE_GPU();
  EngineOptions options;
  // Zeroing the residual stream after the last layer makes every logit exactly 0.
  options.user_pieces.push_back(
      {"zero", 1, [](const UserPieceContext& c) {
         FF_CUDA_CHECK(
             cudaMemsetAsync(c.hidden.data(), 0, c.num_tokens * c.hidden.stride(0) * 2, c.stream));
       }});
  Engine engine(parse_spec(tiny_spec("paged_decode", "  max_capture_size: 16\n")), options);
  ASSERT_TRUE(engine.capture_report().failure.empty());
  std::mt19937 rng(9);
  for (const int prefills : {0, 1}) {
    const TestBatch batch(random_shape(5, prefills, 4, 100, rng), 16, engine.limits().num_blocks,
                          rng);
    const StepResult r = engine.step(batch.batch());
    EXPECT_NE(r.mode, RuntimeMode::kEager);
    for (const float v : logits_of(engine, r)) ASSERT_EQ(v, 0.0f);
  }
}

TEST(Engine, FailingCaptureIsReportedAndTheEngineRunsEagerly) {
  FF_REQUIRE_GPU();
  const std::string spec = tiny_spec("paged_decode", "  max_capture_size: 16\n");
  EngineOptions options;
  options.user_pieces.push_back({"synchronises", 0, [](const UserPieceContext& c) {
                                   FF_CUDA_CHECK(cudaStreamSynchronize(c.stream));
                                 }});
  Engine engine(parse_spec(spec), options);
  const CaptureReport& report = engine.capture_report();
  EXPECT_NE(report.failure.find("cudaStreamSynchronize"), std::string::npos) << report.failure;
  EXPECT_EQ(engine.num_graphs(), 0);
  EXPECT_EQ(engine.dispatcher().mode(), CudaGraphMode::kNone);

  EngineOptions eager_only;
  eager_only.capture_graphs = false;
  Engine reference(parse_spec(spec), eager_only);
  std::mt19937 rng(13);
  const TestBatch batch(random_shape(6, 1, 5, 120, rng), 16, engine.limits().num_blocks, rng);
  const StepResult r = engine.step(batch.batch());
  EXPECT_EQ(r.mode, RuntimeMode::kEager);
  EXPECT_TRUE(same_bits(logits_of(engine, r), logits_of(reference, reference.step(batch.batch()))));
}

TEST(Engine, MlaModelReplaysUniformDecodesInFullGraphs) {
  FF_REQUIRE_GPU();
  const std::string spec =
      "model:\n  name: tiny-mla\n  num_layers: 2\n  hidden_size: 256\n  num_heads: 4\n"
      "  intermediate_size: 512\n  vocab_size: 1000\n  dtype: bf16\n"
      "  max_position_embeddings: 512\n"
      "  mla: {kv_lora_rank: 128, q_lora_rank: null, qk_nope_head_dim: 32, qk_rope_head_dim: 32,"
      " v_head_dim: 32}\n"
      "  attention:\n    backend: reference_mla\n"
      "  layers:\n    - layers: \"1\"\n      mlp: none\n"
      "cache:\n  memory_budget: 256MiB\n"
      "scheduler:\n  max_num_seqs: 16\n  max_num_batched_tokens: 256\n"
      "  max_prefill_context_tokens: 2048\n"
      "cuda_graphs:\n  max_capture_size: 16\n";
  Engine engine(parse_spec(spec));
  ASSERT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;
  std::mt19937 rng(17);
  for (const int n : {1, 3, 8, 13}) {
    for (const int prefills : {0, 1}) {
      // Chunks short enough that the step stays within the largest captured size (16).
      const TestBatch batch(random_shape(n, prefills, std::min(6, 16 - n), 200, rng), 16,
                            engine.limits().num_blocks, rng);
      const Pair p = replay_and_eager(engine, batch.batch());
      SCOPED_TRACE(std::to_string(n) + " decodes, " + std::to_string(prefills) + " prefills");
      EXPECT_EQ(p.graph.mode, prefills == 0 ? RuntimeMode::kFull : RuntimeMode::kPiecewise);
      EXPECT_TRUE(same_bits(p.replayed, p.eager));
      for (const float v : p.replayed) ASSERT_TRUE(std::isfinite(v));
    }
  }
}

TEST(Engine, UnsupportedSpecsAreRefusedWithTheField) {
  FF_REQUIRE_GPU();
  try {
    Engine engine(parse_spec(tiny_spec("paged_decode", "  max_capture_size: 16\n") +
                                 "tp:\n  world_size: 4\ndcp:\n  world_size: 2\n",
                             "tiny.yaml"));
    FAIL() << "a DCP spec without its ranks' DCP communicator was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tiny.yaml:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dcp.world_size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("DCP communicator"), std::string::npos) << e.what();
  }
  try {
    Engine engine(
        parse_spec(tiny_spec("paged_decode", "  max_capture_size: 16\n") + "tp:\n  world_size: 2\n",
                   "tiny.yaml"));
    FAIL() << "a tensor-parallel spec without its ranks' communicator was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tiny.yaml:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tp.world_size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("each rank's communicator"), std::string::npos)
        << e.what();
  }
  // A group of another size: refused before anything is built (no collective is called).
  LocalGroup three(3);
  EngineOptions options;
  options.communicator = &three.rank(0);
  try {
    Engine engine(
        parse_spec(tiny_spec("paged_decode", "  max_capture_size: 16\n") + "tp:\n  world_size: 2\n",
                   "tiny.yaml"),
        options);
    FAIL() << "a communicator of 3 ranks was taken for 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tp.world_size: 2 ranks, but the communicator's group "
                                         "has 3"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace freezeframe
