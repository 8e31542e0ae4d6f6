#include "bench_steps.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "arguments.h"
#include "freezeframe/base/error.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/engine/runtime/sampler.h"

namespace freezeframe::tools {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// B single-token decodes over `context` tokens each, on blocks from a shuffled pool; a block
/// id names `block_positions` positions (block_size · D under decode context parallelism).
struct DecodeBatch {
  std::vector<std::vector<std::int32_t>> blocks;
  std::vector<std::int32_t> tokens;
  std::vector<SamplingParams> sampling;
  StepBatch batch;

  DecodeBatch(int b, int context, const DeploymentLimits& limits, std::int64_t block_positions,
              bool sample, std::mt19937& rng) {
    const int per_request = static_cast<int>((context + block_positions - 1) / block_positions);
    FF_CHECK(std::int64_t(b) * per_request <= limits.num_blocks, ErrorCode::kInvalidArgument,
             "batch ", b, " at context ", context, " needs ", std::int64_t(b) * per_request,
             " KV blocks; the plan has ", limits.num_blocks);
    std::vector<std::int32_t> pool(limits.num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int r = 0; r < b; ++r) {
      blocks.emplace_back(pool.begin() + std::int64_t(r) * per_request,
                          pool.begin() + std::int64_t(r + 1) * per_request);
      tokens.push_back(static_cast<std::int32_t>(rng() % limits.vocab_size));
    }
    for (int r = 0; r < b; ++r) batch.requests.push_back({1, context, blocks[r]});
    batch.token_ids = tokens;
    if (sample) {
      for (int r = 0; r < b; ++r) {
        SamplingParams p = kDefaultSampling;
        p.seed = std::uint64_t(r);
        sampling.push_back(p);
      }
      batch.sampling = sampling;
    }
  }
};

/// B prefill requests of N new tokens after `context` cached ones, on shuffled blocks of
/// `block_positions` positions each (as DecodeBatch's; the shape checked against the limits
/// first: check_prefill_shape).
struct PrefillBatch {
  std::vector<std::vector<std::int32_t>> blocks;
  std::vector<std::int32_t> tokens;
  StepBatch batch;

  PrefillBatch(const PrefillShape& shape, int context, const DeploymentLimits& limits,
               std::int64_t block_positions, std::mt19937& rng) {
    const int seq_len = context + shape.n;
    const auto per_request = static_cast<int>((seq_len + block_positions - 1) / block_positions);
    std::vector<std::int32_t> pool(limits.num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int r = 0; r < shape.b; ++r) {
      blocks.emplace_back(pool.begin() + std::int64_t(r) * per_request,
                          pool.begin() + std::int64_t(r + 1) * per_request);
    }
    for (std::int64_t t = 0; t < std::int64_t(shape.b) * shape.n; ++t) {
      tokens.push_back(static_cast<std::int32_t>(rng() % limits.vocab_size));
    }
    for (int r = 0; r < shape.b; ++r) batch.requests.push_back({shape.n, seq_len, blocks[r]});
    batch.token_ids = tokens;
  }
};

/// Median device time of one step with `options`, or 0 when the step does not run in `want`.
double time_steps(Engine& engine, const StepBatch& batch, const StepOptions& options,
                  RuntimeMode want, int iterations) {
  if (engine.step(batch, options).mode != want) return 0.0;
  for (int i = 0; i < 3; ++i) (void)engine.step(batch, options);
  std::vector<Event> start, stop;
  for (int i = 0; i < iterations; ++i) {
    start.emplace_back(true);
    stop.emplace_back(true);
  }
  for (int i = 0; i < iterations; ++i) {
    start[i].record(engine.stream());
    (void)engine.step(batch, options);
    stop[i].record(engine.stream());
  }
  engine.synchronize();
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) ms.push_back(stop[i].elapsed_ms_since(start[i]));
  return median(ms);
}

void host_work_us(double us) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  while (std::chrono::duration<double, std::micro>(Clock::now() - start).count() < us) {
  }
}

/// Median host time of one step() call under `condition`: total and by phase.
StepHostTimes host_times(Engine& engine, const StepBatch& batch, HostCondition condition,
                         int iterations, double* total_us) {
  std::vector<double> total, validate, upload, launch;
  for (int i = 0; i < iterations; ++i) {
    if (condition == HostCondition::kAfterPoll) {
      while (cudaStreamQuery(engine.stream()) == cudaErrorNotReady) {
      }
    }
    engine.synchronize();  // after polling: returns at once
    if (condition == HostCondition::kWarm) host_work_us(200);
    if (condition == HostCondition::kGpuBusy) {
      (void)engine.step(batch);
      host_work_us(200);  // the step's input copy, first on an idle GPU, is long done
    }
    const auto t0 = std::chrono::steady_clock::now();
    const StepResult r = engine.step(batch);
    total.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    validate.push_back(r.host.validate_us);
    upload.push_back(r.host.upload_us);
    launch.push_back(r.host.launch_us);
  }
  engine.synchronize();
  *total_us = median(total);
  return {median(validate), median(upload), median(launch)};
}

/// Device time per op kind over the whole program (eager, with events between ops).
Breakdown breakdown(Engine& engine, const StepBatch& batch) {
  Breakdown b;
  for (const OpTime& op : engine.profile_ops(batch)) {
    auto it = std::find_if(b.by_kind.begin(), b.by_kind.end(),
                           [&](const auto& k) { return k.first == op.name; });
    if (it == b.by_kind.end()) it = b.by_kind.insert(b.by_kind.end(), {op.name, 0.0});
    it->second += op.ms;
    b.total += op.ms;
  }
  std::sort(b.by_kind.begin(), b.by_kind.end(),
            [](const auto& x, const auto& y) { return x.second > y.second; });
  return b;
}

}  // namespace

std::string Breakdown::text() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f ms:", total);
  std::string out = buf;
  for (const auto& [name, ms] : by_kind) {
    out += " " + name;
    std::snprintf(buf, sizeof buf, " %.3f", ms);
    out += buf;
  }
  return out;
}

std::string Breakdown::json() const {
  std::string out = "{";
  char buf[64];
  for (std::size_t i = 0; i < by_kind.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.6g", by_kind[i].second);
    out += (i ? ", \"" : "\"") + json_escape(by_kind[i].first) + "\": " + buf;
  }
  return out + "}";
}

std::string cell(double ms) { return ms > 0 ? std::to_string(ms).substr(0, 6) : std::string("-"); }

/// A decode row: every mode, the host times and the breakdown.
Row time_decode(Engine& engine, int b, int context, int iterations, std::mt19937& rng) {
  const DecodeBatch decode(b, context, engine.limits(),
                           engine.geometry().dcp_sharding().virtual_block_size(), engine.samples(),
                           rng);
  Row row;
  row.batch = b;
  const Dispatch dispatch = engine.dispatcher().dispatch(b, b, true);
  row.run_tokens = dispatch.mode == RuntimeMode::kEager ? b : dispatch.descriptor.num_tokens;
  row.ms[int(RuntimeMode::kEager)] =
      time_steps(engine, decode.batch, {.eager = true}, RuntimeMode::kEager, iterations);
  row.ms[int(RuntimeMode::kPiecewise)] = time_steps(
      engine, decode.batch, {.prefer_piecewise = true}, RuntimeMode::kPiecewise, iterations);
  row.ms[int(RuntimeMode::kFull)] =
      time_steps(engine, decode.batch, {}, RuntimeMode::kFull, iterations);
  for (int c = 0; c < kHostConditions; ++c) {
    row.host[c] = host_times(engine, decode.batch, HostCondition(c), iterations, &row.host_us[c]);
  }
  row.breakdown = breakdown(engine, decode.batch);
  return row;
}

/// A prefill row: eagerly, and in the graph mode the dispatcher runs it in (a prefill is never
/// a uniform decode, so preferring pieces changes nothing); the breakdown and the FLOPs.
PrefillRow time_prefill(Engine& engine, const PrefillShape& shape, int context, int iterations,
                        std::mt19937& rng) {
  check_prefill_shape(shape, context, engine.limits(), engine.spec());
  const PrefillBatch prefill(shape, context, engine.limits(),
                             engine.geometry().dcp_sharding().virtual_block_size(), rng);
  PrefillRow row;
  row.shape = shape;
  const int tokens = shape.b * shape.n;
  const Dispatch dispatch = engine.dispatcher().dispatch(tokens, shape.b, false);
  row.mode = dispatch.mode;
  row.run_tokens = dispatch.mode == RuntimeMode::kEager ? tokens : dispatch.descriptor.num_tokens;
  row.ms[int(RuntimeMode::kEager)] =
      time_steps(engine, prefill.batch, {.eager = true}, RuntimeMode::kEager, iterations);
  if (row.mode != RuntimeMode::kEager) {
    row.ms[int(row.mode)] = time_steps(engine, prefill.batch, {}, row.mode, iterations);
  }
  row.flops = prefill_flops(engine.spec(), shape.b, shape.n, context);
  row.breakdown = breakdown(engine, prefill.batch);
  return row;
}

}  // namespace freezeframe::tools
