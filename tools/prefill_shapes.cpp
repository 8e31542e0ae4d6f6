#include "prefill_shapes.h"

#include <algorithm>
#include <string>

#include "arguments.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"

namespace freezeframe::tools {
namespace {

/// "--prefill 4x2048 after 1024 cached tokens" for messages.
std::string describe(const PrefillShape& s, std::int64_t context) {
  std::string out = detail::concat("--prefill ", s.b, "x", s.n);
  if (context > 0) out += detail::concat(" after ", context, " cached tokens (--prefill-context)");
  return out;
}

}  // namespace

std::vector<PrefillShape> parse_prefill_shapes(std::string_view flag, std::string_view text) {
  std::vector<PrefillShape> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, comma - at);
    const std::size_t x = item.find('x');
    if (item.empty() || x == std::string_view::npos) {
      throw UsageError(detail::concat(flag, ": ", quote(item),
                                      " is not BxN (B requests of N new tokens each, e.g. "
                                      "4x2048); the list is comma-separated"));
    }
    PrefillShape s;
    s.b = static_cast<int>(
        parse_count(detail::concat(flag, " ", printable(item), ": B"), item.substr(0, x)));
    s.n = static_cast<int>(
        parse_count(detail::concat(flag, " ", printable(item), ": N"), item.substr(x + 1)));
    out.push_back(s);
    at = comma + 1;
  }
  return out;
}

void check_prefill_shape(const PrefillShape& s, std::int64_t context,
                         const DeploymentLimits& limits, const EngineSpec& spec) {
  const std::int64_t tokens = std::int64_t(s.b) * s.n, seq_len = context + s.n;
  FF_CHECK(s.b <= limits.max_num_seqs, ErrorCode::kInvalidArgument, describe(s, context), ": ", s.b,
           " requests in one step; the spec allows ", limits.max_num_seqs, " (",
           spec.where("scheduler.max_num_seqs"), ")");
  FF_CHECK(tokens <= limits.max_num_batched_tokens, ErrorCode::kInvalidArgument,
           describe(s, context), ": ", tokens, " new tokens in one step; the spec allows ",
           limits.max_num_batched_tokens, " (", spec.where("scheduler.max_num_batched_tokens"),
           ")");
  FF_CHECK(seq_len <= limits.max_model_len, ErrorCode::kInvalidArgument, describe(s, context),
           ": sequences of ", seq_len, " tokens; the spec allows ", limits.max_model_len, " (",
           spec.where("scheduler.max_model_len"), ")");
  FF_CHECK(
      limits.max_prefill_context_tokens <= 0 || s.b * seq_len <= limits.max_prefill_context_tokens,
      ErrorCode::kInvalidArgument, describe(s, context), ": ", s.b * seq_len,
      " tokens of prefill context in one step; the spec allows ", limits.max_prefill_context_tokens,
      " (", spec.where("scheduler.max_prefill_context_tokens"), ")");
  if (limits.num_blocks <= 0) return;
  const std::int64_t blocks = s.b * ((seq_len + limits.block_size - 1) / limits.block_size);
  FF_CHECK(blocks <= limits.num_blocks, ErrorCode::kInvalidArgument, describe(s, context), ": ",
           blocks, " KV blocks of ", limits.block_size, " tokens; the plan has ", limits.num_blocks,
           " (", spec.where("cache.memory_budget"), ", or --device-memory, makes more)");
}

}  // namespace freezeframe::tools
