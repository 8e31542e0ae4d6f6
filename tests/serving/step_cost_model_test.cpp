// serving/: the step cost model: the work of a step, the fit to a bench JSON with known
// coefficients, interpolation of the dense time, and files it must refuse.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/serving/step_cost_model.h"
#include "freezeframe/serving/step_work.h"
#include "support/scratch_files.h"

namespace freezeframe {
namespace {

using testing::scratch;
using testing::scratch_dir;

#define EXPECT_CONTAINS(text, fragment)               \
  EXPECT_NE((text).find(fragment), std::string::npos) \
      << "expected: " << (fragment) << "\ngot: " << (text)

// The synthetic engine: dense(T) piecewise-linear through these points, attention linear.
constexpr double kDecodeMsPerToken = 2.5e-5;  // 9.8 ms for 256 decodes over 1536 tokens
constexpr double kPrefillMsPerPair = 4e-7;    // 13.4 ms for one 8192-token prompt
double true_dense(std::int64_t t) {
  // 5 ms of weights up to 64 tokens, then compute-bound growth: 5 + (t − 64)·0.004.
  return t <= 64 ? 5.0 : 5.0 + 0.004 * static_cast<double>(t - 64);
}

struct Shape {
  std::int64_t b, n, context;
};

/// A bench JSON of decode rows (batch at `context`) and prefill rows whose times follow the
/// synthetic engine; `noise(i)` scales row i's attention time. Decode rows run in full graphs
/// (piecewise and eager slower), prefill rows eagerly only. The breakdown is the step split
/// into attention and two dense ops, all scaled by 1.1 (eager with events between ops runs
/// slower; only the shares matter).
std::string bench_json(
    const std::vector<std::int64_t>& batches, std::int64_t context,
    const std::vector<Shape>& prefills,
    const std::function<double(int)>& noise = [](int) { return 1.0; }) {
  std::string out =
      "{\n  \"spec\": \"s.yaml\",\n  \"model\": \"synthetic\",\n  \"backend\": "
      "\"paged_decode\",\n  \"context\": " +
      std::to_string(context) + ",\n  \"results\": [";
  char buf[512];
  int row = 0;
  auto add = [&](std::int64_t tokens, double attention, bool graph) {
    attention *= noise(row++);
    const double dense = true_dense(tokens), ms = dense + attention;
    std::snprintf(buf, sizeof buf,
                  ", \"eager_ms\": %.17g, \"piecewise_ms\": %.17g, \"full_ms\": %.17g, "
                  "\"breakdown\": {\"qkv_proj\": %.17g, \"attention\": %.17g, "
                  "\"gate_up_proj\": %.17g}}",
                  graph ? ms * 1.3 : ms, graph ? ms * 1.05 : 0.0, graph ? ms : 0.0,
                  dense * 0.4 * 1.1, attention * 1.1, dense * 0.6 * 1.1);
    out += buf;
  };
  for (std::size_t i = 0; i < batches.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s\n    {\"batch\": %lld", i ? "," : "",
                  static_cast<long long>(batches[i]));
    out += buf;
    add(batches[i], kDecodeMsPerToken * double(batches[i] * context), true);
  }
  out += "\n  ],\n  \"prefill\": [";
  for (std::size_t i = 0; i < prefills.size(); ++i) {
    const Shape& s = prefills[i];
    std::snprintf(buf, sizeof buf, "%s\n    {\"b\": %lld, \"n\": %lld, \"context\": %lld",
                  i ? "," : "", static_cast<long long>(s.b), static_cast<long long>(s.n),
                  static_cast<long long>(s.context));
    out += buf;
    const std::int64_t pairs = s.n == 1 ? 0 : s.b * causal_pairs(s.context, s.n);
    const std::int64_t context_read = s.n == 1 ? s.b * (s.context + 1) : 0;
    add(s.b * s.n, kPrefillMsPerPair * double(pairs) + kDecodeMsPerToken * double(context_read),
        false);
  }
  return out + "\n  ]\n}\n";
}

const std::vector<std::int64_t> kBatches = {1, 8, 64, 256};
const std::vector<Shape> kPrefills = {
    {1, 8192, 0}, {4, 2048, 0}, {16, 512, 0}, {64, 128, 0}, {2, 1024, 2048}};

TEST(StepWork, CountsCausalPairsWithAndWithoutAWindow) {
  EXPECT_EQ(causal_pairs(0, 4), 1 + 2 + 3 + 4);
  EXPECT_EQ(causal_pairs(10, 3), 11 + 12 + 13);
  EXPECT_EQ(causal_pairs(10, 3, 12), 11 + 12 + 12);
  EXPECT_EQ(causal_pairs(10, 3, 5), 3 * 5);
  EXPECT_EQ(causal_pairs(10, 3, 100), 11 + 12 + 13);
  EXPECT_EQ(causal_pairs(5, 0), 0);
  const std::vector<std::int32_t> blocks(64, 0);
  const std::vector<StepRequest> step = {{1, 100, blocks}, {1, 7, blocks}, {8, 24, blocks}};
  const StepWork w = step_work(step);
  EXPECT_EQ(w.tokens, 10);
  EXPECT_EQ(w.decode_context, 107);
  EXPECT_EQ(w.prefill_pairs, causal_pairs(16, 8));
}

TEST(StepCostModel, RecoversKnownCoefficientsFromASyntheticBench) {
  const StepCostModel m = StepCostModel::parse(bench_json(kBatches, 1536, kPrefills), "b.json");
  EXPECT_NEAR(m.decode_ms_per_context_token(), kDecodeMsPerToken, 1e-12);
  EXPECT_NEAR(m.prefill_ms_per_pair(), kPrefillMsPerPair, 1e-14);
  // The dense time at each measured count; the five prefill rows share two counts.
  const auto points = m.dense_points();
  ASSERT_EQ(points.size(), 4u + 2u);
  for (const auto& p : points) EXPECT_NEAR(p.ms, true_dense(p.tokens), 1e-9) << p.tokens;
  EXPECT_EQ(points.back().tokens, 8192);
  // A mixed step: 100 decodes over 2000 tokens each and a 900-token chunk after 3000.
  StepWork w;
  w.tokens = 1000;
  w.decode_context = 100 * 2000;
  w.prefill_pairs = causal_pairs(3000, 900);
  EXPECT_NEAR(m.step_ms(w),
              true_dense(1000) + kDecodeMsPerToken * double(w.decode_context) +
                  kPrefillMsPerPair * double(w.prefill_pairs),
              1e-9);
  EXPECT_EQ(m.model_name(), "synthetic");
  EXPECT_EQ(m.backend(), "paged_decode");
  EXPECT_CONTAINS(m.describe(), "'b.json'");
  EXPECT_CONTAINS(m.describe(), "synthetic");
}

TEST(StepCostModel, FitsNoisyRowsWithinTheNoise) {
  // ±3 % on every row's attention time.
  const auto noise = [](int row) { return row % 2 ? 1.03 : 0.97; };
  const StepCostModel m =
      StepCostModel::parse(bench_json(kBatches, 1536, kPrefills, noise), "noisy.json");
  EXPECT_NEAR(m.decode_ms_per_context_token() / kDecodeMsPerToken, 1.0, 0.03);
  EXPECT_NEAR(m.prefill_ms_per_pair() / kPrefillMsPerPair, 1.0, 0.03);
}

TEST(StepCostModel, InterpolatesTheDenseTimeAndExtendsItPastTheEnds) {
  const StepCostModel m = StepCostModel::parse(bench_json(kBatches, 1536, kPrefills), "b.json");
  EXPECT_NEAR(m.dense_ms(1), 5.0, 1e-9);
  EXPECT_NEAR(m.dense_ms(0), 5.0, 1e-9) << "flat below the smallest count";
  // Between 256 and 2048 (the 2 × 1024 row) and between 2048 and 8192: on the line.
  EXPECT_NEAR(m.dense_ms(1000), true_dense(1000), 1e-9);
  EXPECT_NEAR(m.dense_ms(5000), true_dense(5000), 1e-9);
  // Past 8192 along the last segment.
  EXPECT_NEAR(m.dense_ms(16384), true_dense(16384), 1e-9);
  // Between 8 and 64 the synthetic curve is flat, and so is the model.
  EXPECT_NEAR(m.dense_ms(30), 5.0, 1e-9);
  // A graph runs the step padded: the dense time is that of the padded size.
  StepWork w;
  w.tokens = 3;
  w.decode_context = 3 * 100;
  EXPECT_NEAR(m.step_ms(w, 4) - m.step_ms(w), m.dense_ms(4) - m.dense_ms(3), 1e-12);
}

TEST(StepCostModel, NeverFallsPastTheLargestCount) {
  std::vector<StepSample> samples(3);
  samples[0].work = {1, 1000, 0}, samples[0].run_tokens = 1, samples[0].ms = 5;
  samples[0].attention_ms = 1;
  samples[1].work = {1024, 0, 500000}, samples[1].run_tokens = 1024, samples[1].ms = 30;
  samples[1].attention_ms = 2;
  samples[2].work = {2048, 0, 2000000}, samples[2].run_tokens = 2048, samples[2].ms = 28;
  samples[2].attention_ms = 8;
  const StepCostModel m = StepCostModel::fit(samples, "s");
  EXPECT_NEAR(m.dense_ms(2048), 20.0, 1e-9);
  EXPECT_NEAR(m.dense_ms(4096), 20.0, 1e-9) << "a falling last segment is held flat";
}

/// The message of StepCostModel::parse on `json`, or a failure.
std::string refusal(const std::string& json) {
  try {
    (void)StepCostModel::parse(json, "cost.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.message();
  }
  ADD_FAILURE() << "accepted: " << json.substr(0, 400);
  return {};
}

/// The synthetic bench with `from` replaced by `to` (which must occur).
std::string edited(const std::string& from, const std::string& to) {
  std::string json = bench_json(kBatches, 1536, kPrefills);
  const std::size_t at = json.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? json : json.replace(at, from.size(), to);
}

TEST(StepCostModel, RefusesAFileWithoutDecodeOrPrefillRows) {
  std::string m = refusal(bench_json({}, 1536, kPrefills));
  EXPECT_CONTAINS(m, "cost.json:");
  EXPECT_CONTAINS(m, "results: has no rows");
  EXPECT_CONTAINS(m, "--batches");
  m = refusal(bench_json(kBatches, 1536, {}));
  EXPECT_CONTAINS(m, "prefill: has no rows");
  EXPECT_CONTAINS(m, "--prefill");
  m = refusal(edited("\"prefill\"", "\"prefills\""));
  EXPECT_CONTAINS(m, "has no 'prefill' rows");
  m = refusal(bench_json(kBatches, 1536, {{8, 1, 100}}));
  EXPECT_CONTAINS(m, "prefill: has no row of more than one new token");
  m = refusal(edited("\"results\": [", "\"results\": {\"a\": 1}, \"x\": ["));
  EXPECT_CONTAINS(m, "results: must be a list of rows");
}

TEST(StepCostModel, RefusesNegativeOrNonFiniteTimesNamingTheField) {
  // The second prefill row is on line 14 of the file.
  std::string json = bench_json(kBatches, 1536, kPrefills);
  const std::size_t row = json.find("{\"b\": 4");
  const std::size_t eager = json.find("\"eager_ms\": ", row) + 12;
  json.replace(eager, json.find(',', eager) - eager, "-1.5");
  std::string m = refusal(json);
  EXPECT_CONTAINS(m, "cost.json:14:");
  EXPECT_CONTAINS(m,
                  "prefill[1].eager_ms: must be a number of ms from 0 to 3600000 (an hour), got "
                  "'-1.5'");
  m = refusal(edited("\"full_ms\": ", "\"full_ms\": 1e999, \"x\": "));
  EXPECT_CONTAINS(m, "cost.json:7:97: a number out of range");
  // Finite but past any step: its sums would overflow to inf.
  m = refusal(edited("\"full_ms\": ", "\"full_ms\": 1e300, \"x\": "));
  EXPECT_CONTAINS(m, "results[0].full_ms: must be a number of ms from 0 to 3600000");
  m = refusal(edited("\"full_ms\": ", "\"full_ms\": nan, \"x\": "));
  EXPECT_CONTAINS(m, "cost.json:7:");
  EXPECT_CONTAINS(m, "syntax error while parsing value - invalid literal");
  m = refusal(edited("\"attention\": ", "\"attention\": \"fast\", \"y\": "));
  EXPECT_CONTAINS(m, "results[0].breakdown.attention: must be a number of ms");
}

TEST(StepCostModel, RefusesRowsWithoutTheirCountsTimesOrBreakdown) {
  EXPECT_CONTAINS(refusal(edited("{\"batch\": 8,", "{\"batches\": 8,")),
                  "results[1]: has no 'batch'");
  EXPECT_CONTAINS(refusal(edited("{\"batch\": 8,", "{\"batch\": 8.5,")),
                  "results[1].batch: must be a whole number from 1 to 16777216, got '8.5'");
  EXPECT_CONTAINS(refusal(edited("\"context\": 1536,", "\"ctx\": 1536,")),
                  "the top level: has no 'context'");
  EXPECT_CONTAINS(refusal(edited("\"n\": 8192", "\"n\": 0")),
                  "prefill[0].n: must be a whole number from 1");
  EXPECT_CONTAINS(refusal(edited("\"n\": 8192, \"context\": 0", "\"n\": 8192")),
                  "prefill[0]: has no 'context'");
  EXPECT_CONTAINS(refusal(edited("\"b\": 64, \"n\": 128", "\"b\": 1000000, \"n\": 128")),
                  "prefill[3].n: must be a whole number from 1 to 16");
  EXPECT_CONTAINS(refusal(edited("\"piecewise_ms\": ", "\"pw_ms\": ")),
                  "results[0]: has no 'piecewise_ms'");
  EXPECT_CONTAINS(refusal(edited("\"breakdown\": ", "\"ops\": ")),
                  "results[0]: has no 'breakdown'");
  EXPECT_CONTAINS(refusal(edited("\"breakdown\": {", "\"breakdown\": [], \"z\": {")),
                  "results[0].breakdown: must be an object of 1 to 256 op kinds");
  // Every mode at 0: the row was never measured.
  std::string json = bench_json(kBatches, 1536, kPrefills);
  const std::size_t row = json.find("{\"b\": 16");
  const std::size_t eager = json.find("\"eager_ms\": ", row) + 12;
  json.replace(eager, json.find(',', eager) - eager, "0");
  EXPECT_CONTAINS(refusal(json), "prefill[2]: every mode's time is 0");
}

TEST(StepCostModel, RefusesWhatIsNotABenchJson) {
  EXPECT_CONTAINS(refusal("{\"results\": [1, 2"), "cost.json:1:");
  EXPECT_CONTAINS(refusal("[1, 2, 3]"), "must be a JSON object");
  EXPECT_CONTAINS(refusal(""), "cost.json:1:1: syntax error while parsing value");
  EXPECT_CONTAINS(refusal(std::string(100000, '[')), "cost.json:1:");
  std::string many = "{\"context\": 1, \"results\": [";
  for (int i = 0; i < 5000; ++i) many += "{},";
  EXPECT_CONTAINS(refusal(many + "{}]}"), "results: has 5001 rows, more than the 4096 read");
  EXPECT_CONTAINS(refusal("{\"context\": 1, \"results\": [3]}"),
                  "cost.json:1:28: results[0]: must be an object");
}

// Read as JSON: what YAML would take is refused, a quoted number is a string, and a repeated
// key keeps its last value as Python's json does.
TEST(StepCostModel, ReadsJsonAsJson) {
  EXPECT_CONTAINS(refusal(edited("\"full_ms\": ", "# a comment\n\"full_ms\": ")), "syntax error");
  EXPECT_CONTAINS(refusal(edited("\"full_ms\": ", "full_ms: ")), "syntax error");
  EXPECT_CONTAINS(refusal(edited("{\"batch\": 8,", "{\"batch\": 8,,")), "syntax error");
  EXPECT_CONTAINS(refusal(edited("{\"batch\": 8,", "{\"batch\": !!int 8,")), "syntax error");
  EXPECT_CONTAINS(refusal(edited("\"full_ms\": ", "\"full_ms\": \"5\", \"x\": ")),
                  "results[0].full_ms: must be a number of ms from 0 to 3600000 (an hour), got "
                  "the string '5'");
  const std::string json = bench_json(kBatches, 1536, kPrefills);
  const std::string last_wins = edited("\"full_ms\": ", "\"full_ms\": \"x\", \"full_ms\": ");
  EXPECT_NEAR(StepCostModel::parse(last_wins, "cost.json").prefill_ms_per_pair(),
              StepCostModel::parse(json, "cost.json").prefill_ms_per_pair(), 1e-14);
}

TEST(StepCostModel, LoadsAFileAndRefusesFilesItMustNotRead) {
  const std::string json = bench_json(kBatches, 1536, kPrefills);
  const std::string path = scratch(std::vector<char>(json.begin(), json.end()), "bench.json");
  EXPECT_NEAR(StepCostModel::load(path).prefill_ms_per_pair(), kPrefillMsPerPair, 1e-14);
  try {
    (void)StepCostModel::load((scratch_dir() / "missing.json").string());
    ADD_FAILURE() << "a missing file was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_CONTAINS(e.message(), "cost model file");
  }
  const std::string big = scratch(std::vector<char>(5 << 20, ' '), "big.json");
  for (const std::string& p : {big, scratch_dir().string()}) {
    try {
      (void)StepCostModel::load(p);
      ADD_FAILURE() << p << " was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_CONTAINS(e.message(), "cost model file");
    }
  }
}

/// stdout and stderr of the tool with `args`, and its exit code.
std::string run_tool(const std::string& args, int* rc) {
#ifdef FREEZEFRAME_TOOL
  const std::string command = std::string("'") + FREEZEFRAME_TOOL + "' " + args + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  if (pipe == nullptr) return out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
#else
  (void)args, (void)rc;
  return {};
#endif
}

TEST(StepCostModel, ServeSimTimesTheStepsOfATraceWithIt) {
#ifndef FREEZEFRAME_TOOL
  GTEST_SKIP() << "the freezeframe tool is not built";
#endif
  const std::string json = bench_json(kBatches, 1536, kPrefills);
  const std::string model = scratch(std::vector<char>(json.begin(), json.end()), "serve.json");
  const std::string root = FREEZEFRAME_SOURCE_DIR;
  const std::string common = "serve-sim '" + root + "/examples/tiny.yaml' --trace '" + root +
                             "/tests/traces/azure_conv_head.csv' --max-requests 40 "
                             "--device-memory 2GiB";
  int rc = -1;
  std::string out = run_tool(common + " --schedule-only --cost-model '" + model + "'", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_CONTAINS(out, "each step timed by a cost model");
  EXPECT_CONTAINS(out, "cost model '" + model + "' (bench of synthetic on paged_decode)");
  EXPECT_CONTAINS(out, "prefill attention 0.4000 ms per 1M query-key pairs");
  EXPECT_CONTAINS(out, "the cost model was measured on model 'synthetic'");
  EXPECT_CONTAINS(out, "finished 40 of 40 requests");
  EXPECT_CONTAINS(out, "tokens/s while stepping (modelled by the cost model, not measured)");
  // Only with --schedule-only, and not with --step-ms: usage errors.
  out = run_tool(common + " --cost-model '" + model + "'", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_CONTAINS(out, "--cost-model models steps that are not run: it goes with --schedule-only");
  out = run_tool(common + " --schedule-only --step-ms 5 --cost-model '" + model + "'", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_CONTAINS(out, "--step-ms and --cost-model both time the steps");
  // A file it refuses: exit 1, the file and field named.
  const std::string bad = scratch(std::vector<char>(json.begin(), json.begin() + 200), "bad.json");
  out = run_tool(common + " --schedule-only --cost-model '" + bad + "'", &rc);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_CONTAINS(out, bad + ":");
}

}  // namespace
}  // namespace freezeframe
