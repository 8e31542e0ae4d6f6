// Decode context parallelism on one GPU: T tensor-parallel ranks of a LocalGroup, in DCP groups
// of D consecutive ranks (each group a LocalGroup of its own), each rank holding the positions
// (p div I) mod D = its DCP rank of every sequence, give the logits one rank gives. A model of
// Llama-3.1-8B's shape (two layers) with one KV head, replicated on every rank, so every D
// dividing T is valid. Four sequences start at different steps with prompts of 1, 5, 37 and 150
// tokens (chunks of 8, the last one whole: prefill rows over a context, on both sides of a
// 128-token plan tile), then decode, so steps mix prefill and decode rows and the early ones
// have shards shorter than D · I (some empty). Run eagerly and in graphs (full for decode-only
// steps, piecewise for mixed ones, eager past the largest captured size), against the one-rank
// engine run the same way, on the fast backend and the reference backend, and for a
// DeepSeek-V2-Lite-shaped MLA model (no query gather: each rank attends its group's heads to
// its shard of the latent, the merge hands it its own). Tolerance: a relative L2
// of 1e-2 (bf16; the merge adds the shards' partial outputs in another order than one softmax
// does).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/model_shapes.h"
#include "engine/runtime/rank_logits.h"
#include "engine/runtime/reference_runs.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/base/error.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/runtime/local_group.h"
#include "freezeframe/engine/spec/spec.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

constexpr double kTolerance = 1e-2;
constexpr int kSequences = 4, kSteps = 40, kBlockSize = 16, kChunk = 8;
// Each sequence's prompt and the step it starts at; the last prompt comes in one chunk.
constexpr int kPrompt[kSequences] = {1, 5, 37, 150};
constexpr int kStart[kSequences] = {0, 0, 2, 10};

std::string dense_model(const std::string& backend) {
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
         backend + "\n";
}

std::string spec_text(int t, int d, int interleave, const std::string& graphs,
                      const std::string& backend = "paged_decode",
                      const std::string& cache_dtype = "auto") {
  const std::string model = backend == "reference_mla" || backend == "mla"
                                ? testing::deepseek_v2_lite_shaped_model(0, backend)
                                : dense_model(backend);
  return model + "cache:\n  block_size: 16\n  memory_budget: 4GiB\n  dtype: " + cache_dtype +
         "\n"
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
/// batch. A block id names kBlockSize · d positions (d = 1: physical blocks). Ranks never meet
/// outside their collectives: each goes on at its own pace.
RankRun run_steps(Engine& engine, int d, std::span<const Mode> modes = kModes, int steps = kSteps) {
  const std::int64_t virtual_block = std::int64_t(kBlockSize) * d;
  const int longest = kPrompt[kSequences - 1] + kSteps;
  const int per = static_cast<int>((longest + virtual_block - 1) / virtual_block);
  // The token ids from a generator of their own: every d draws the same ones (the shuffle
  // below draws as many numbers as the pool, which d sizes).
  std::mt19937 token_rng(7), block_rng(11);
  std::uniform_int_distribution<std::int32_t> token(0, engine.limits().vocab_size - 1);
  std::vector<std::vector<std::int32_t>> ids(kSequences);
  for (auto& seq : ids) {
    seq.resize(static_cast<std::size_t>(longest));
    for (auto& x : seq) x = token(token_rng);
  }
  std::vector<std::int32_t> pool(static_cast<std::size_t>(kSequences * per));
  std::iota(pool.begin(), pool.end(), 3);
  std::shuffle(pool.begin(), pool.end(), block_rng);

  RankRun run;
  for (const Mode& mode : modes) {
    auto& logits = run.logits.emplace_back();
    int length[kSequences] = {};
    for (int step = 0; step < steps; ++step) {
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
    }
  }
  return run;
}

struct Case {
  int t, d, interleave;
  const char* backend;
  const char* cache_dtype = "auto";
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << "T = " << c.t << ", D = " << c.d << ", I = " << c.interleave << ", " << c.backend
            << ", cache " << c.cache_dtype;
}

EngineOptions base_options() {
  EngineOptions o;
  o.device_memory = std::int64_t(16) << 30;
  return o;
}

/// Every rank's logits of every step within bf16 tolerance of one rank's (rank_logits.h: the
/// step's L2, each row's worst element, its greedy token), and the same bits on every rank
/// (each merges its own heads, then gathers the vocabulary rows of all).
void expect_logits_of_one_rank(const std::vector<RankRun>& runs, const RankRun& one,
                               std::span<const Mode> modes, const std::string& label,
                               std::size_t vocab) {
  EXPECT_EQ(runs[0].ran, one.ran) << "the same dispatch as one rank";
  for (std::size_t m = 0; m < modes.size(); ++m) {
    const int steps = static_cast<int>(one.logits[m].size());
    for (int s = 0; s < steps; ++s) {
      SCOPED_TRACE(std::string(modes[m].name) + ", step " + std::to_string(s));
      ASSERT_EQ(runs[0].logits[m][s].size(), one.logits[m][s].size());
      const testing::RankLogitsCheck check =
          testing::expect_rank_logits(runs[0].logits[m][s], one.logits[m][s], vocab, kTolerance);
      if (s % 8 == 0 || s == steps - 1) {
        std::printf(
            "%s, %s, step %d: relative L2 %.2e, worst element %.2e of its row's RMS, %d of %d "
            "greedy tokens differing at near-ties\n",
            label.c_str(), modes[m].name, s, check.relative_l2, check.worst_element,
            check.near_ties, check.rows);
      }
      for (std::size_t r = 1; r < runs.size(); ++r) {
        EXPECT_EQ(runs[r].logits[m][s], runs[0].logits[m][s]) << "rank " << r;
      }
    }
  }
}

class DecodeContextParallel : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeContextParallel, RanksGiveTheLogitsOfOneRank) {
  FF_REQUIRE_GPU();
  const Case& c = GetParam();
  RankRun one;
  {
    Engine engine(
        parse_spec(spec_text(1, 1, 1, "full_and_piecewise", c.backend, c.cache_dtype), "dcp.yaml"),
        base_options());
    ASSERT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;
    one = run_steps(engine, 1);
  }
  for (const RuntimeMode m : {RuntimeMode::kEager, RuntimeMode::kPiecewise, RuntimeMode::kFull}) {
    EXPECT_NE(std::count(one.ran.begin(), one.ran.end(), m), 0) << to_string(m);
  }

  LocalGroup tp(c.t);
  std::vector<RankRun> runs(static_cast<std::size_t>(c.t));
  tp.run([&](int r) {
    EngineOptions options = base_options();
    options.communicator = &tp.rank(r);
    options.dcp_communicator = &tp.rank(r, c.d);  // D consecutive ranks
    Engine engine(parse_spec(spec_text(c.t, c.d, c.interleave, "full_and_piecewise", c.backend,
                                       c.cache_dtype),
                             "dcp.yaml"),
                  options);
    EXPECT_TRUE(engine.capture_report().failure.empty()) << engine.capture_report().failure;
    EXPECT_EQ(engine.geometry().rank.dcp_rank, r % c.d);
    runs[static_cast<std::size_t>(r)] = run_steps(engine, c.d);
  });
  std::ostringstream label;
  label << c;
  const auto vocab = static_cast<std::size_t>(
      parse_spec(spec_text(1, 1, 1, "none", c.backend), "dcp.yaml").model.vocab_size);
  expect_logits_of_one_rank(runs, one, kModes, label.str(), vocab);
}

// (T, D) over (2, 1), (2, 2), (4, 2), (4, 4), I over 1 and 16 (D = 1 holds no shard: I is
// moot), on the fast backend and the reference backend; and an MLA model at three of them.
std::vector<Case> groups() {
  std::vector<Case> cases;
  for (const char* backend : {"paged_decode", "reference"}) {
    cases.push_back({2, 1, 1, backend});
    for (const auto& [t, d] : {std::pair{2, 2}, std::pair{4, 2}, std::pair{4, 4}}) {
      for (const int interleave : {1, 16}) cases.push_back({t, d, interleave, backend});
    }
  }
  // An MLA model: each rank attends its group's heads against its shard of the latent.
  for (const Case& c : {Case{2, 2, 16, ""}, Case{4, 2, 1, ""}, Case{4, 4, 16, ""}}) {
    cases.push_back({c.t, c.d, c.interleave, "reference_mla"});
  }
  // The same on the tensor-core decode kernel: its partial states and LSEs merged.
  for (const Case& c : {Case{2, 2, 1, ""}, Case{4, 4, 16, ""}}) {
    cases.push_back({c.t, c.d, c.interleave, "mla"});
  }
  // And with the latent in fp8.
  cases.push_back({2, 2, 16, "mla", "fp8_e4m3"});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Groups, DecodeContextParallel, ::testing::ValuesIn(groups()),
                         [](const auto& info) {
                           std::ostringstream name;
                           name << "T" << info.param.t << "_D" << info.param.d << "_I"
                                << info.param.interleave << "_" << info.param.backend;
                           if (std::string(info.param.cache_dtype) != "auto") {
                             name << "_" << info.param.cache_dtype;
                           }
                           return name.str();
                         });

// The same eagerly, T = D = 2, I = 16, the first 12 steps (prefills, chunks over a context,
// decodes, shards shorter than D · I): the case compute-sanitizer runs.
TEST(DecodeContextParallelEager, RanksGiveTheLogitsOfOneRank) {
  FF_REQUIRE_GPU();
  constexpr int kHostSteps = 12;
  const Mode eager[] = {kModes[0]};
  RankRun one;
  {
    Engine engine(parse_spec(spec_text(1, 1, 1, "none"), "dcp.yaml"), base_options());
    one = run_steps(engine, 1, eager, kHostSteps);
  }
  LocalGroup tp(2);
  std::vector<RankRun> runs(2);
  tp.run([&](int r) {
    EngineOptions options = base_options();
    options.communicator = &tp.rank(r);
    options.dcp_communicator = &tp.rank(r);  // D = T: the tensor-parallel group itself
    Engine engine(parse_spec(spec_text(2, 2, 16, "none"), "dcp.yaml"), options);
    runs[static_cast<std::size_t>(r)] = run_steps(engine, 2, eager, kHostSteps);
  });
  expect_logits_of_one_rank(
      runs, one, eager, "eager, T = 2, D = 2, I = 16",
      static_cast<std::size_t>(
          parse_spec(spec_text(1, 1, 1, "none"), "dcp.yaml").model.vocab_size));
}

/// The reference backend in all but one thing: it says it cannot attend prefill rows over a
/// DCP shard (as a backend of an embedder's might).
class DecodeOnlyUnderDcp final : public AttentionBackend {
 public:
  std::string_view name() const override { return "decode_only_under_dcp"; }
  bool supports_dcp_prefill() const override { return false; }

  bool is_mla() const override { return inner_.is_mla(); }
  std::unique_ptr<AttentionImpl> make_impl(const AttentionParams& p, DcpGroup dcp) const override {
    return inner_.make_impl(p, dcp);
  }
  std::size_t plan_bytes(const BatchLimits& limits, const DeviceProperties& d) const override {
    return inner_.plan_bytes(limits, d);
  }
  void plan(const CommonAttentionMetadata& common, std::span<std::byte> slice) const override {
    inner_.plan(common, slice);
  }
  GraphSupport graph_support() const override { return inner_.graph_support(); }
  std::vector<std::int64_t> kv_cache_shape(std::int64_t num_blocks, int block_size,
                                           int num_kv_heads, int head_size,
                                           DType dtype) const override {
    return inner_.kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, dtype);
  }
  std::vector<int> kv_cache_stride_order() const override { return inner_.kv_cache_stride_order(); }
  bool accept_output_buffer() const override { return inner_.accept_output_buffer(); }
  bool supports_quant_query_input() const override { return inner_.supports_quant_query_input(); }
  std::span<const int> supported_head_sizes() const override {
    return inner_.supported_head_sizes();
  }
  std::span<const DType> supported_kv_cache_dtypes() const override {
    return inner_.supported_kv_cache_dtypes();
  }

 private:
  const AttentionBackend& inner_ = find_backend("reference");
};

// A backend that cannot attend prefill rows over a shard runs decode steps only under DCP:
// graph modes that capture prefill rows are refused at construction, a step with prefill rows
// when it comes, both naming why.
TEST(DecodeContextParallelRefusals, PrefillRowsAndTheirGraphsAreRefused) {
  FF_REQUIRE_GPU();
  BackendRegistry registry;
  registry.add(std::make_unique<DecodeOnlyUnderDcp>());
  const std::string backend = "decode_only_under_dcp";
  LocalGroup tp(2);
  tp.run([&](int r) {
    EngineOptions options = base_options();
    options.communicator = &tp.rank(r);
    options.dcp_communicator = &tp.rank(r);  // D = T: the tensor-parallel group itself
    try {
      Engine engine(
          parse_spec(spec_text(2, 2, 1, "full_and_piecewise", backend), "dcp.yaml", registry),
          options);
      ADD_FAILURE() << "full_and_piecewise was accepted under DCP with " << backend;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("cuda_graphs.mode"), std::string::npos) << e.what();
    }
    Engine engine(parse_spec(spec_text(2, 2, 1, "none", backend), "dcp.yaml", registry), options);
    const std::int32_t blocks[] = {1};
    StepBatch batch;
    batch.requests.push_back({5, 5, std::span<const std::int32_t>(blocks)});
    const std::vector<std::int32_t> ids = {1, 2, 3, 4, 5};
    batch.token_ids = ids;
    try {
      (void)engine.step(batch);
      ADD_FAILURE() << "a prefill step ran under DCP on " << backend;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("prefill rows"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace freezeframe
