#include "freezeframe/serving/step_cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"

namespace freezeframe {
namespace {

/// Σ (y − a·D − b·P)² over the samples, y their attention time.
double residual(std::span<const StepSample> samples, double a, double b) {
  double sum = 0;
  for (const StepSample& s : samples) {
    const double e = s.attention_ms - a * static_cast<double>(s.work.decode_context) -
                     b * static_cast<double>(s.work.prefill_pairs);
    sum += e * e;
  }
  return sum;
}

}  // namespace

StepCostModel StepCostModel::fit(std::span<const StepSample> samples, std::string source) {
  double dd = 0, pp = 0, dp = 0, dy = 0, py = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const StepSample& s = samples[i];
    FF_CHECK(s.ms >= 0 && s.ms <= kMaxStepMs && s.attention_ms >= 0 && s.attention_ms <= s.ms,
             ErrorCode::kInvalidArgument, source, ": sample ", i, ": a step of ", s.ms, " ms with ",
             s.attention_ms, " ms of attention; times must be from 0 to ", std::int64_t(kMaxStepMs),
             " ms and the attention no more than the step");
    FF_CHECK(s.work.tokens > 0 && s.work.decode_context >= 0 && s.work.prefill_pairs >= 0,
             ErrorCode::kInvalidArgument, source, ": sample ", i, ": ", s.work.tokens, " tokens, ",
             s.work.decode_context, " decode context, ", s.work.prefill_pairs,
             " prefill pairs; a step has tokens and no negative work");
    const double d = static_cast<double>(s.work.decode_context);
    const double p = static_cast<double>(s.work.prefill_pairs);
    dd += d * d, pp += p * p, dp += d * p, dy += d * s.attention_ms, py += p * s.attention_ms;
  }
  FF_CHECK(dd > 0, ErrorCode::kInvalidArgument, source,
           ": no measured step has decodes, so decode attention cannot be fitted");
  FF_CHECK(pp > 0, ErrorCode::kInvalidArgument, source,
           ": no measured step has prefill chunks of more than one token, so prefill attention "
           "cannot be fitted");

  // Non-negative least squares in two variables: the unconstrained solution when both are
  // non-negative, else the better of the two one-variable fits.
  StepCostModel m;
  m.source_ = std::move(source);
  const double det = dd * pp - dp * dp;
  const double a = (dy * pp - py * dp) / det, b = (py * dd - dy * dp) / det;
  if (det > 1e-12 * dd * pp && a >= 0 && b >= 0) {
    m.decode_ms_per_token_ = a, m.prefill_ms_per_pair_ = b;
  } else {
    const double only_a = std::max(0.0, dy / dd), only_b = std::max(0.0, py / pp);
    if (residual(samples, only_a, 0) <= residual(samples, 0, only_b)) {
      m.decode_ms_per_token_ = only_a;
    } else {
      m.prefill_ms_per_pair_ = only_b;
    }
  }

  // dense(T): the rest of each step, averaged over the samples of one token count.
  std::vector<std::pair<std::int64_t, double>> rest;
  for (const StepSample& s : samples) {
    rest.emplace_back(std::max(s.run_tokens, s.work.tokens), s.ms - s.attention_ms);
  }
  std::sort(rest.begin(), rest.end());
  for (std::size_t i = 0; i < rest.size();) {
    std::size_t j = i;
    double sum = 0;
    for (; j < rest.size() && rest[j].first == rest[i].first; ++j) sum += rest[j].second;
    m.dense_.push_back({rest[i].first, sum / static_cast<double>(j - i)});
    i = j;
  }
  return m;
}

double StepCostModel::dense_ms(std::int64_t tokens) const {
  if (dense_.empty()) return 0.0;
  if (tokens <= dense_.front().tokens) return dense_.front().ms;
  const auto above = std::find_if(dense_.begin(), dense_.end(),
                                  [&](const DensePoint& p) { return p.tokens >= tokens; });
  if (above != dense_.end()) {
    const DensePoint& lo = *(above - 1);
    const double t =
        static_cast<double>(tokens - lo.tokens) / static_cast<double>(above->tokens - lo.tokens);
    return lo.ms + t * (above->ms - lo.ms);
  }
  const DensePoint& last = dense_.back();
  if (dense_.size() == 1) return last.ms;
  const DensePoint& prev = dense_[dense_.size() - 2];
  const double slope =
      std::max(0.0, (last.ms - prev.ms) / static_cast<double>(last.tokens - prev.tokens));
  return last.ms + slope * static_cast<double>(tokens - last.tokens);
}

double StepCostModel::step_ms(const StepWork& work, std::int64_t run_tokens) const {
  return dense_ms(run_tokens > 0 ? run_tokens : work.tokens) +
         decode_ms_per_token_ * static_cast<double>(work.decode_context) +
         prefill_ms_per_pair_ * static_cast<double>(work.prefill_pairs);
}

std::string StepCostModel::describe() const {
  std::string measured;
  if (!model_name_.empty()) measured += " of " + printable(model_name_, 60);
  if (!backend_.empty()) measured += " on " + printable(backend_, 60);
  if (!measured.empty()) measured = " (bench" + measured + ")";
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "dense time through %zu token counts (%lld: %.3f ms to %lld: %.3f ms), decode "
                "attention %.4f ms per 1k context tokens, prefill attention %.4f ms per 1M "
                "query-key pairs",
                dense_.size(), static_cast<long long>(dense_.front().tokens), dense_.front().ms,
                static_cast<long long>(dense_.back().tokens), dense_.back().ms,
                decode_ms_per_token_ * 1e3, prefill_ms_per_pair_ * 1e6);
  return "cost model " + quote(source_, 200) + measured + ": " + buf;
}

}  // namespace freezeframe
