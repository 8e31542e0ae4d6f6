// Tensor parallelism on one GPU: T ranks of a LocalGroup, each an Engine on its own thread with
// its shard of the weights, heads and KV cache, give the logits one rank gives. A model of
// Llama-3.1-8B's shape (hidden 4096, 32 query heads of 128, MLP 14336, vocabulary 128256; two
// layers) with 8 KV heads (split over the ranks) and with 1 (replicated on every rank), at T = 2
// and 4, on the fast decode backend and the reference backend, and with a vocabulary of one
// token more (the last rank's LM head rows padded, their logits dropped). The steps: prefills of
// mixed lengths (1 to 100 tokens, blocks shuffled), a decode of every sequence, then decodes and
// prefill chunks mixed, each run eagerly, in piecewise graphs and (decodes) in full graphs,
// against the one-rank engine run the same way. Every rank's logits are the same bits (each
// gathers every rank's vocabulary rows), and so are the tokens each draws. The same for a
// DeepSeek-V2-Lite-shaped MLA model (its heads split, its latent cache on every rank).
// Tolerance: a relative L2 of 1e-2 (bf16 activations; the ranks add their partial sums of
// o_proj and down_proj in another order than one GEMM does).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runtime/model_shapes.h"
#include "engine/runtime/rank_logits.h"
#include "engine/runtime/reference_runs.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/runtime/local_group.h"
#include "freezeframe/engine/spec/spec.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

constexpr double kTolerance = 1e-2;
std::string llama_shaped_spec(int kv_heads, const std::string& backend, int vocab, int t) {
  return "model:\n"
         "  name: llama-3.1-8b-shaped\n"
         "  num_layers: 2\n"
         "  hidden_size: 4096\n"
         "  num_heads: 32\n"
         "  num_kv_heads: " +
         std::to_string(kv_heads) +
         "\n"
         "  head_size: 128\n"
         "  intermediate_size: 14336\n"
         "  vocab_size: " +
         std::to_string(vocab) +
         "\n"
         "  dtype: bf16\n"
         "  rope_theta: 500000\n"
         "  max_position_embeddings: 2048\n"
         "  attention:\n"
         "    backend: " +
         backend +
         "\n"
         "cache:\n  block_size: 16\n  memory_budget: 4GiB\n"
         "scheduler:\n  max_num_seqs: 16\n  max_num_batched_tokens: 256\n"
         "cuda_graphs:\n  mode: full_and_piecewise\n  max_capture_size: 64\n"
         "tp:\n  world_size: " +
         std::to_string(t) + "\n";
}

/// The sequences: each request's block table (shuffled blocks) and its tokens so far.
struct Sequences {
  std::vector<std::vector<std::int32_t>> blocks;
  std::vector<std::vector<std::int32_t>> tokens;
};

Sequences make_sequences(int count, int max_len, int block_size, int vocab) {
  std::mt19937 rng(7);
  const int per = (max_len + block_size - 1) / block_size;
  std::vector<std::int32_t> pool(static_cast<std::size_t>(count * per));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  Sequences s;
  std::uniform_int_distribution<std::int32_t> token(0, vocab - 1);
  for (int i = 0; i < count; ++i) {
    s.blocks.emplace_back(pool.begin() + i * per, pool.begin() + (i + 1) * per);
    std::vector<std::int32_t> t(static_cast<std::size_t>(max_len));
    for (auto& x : t) x = token(rng);
    s.tokens.push_back(std::move(t));
  }
  return s;
}

/// A step: (sequence, tokens cached before, new tokens) per request, decodes first.
struct Work {
  int sequence, cached, fresh;
};
const std::vector<std::vector<Work>> kSteps = {
    {{0, 0, 1}, {1, 0, 17}, {2, 0, 40}},                                        // prefills: 58 rows
    {{3, 0, 100}, {4, 0, 5}, {5, 0, 33}},                                       // 138 rows: eager
    {{0, 1, 1}, {1, 17, 1}, {2, 40, 1}, {3, 100, 1}, {4, 5, 1}, {5, 33, 1}},    // uniform decode
    {{0, 2, 1}, {2, 41, 1}, {4, 6, 1}, {5, 34, 1}, {1, 18, 20}, {3, 101, 20}},  // mixed
};

struct Mode {
  const char* name;
  StepOptions options;
};
const Mode kModes[] = {{"eager", {.eager = true}},
                       {"piecewise graphs", {.prefer_piecewise = true}},
                       {"graphs as dispatched", {}}};

/// Logits [mode][step] and the greedy tokens, of one rank.
struct RankRun {
  std::vector<std::vector<std::vector<float>>> logits;
  std::vector<std::vector<std::vector<std::int32_t>>> tokens;
  std::vector<RuntimeMode> ran;
};

/// Ranks never meet outside their collectives: each goes on at its own pace, its synchronous
/// copies included.
RankRun run_steps(Engine& engine, const Sequences& seqs, std::span<const Mode> modes) {
  RankRun run;
  const int block_size = engine.limits().block_size;
  for (const Mode& mode : modes) {
    auto& logits = run.logits.emplace_back();
    auto& tokens = run.tokens.emplace_back();
    for (const auto& step : kSteps) {
      StepBatch batch;
      std::vector<std::int32_t> ids;
      for (const Work& w : step) {
        const int len = w.cached + w.fresh;
        batch.requests.push_back(
            {w.fresh, len,
             std::span<const std::int32_t>(seqs.blocks[w.sequence])
                 .first(static_cast<std::size_t>((len + block_size - 1) / block_size))});
        const auto& t = seqs.tokens[w.sequence];
        ids.insert(ids.end(), t.begin() + w.cached, t.begin() + len);
      }
      batch.token_ids = ids;
      const StepResult result = engine.step(batch, mode.options);
      run.ran.push_back(result.mode);
      engine.synchronize();
      std::vector<float> host(static_cast<std::size_t>(result.logits.numel()));
      EXPECT_EQ(cudaMemcpy(host.data(), result.logits.data(), host.size() * sizeof(float),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
      logits.push_back(std::move(host));
      tokens.emplace_back(result.host_token_ids.begin(), result.host_token_ids.end());
    }
  }
  return run;
}

struct Case {
  int kv_heads;
  const char* backend;
  int vocab = 128256;  ///< Llama 3's; one more leaves the last rank padding rows
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.kv_heads << " KV heads on " << c.backend << ", vocabulary " << c.vocab;
}

/// How the ranks run: their counts and the step modes.
struct Deployments {
  std::vector<int> ranks = {2, 4};
  std::span<const Mode> modes = kModes;
};

/// Runs the steps on one rank and on each deployment's ranks over `spec(t)` (vocabulary
/// `vocab`), and holds every rank's logits to one rank's and every rank's tokens to rank 0's.
void expect_ranks_give_one_ranks_logits(const std::function<std::string(int t)>& spec, int vocab,
                                        const std::string& label, const Deployments& runs_on = {}) {
  const std::span<const Mode> modes = runs_on.modes;
  const bool graphs = modes.size() > 1;
  const Sequences seqs = make_sequences(6, 160, 16, vocab);
  const auto vocab_rows = static_cast<std::size_t>(vocab);
  EngineOptions base;
  base.device_memory = std::int64_t(16) << 30;
  base.sample_tokens = true;  // greedy: no sampling parameters
  RankRun one;
  {
    Engine engine(parse_spec(spec(1), "tp.yaml"), base);
    ASSERT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;
    one = run_steps(engine, seqs, modes);
  }
  if (graphs) {  // piecewise for the mixed steps, full for the uniform decode
    EXPECT_NE(std::count(one.ran.begin(), one.ran.end(), RuntimeMode::kPiecewise), 0);
    EXPECT_NE(std::count(one.ran.begin(), one.ran.end(), RuntimeMode::kFull), 0);
  }

  for (const int t : runs_on.ranks) {
    SCOPED_TRACE("T = " + std::to_string(t));
    LocalGroup group(t);
    std::vector<RankRun> runs(static_cast<std::size_t>(t));
    group.run([&](int r) {
      EngineOptions options = base;
      options.communicator = &group.rank(r);
      Engine engine(parse_spec(spec(t), "tp.yaml"), options);
      EXPECT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;
      EXPECT_EQ(engine.geometry().rank.tp_rank, r);
      runs[static_cast<std::size_t>(r)] = run_steps(engine, seqs, modes);
    });
    EXPECT_EQ(runs[0].ran, one.ran) << "the same dispatch as one rank";
    for (std::size_t m = 0; m < modes.size(); ++m) {
      for (std::size_t s = 0; s < kSteps.size(); ++s) {
        SCOPED_TRACE(std::string(modes[m].name) + ", step " + std::to_string(s));
        ASSERT_EQ(runs[0].logits[m][s].size(), one.logits[m][s].size());
        const testing::RankLogitsCheck check = testing::expect_rank_logits(
            runs[0].logits[m][s], one.logits[m][s], vocab_rows, kTolerance);
        std::printf(
            "%s, T = %d, %s, step %zu: relative L2 %.2e, worst element %.2e of its row's RMS, "
            "%d of %d greedy tokens differing at near-ties\n",
            label.c_str(), t, modes[m].name, s, check.relative_l2, check.worst_element,
            check.near_ties, check.rows);
        for (int r = 1; r < t; ++r) {
          EXPECT_EQ(runs[r].logits[m][s], runs[0].logits[m][s]) << "rank " << r;
          EXPECT_EQ(runs[r].tokens[m][s], runs[0].tokens[m][s]) << "rank " << r;
        }
        // Each rank's greedy token is the argmax of the logits it returned.
        const std::size_t reqs = runs[0].tokens[m][s].size();
        ASSERT_EQ(runs[0].logits[m][s].size(), reqs * vocab_rows);
        for (std::size_t q = 0; q < reqs; ++q) {
          const auto row =
              runs[0].logits[m][s].begin() + static_cast<std::ptrdiff_t>(q * vocab_rows);
          EXPECT_EQ(runs[0].tokens[m][s][q],
                    std::max_element(row, row + static_cast<std::ptrdiff_t>(vocab_rows)) - row);
        }
      }
    }
  }
}

class TensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallel, RanksGiveTheLogitsOfOneRank) {
  FF_REQUIRE_GPU();
  const Case& c = GetParam();
  std::ostringstream label;
  label << c.kv_heads << " KV heads, " << c.backend;
  expect_ranks_give_one_ranks_logits(
      [&](int t) { return llama_shaped_spec(c.kv_heads, c.backend, c.vocab, t); }, c.vocab,
      label.str());
}

INSTANTIATE_TEST_SUITE_P(Shapes, TensorParallel,
                         ::testing::Values(Case{8, "paged_decode"}, Case{1, "paged_decode"},
                                           Case{8, "reference"}, Case{1, "reference"},
                                           Case{8, "paged_decode", 128257}),
                         [](const auto& info) {
                           return std::to_string(info.param.kv_heads) + "_kv_heads_" +
                                  info.param.backend + "_vocab_" + std::to_string(info.param.vocab);
                         });

/// DeepSeek-V2-Lite's attention and dense MLP (hidden 2048, 16 heads, latent 512 + rope 64,
/// MLP 10944, vocabulary 102400; two layers), its query uncompressed (q_lora_rank 0: V2-Lite's)
/// or through a 1536-wide latent (DeepSeek-V2's). Each rank holds its heads' query and key/value
/// up-projection rows and o_proj columns, and the whole latent cache.
std::string mla_spec(int q_lora_rank, int t, const std::string& graph_mode = "full_and_piecewise") {
  return testing::deepseek_v2_lite_shaped_model(q_lora_rank) +
         "cache:\n  block_size: 16\n  memory_budget: 4GiB\n"
         "scheduler:\n  max_num_seqs: 16\n  max_num_batched_tokens: 256\n"
         "cuda_graphs:\n  mode: " +
         graph_mode +
         "\n  max_capture_size: 64\n"
         "tp:\n  world_size: " +
         std::to_string(t) + "\n";
}

class TensorParallelMla : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallelMla, RanksGiveTheLogitsOfOneRank) {
  FF_REQUIRE_GPU();
  const int q_lora_rank = GetParam();
  expect_ranks_give_one_ranks_logits([&](int t) { return mla_spec(q_lora_rank, t); }, 102400,
                                     "MLA, q_lora_rank " + std::to_string(q_lora_rank));
}

INSTANTIATE_TEST_SUITE_P(DeepSeekV2LiteShaped, TensorParallelMla, ::testing::Values(0, 1536),
                         [](const auto& info) {
                           return "q_lora_rank_" + std::to_string(info.param);
                         });

// The same ranks eagerly: the case compute-sanitizer runs.
TEST(TensorParallelMlaEager, RanksGiveTheLogitsOfOneRank) {
  FF_REQUIRE_GPU();
  const Mode eager[] = {kModes[0]};
  expect_ranks_give_one_ranks_logits([](int t) { return mla_spec(1536, t, "none"); }, 102400,
                                     "MLA eagerly, q_lora_rank 1536",
                                     {.ranks = {2, 4}, .modes = eager});
}

}  // namespace
}  // namespace freezeframe
