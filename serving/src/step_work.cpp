#include "freezeframe/serving/step_work.h"

namespace freezeframe {

std::int64_t causal_pairs(std::int64_t context, std::int64_t new_tokens, std::int64_t window) {
  if (new_tokens <= 0) return 0;
  const std::int64_t first = context + 1, last = context + new_tokens;  // keys seen, ends
  auto sum = [](std::int64_t a, std::int64_t b) { return (a + b) * (b - a + 1) / 2; };
  if (window <= 0 || window >= last) return sum(first, last);
  if (window <= first) return new_tokens * window;
  // Queries seeing first..window keys, then window each.
  return sum(first, window) + (last - window) * window;
}

StepWork step_work(std::span<const StepRequest> requests) {
  StepWork work;
  for (const StepRequest& r : requests) {
    work.tokens += r.query_len;
    if (r.query_len == 1) {
      work.decode_context += r.seq_len;
    } else {
      work.prefill_pairs += causal_pairs(r.seq_len - r.query_len, r.query_len);
    }
  }
  return work;
}

}  // namespace freezeframe
