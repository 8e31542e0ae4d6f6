// The sampler's host reference: the definition in sampler.h done the plain way (rank every
// token, sort, walk), on the arithmetic the kernel shares (sampling_math.h). The kernel finds
// the same sets by radix selection; a test holds the two to the same tokens.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/engine/runtime/sampler.h"
#include "runtime/sampling_math.h"

namespace freezeframe {

void check_sampling(const SamplingParams& p, std::string_view where) {
  FF_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f, ErrorCode::kInvalidArgument,
           where, ".temperature: ", p.temperature, " is not a finite number ≥ 0 (0 = greedy)");
  FF_CHECK(p.top_k >= 0, ErrorCode::kInvalidArgument, where, ".top_k: ", p.top_k,
           " is negative (0 = every token)");
  FF_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, ErrorCode::kInvalidArgument, where,
           ".top_p: ", p.top_p, " is not in (0, 1] (1 = every token)");
}

std::int32_t sample_reference(std::span<const float> logits, const SamplingParams& params,
                              std::int64_t position) {
  namespace s = sampling;
  check_sampling(params, "sampling");
  FF_CHECK(!logits.empty(), ErrorCode::kInvalidArgument, "sample_reference: an empty row");
  const auto vocab = static_cast<std::int32_t>(logits.size());
  const bool greedy_logits = params.temperature == 0.0f;
  std::vector<float> x(logits.size());
  std::vector<std::uint64_t> rank(logits.size());
  for (std::int32_t v = 0; v < vocab; ++v) {
    x[v] = greedy_logits ? s::canonical(logits[v]) : s::scaled(logits[v], params.temperature);
    rank[v] = s::rank_key(x[v], v);
  }
  if (greedy_logits || params.top_k == 1) {
    return s::rank_id(*std::max_element(rank.begin(), rank.end()));
  }

  // Best first.
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::int32_t a, std::int32_t b) { return rank[a] > rank[b]; });
  std::size_t kept = order.size();
  if (params.top_k > 0) kept = std::min<std::size_t>(kept, static_cast<std::size_t>(params.top_k));

  const float max = x[order[0]];
  std::vector<std::uint64_t> w(logits.size(), 0);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < kept; ++i) {
    w[order[i]] = s::weight(x[order[i]], max);
    total += w[order[i]];
  }
  if (params.top_p < 1.0f) {
    const std::uint64_t target = s::nucleus_target(total, params.top_p);
    std::uint64_t sum = 0;
    std::size_t i = 0;
    while (sum < target) sum += w[order[i++]];
    for (std::size_t j = i; j < kept; ++j) w[order[j]] = 0;
    total = sum;
  }

  std::uint64_t u = s::draw_point(s::draw_bits(params.seed, position), total);
  for (std::int32_t v = 0; v < vocab; ++v) {
    if (u < w[v]) return v;
    u -= w[v];
  }
  FF_THROW(ErrorCode::kInternal, "sample_reference: the draw fell past the kept weight");
}

}  // namespace freezeframe
