#pragma once
// The continuous batcher driven over a request trace to completion, every step checked against
// the engine's step validation, for the batcher's tests.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "freezeframe/serving/continuous_batcher.h"
#include "freezeframe/serving/request_trace.h"

namespace freezeframe::serving_testing {

struct LoopResult {
  int steps = 0;
  std::int64_t tokens = 0;
  std::set<int> finished;
  std::set<int> first_token;  // requests that produced their first output token
  std::map<Admission, int> admissions;
};

/// Drives the batcher to completion, checking every step against the step validation.
inline LoopResult drive(ContinuousBatcher& batcher, BlockPool& pool, const DeploymentLimits& limits,
                        const std::vector<TraceRequest>& trace, int dcp_world = 1) {
  const DcpSharding dcp{dcp_world, 1, limits.block_size};
  DeploymentLimits step_limits = limits;
  step_limits.num_blocks = pool.num_blocks();
  LoopResult run;
  std::size_t next = 0;
  double now = 0.0;
  std::size_t refused = 0;
  while (run.finished.size() + refused < trace.size()) {
    while (next < trace.size() && trace[next].arrival_s <= now) {
      const Admission a =
          batcher.add(static_cast<int>(next), trace[next].prompt_tokens, trace[next].output_tokens);
      ++run.admissions[a];
      refused += a == Admission::kPromptTooLong || a == Admission::kCacheTooSmall;
      ++next;
    }
    const StepBatch* step = batcher.schedule();
    if (step == nullptr) {
      EXPECT_LT(next, trace.size()) << "nothing runs yet requests are unfinished";
      if (next >= trace.size()) break;
      now = trace[next].arrival_s;  // idle until the next arrival
      continue;
    }
    const StepShape shape = validate_step(*step, step_limits, dcp);  // throws on a broken rule
    run.tokens += shape.num_tokens;
    // No block is in two requests' tables.
    std::set<std::int32_t> used;
    for (const StepRequest& r : step->requests) {
      const auto blocks = static_cast<std::int32_t>(dcp.table_width(r.seq_len));
      EXPECT_EQ(r.block_ids.size(), static_cast<std::size_t>(blocks)) << "blocks as it grows";
      for (std::int32_t b = 0; b < blocks; ++b) {
        EXPECT_TRUE(used.insert(r.block_ids[b]).second) << "block " << r.block_ids[b] << " twice";
      }
    }
    const std::vector<int> ids(batcher.scheduled_ids().begin(), batcher.scheduled_ids().end());
    EXPECT_EQ(ids.size(), step->requests.size());
    const ContinuousBatcher::StepEvents events = batcher.complete_step();
    for (int id : events.first_tokens) {
      EXPECT_NE(std::find(events.produced.begin(), events.produced.end(), id),
                events.produced.end())
          << id;
      EXPECT_TRUE(run.first_token.insert(id).second)
          << "request " << id << ": a second first token";
      EXPECT_NE(std::find(ids.begin(), ids.end(), id), ids.end()) << id << " was not in the step";
    }
    for (int id : events.finished) {
      EXPECT_TRUE(run.finished.insert(id).second) << id;
      EXPECT_TRUE(trace[id].output_tokens == 0 || run.first_token.count(id)) << id;
    }
    now += 0.02;  // a simulated step time
    ++run.steps;
    if (run.steps > 1000000) {
      ADD_FAILURE() << "no progress";
      break;
    }
  }
  return run;
}

}  // namespace freezeframe::serving_testing
