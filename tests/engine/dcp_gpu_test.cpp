// Decode context parallelism on one GPU: T tensor-parallel ranks of a LocalGroup, in DCP groups
// of D consecutive ranks (each group a LocalGroup of its own), each rank holding the positions
// (p div I) mod D = its DCP rank of every sequence, give the logits one rank gives. A model of
// Llama-3.1-8B's shape (two layers) with one KV head, replicated on every rank, so every D
// dividing T is valid. Four sequences start at different steps with prompts of 1, 5, 37 and 150
// tokens (chunks of 8, the last one whole: prefill rows over a context, on both sides of a
// 128-token plan tile), then decode, so steps mix prefill and decode rows and the early ones
// have shards shorter than D · I (some empty). Run eagerly and in graphs (full for decode-only
// steps, piecewise for mixed ones, eager past the largest captured size), against the one-rank
// engine run the same way. Tolerance: a relative L2 of 1e-2 (bf16; the merge adds the shards'
// partial outputs in another order than one softmax does).

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/reference_runs.h"
#include "freezeframe/core/error.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/runtime/local_group.h"
#include "freezeframe/engine/spec/spec.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

using testing::relative_l2;

// Ranks in more than one group (T = 4, D = 2) load every kernel before CUDA starts
// (LocalGroup's note): set while the binary's statics are made, before any CUDA call.
const bool kEagerLoading = setenv("CUDA_MODULE_LOADING", "EAGER", 0) == 0;

constexpr double kTolerance = 1e-2;
constexpr int kSequences = 4, kSteps = 40, kVocab = 128256, kBlockSize = 16, kChunk = 8;
// Each sequence's prompt and the step it starts at; the last prompt comes in one chunk.
constexpr int kPrompt[kSequences] = {1, 5, 37, 150};
constexpr int kStart[kSequences] = {0, 0, 2, 10};

std::string spec_text(int t, int d, int interleave, const std::string& graphs,
                      const std::string& backend = "paged_decode") {
  return "model:\n"
         "  name: llama-3.1-8b-shaped\n"
         "  num_layers: 2\n"
         "  hidden_size: 4096\n"
         "  num_heads: 32\n"
         "  num_kv_heads: 1\n"
         "  head_size: 128\n"
         "  intermediate_size: 14336\n"
         "  vocab_size: 128256\n"
         "  dtype: bf16\n"
         "  rope_theta: 500000\n"
         "  max_position_embeddings: 2048\n"
         "  attention:\n"
         "    backend: " +
         backend +
         "\n"
         "cache:\n  block_size: 16\n  memory_budget: 4GiB\n"
         "scheduler:\n  max_num_seqs: 16\n  max_num_batched_tokens: 256\n"
         "cuda_graphs:\n  mode: " +
         graphs +
         "\n  max_capture_size: 32\n"
         "tp:\n  world_size: " +
         std::to_string(t) + "\ndcp:\n  world_size: " + std::to_string(d) +
         "\n  interleave_size: " + std::to_string(interleave) + "\n";
}

struct Mode {
  const char* name;
  StepOptions options;
};
const Mode kModes[] = {{"eager", {.eager = true}}, {"graphs", {}}};

/// Logits [mode][step] of one rank, and the modes its steps ran in.
struct RankRun {
  std::vector<std::vector<std::vector<float>>> logits;
  std::vector<RuntimeMode> ran;
};

/// The schedule: at each step every started sequence adds its next prompt chunk (kChunk
/// tokens, the last prompt whole) or, once prompted, one decode token; decodes first in the
/// batch. A block id names kBlockSize · d positions (d = 1: physical blocks). Ranks meet after
/// each step's copies (`ranks`, null for one rank).
RankRun run_steps(Engine& engine, int d, std::barrier<>* ranks) {
  const std::int64_t virtual_block = std::int64_t(kBlockSize) * d;
  const int longest = kPrompt[kSequences - 1] + kSteps;
  const int per = static_cast<int>((longest + virtual_block - 1) / virtual_block);
  // The token ids from a generator of their own: every d draws the same ones (the shuffle
  // below draws as many numbers as the pool, which d sizes).
  std::mt19937 token_rng(7), block_rng(11);
  std::uniform_int_distribution<std::int32_t> token(0, kVocab - 1);
  std::vector<std::vector<std::int32_t>> ids(kSequences);
  for (auto& seq : ids) {
    seq.resize(static_cast<std::size_t>(longest));
    for (auto& x : seq) x = token(token_rng);
  }
  std::vector<std::int32_t> pool(static_cast<std::size_t>(kSequences * per));
  std::iota(pool.begin(), pool.end(), 3);
  std::shuffle(pool.begin(), pool.end(), block_rng);

  RankRun run;
  for (const Mode& mode : kModes) {
    auto& logits = run.logits.emplace_back();
    int length[kSequences] = {};
    for (int step = 0; step < kSteps; ++step) {
      StepBatch batch;
      std::vector<std::int32_t> step_ids;
      for (const bool decodes : {true, false}) {
        for (int q = 0; q < kSequences; ++q) {
          if (step < kStart[q] || (length[q] >= kPrompt[q]) != decodes) continue;
          const int left = kPrompt[q] - length[q];
          const int n = decodes ? 1 : (q == kSequences - 1 ? left : std::min(kChunk, left));
          const int len = length[q] + n;
          const auto blocks = static_cast<std::size_t>((len + virtual_block - 1) / virtual_block);
          batch.requests.push_back({n, len,
                                    std::span<const std::int32_t>(pool).subspan(
                                        static_cast<std::size_t>(q * per), blocks)});
          step_ids.insert(step_ids.end(), ids[q].begin() + length[q], ids[q].begin() + len);
          length[q] = len;
        }
      }
      batch.token_ids = step_ids;
      const StepResult result = engine.step(batch, mode.options);
      run.ran.push_back(result.mode);
      engine.synchronize();
      std::vector<float> host(static_cast<std::size_t>(result.logits.numel()));
      EXPECT_EQ(cudaMemcpy(host.data(), result.logits.data(), host.size() * sizeof(float),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      logits.push_back(std::move(host));
      if (ranks != nullptr) ranks->arrive_and_wait();
    }
  }
  return run;
}

struct Case {
  int t, d, interleave;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << "T = " << c.t << ", D = " << c.d << ", I = " << c.interleave;
}

EngineOptions base_options() {
  EngineOptions o;
  o.device_memory = std::int64_t(16) << 30;
  return o;
}

class DecodeContextParallel : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeContextParallel, RanksGiveTheLogitsOfOneRank) {
  FF_REQUIRE_GPU();
  const Case& c = GetParam();
  RankRun one;
  {
    Engine engine(parse_spec(spec_text(1, 1, 1, "full_and_piecewise"), "dcp.yaml"), base_options());
    ASSERT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;
    one = run_steps(engine, 1, nullptr);
  }
  for (const RuntimeMode m : {RuntimeMode::kEager, RuntimeMode::kPiecewise, RuntimeMode::kFull}) {
    EXPECT_NE(std::count(one.ran.begin(), one.ran.end(), m), 0) << to_string(m);
  }

  LocalGroup tp(c.t);
  std::vector<std::unique_ptr<LocalGroup>> dcp_groups;
  for (int g = 0; g < c.t / c.d; ++g) dcp_groups.push_back(std::make_unique<LocalGroup>(c.d));
  std::vector<RankRun> runs(static_cast<std::size_t>(c.t));
  std::barrier<> steps_done(c.t);
  tp.run([&](int r) {
    EngineOptions options = base_options();
    options.communicator = &tp.rank(r);
    options.dcp_communicator = &dcp_groups[r / c.d]->rank(r % c.d);
    Engine engine(parse_spec(spec_text(c.t, c.d, c.interleave, "full_and_piecewise"), "dcp.yaml"),
                  options);
    EXPECT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;
    EXPECT_EQ(engine.geometry().rank.dcp_rank, r % c.d);
    runs[static_cast<std::size_t>(r)] = run_steps(engine, c.d, &steps_done);
  });
  EXPECT_EQ(runs[0].ran, one.ran) << "the same dispatch as one rank";
  for (std::size_t m = 0; m < std::size(kModes); ++m) {
    for (int s = 0; s < kSteps; ++s) {
      SCOPED_TRACE(std::string(kModes[m].name) + ", step " + std::to_string(s));
      ASSERT_EQ(runs[0].logits[m][s].size(), one.logits[m][s].size());
      const double error = relative_l2(runs[0].logits[m][s], one.logits[m][s]);
      EXPECT_LE(error, kTolerance);
      if (s % 8 == 0 || s == kSteps - 1) {
        std::printf("T = %d, D = %d, I = %d, %s, step %d: relative L2 %.2e\n", c.t, c.d,
                    c.interleave, kModes[m].name, s, error);
      }
      for (int r = 1; r < c.t; ++r) {
        EXPECT_EQ(runs[r].logits[m][s], runs[0].logits[m][s]) << "rank " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, DecodeContextParallel,
                         ::testing::Values(Case{2, 2, 1}, Case{2, 2, 16}, Case{4, 2, 1},
                                           Case{4, 4, 16}),
                         [](const auto& info) {
                           return "T" + std::to_string(info.param.t) + "_D" +
                                  std::to_string(info.param.d) + "_I" +
                                  std::to_string(info.param.interleave);
                         });

// A backend that cannot attend prefill rows over a shard (the reference backend) runs decode
// steps only under DCP: graph modes that capture prefill rows are refused at construction, a
// step with prefill rows when it comes, both naming why.
TEST(DecodeContextParallelRefusals, PrefillRowsAndTheirGraphsAreRefused) {
  FF_REQUIRE_GPU();
  LocalGroup tp(2);
  std::barrier<> met(2);
  tp.run([&](int r) {
    EngineOptions options = base_options();
    options.communicator = &tp.rank(r);
    options.dcp_communicator = &tp.rank(r);  // D = T: the tensor-parallel group itself
    try {
      Engine engine(parse_spec(spec_text(2, 2, 1, "full_and_piecewise", "reference"), "dcp.yaml"),
                    options);
      ADD_FAILURE() << "full_and_piecewise was accepted under DCP with the reference backend";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("cuda_graphs.mode"), std::string::npos) << e.what();
    }
    met.arrive_and_wait();
    Engine engine(parse_spec(spec_text(2, 2, 1, "none", "reference"), "dcp.yaml"), options);
    const std::int32_t blocks[] = {1};
    StepBatch batch;
    batch.requests.push_back({5, 5, std::span<const std::int32_t>(blocks)});
    const std::vector<std::int32_t> ids = {1, 2, 3, 4, 5};
    batch.token_ids = ids;
    try {
      (void)engine.step(batch);
      ADD_FAILURE() << "a prefill step ran under DCP on the reference backend";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("prefill rows"), std::string::npos) << e.what();
    }
    met.arrive_and_wait();
  });
}

}  // namespace
}  // namespace freezeframe
