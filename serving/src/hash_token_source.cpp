#include "freezeframe/serving/hash_token_source.h"

#include <chrono>
#include <thread>

#include "freezeframe/base/error.h"
#include "splitmix.h"

namespace freezeframe {

HashTokenSource::HashTokenSource(std::vector<std::int32_t> allowed, int step_delay_us)
    : allowed_(std::move(allowed)), step_delay_us_(step_delay_us) {
  FF_CHECK(!allowed_.empty(), ErrorCode::kInvalidArgument,
           "a hash token source needs tokens to draw from");
}

std::span<const std::int32_t> HashTokenSource::run(const StepBatch& step) {
  if (step_delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(step_delay_us_));
  drawn_.clear();
  std::size_t token = 0;
  for (std::size_t r = 0; r < step.requests.size(); ++r) {
    const StepRequest& req = step.requests[r];
    token += static_cast<std::size_t>(req.query_len);
    const std::int32_t last = step.token_ids.empty() ? 0 : step.token_ids[token - 1];
    const SamplingParams sampling = step.sampling.empty() ? SamplingParams{} : step.sampling[r];
    std::uint64_t h = splitmix64_finalise(static_cast<std::uint64_t>(last) * 0x9E3779B97F4A7C15ull +
                                          static_cast<std::uint64_t>(req.seq_len));
    if (sampling.temperature > 0.0f) h = splitmix64_finalise(h ^ sampling.seed);
    drawn_.push_back(allowed_[h % allowed_.size()]);
  }
  return drawn_;
}

}  // namespace freezeframe
