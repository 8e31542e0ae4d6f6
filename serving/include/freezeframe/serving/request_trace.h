#pragma once
// Request traces for the serving loop: arrival time, prompt length and output length of each
// request, read from the Azure LLM inference trace format (CSV with the header
// "TIMESTAMP,ContextTokens,GeneratedTokens", timestamps "YYYY-MM-DD HH:MM:SS.fffffff") or the
// Mooncake format (JSON Lines: "timestamp" in ms, "input_length", "output_length" and
// "hash_ids", the prompt's 512-token blocks as prefix hashes: equal ids at the same position
// are a prefix an ideal prefix cache could reuse).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace freezeframe {

struct TraceRequest {
  double arrival_s = 0.0;  ///< seconds after the trace's first request, scaled
  std::int32_t prompt_tokens = 0;
  std::int32_t output_tokens = 0;
  /// Leading prompt tokens an ideal prefix cache would hold (Mooncake's hash_ids: the blocks
  /// of the longest prefix every block of which an earlier request had); 0 when unknown.
  std::int32_t reusable_prefix_tokens = 0;
  /// Mooncake's hash ids, one per 512-token block of the prompt from its start (as many as
  /// the trace gives); empty for Azure traces.
  std::vector<std::int64_t> hash_ids = {};
};

/// Tokens of one of Mooncake's hash blocks.
inline constexpr std::int32_t kTraceHashBlockTokens = 512;

/// The largest time scale: a thousand times slower than the trace already turns a day into
/// nearly three years of arrivals.
inline constexpr double kMaxTimeScale = 1000.0;

struct TraceOptions {
  double time_scale = 1.0;       ///< arrival times are multiplied by this (0.5 = twice the rate)
  std::size_t max_requests = 0;  ///< keep the first N requests; 0 = all
};

/// Reads a trace file. Throws kNotFound when it cannot be opened and kInvalidArgument naming
/// the file and line of the first malformed row (a field that is not a number, a date or time
/// that does not exist, a token count past 32 bits), or for a file that is not a regular file
/// or is over 256 MiB.
[[nodiscard]] std::vector<TraceRequest> load_azure_trace(const std::string& path,
                                                         const TraceOptions& options = {});
/// The same from text; `source` names it in messages.
[[nodiscard]] std::vector<TraceRequest> parse_azure_trace(std::string_view csv,
                                                          std::string_view source,
                                                          const TraceOptions& options = {});

/// Reads a Mooncake JSON Lines trace. Throws kNotFound when it cannot be opened and
/// kInvalidArgument naming the file, line and field of the first malformed row (not an object
/// of the four keys, a count past 32 bits, a negative or decreasing timestamp, more hash ids
/// than the prompt has 512-token blocks), or for a file that is not a regular file or is over
/// 256 MiB.
[[nodiscard]] std::vector<TraceRequest> load_mooncake_trace(const std::string& path,
                                                            const TraceOptions& options = {});
/// The same from text; `source` names it in messages.
[[nodiscard]] std::vector<TraceRequest> parse_mooncake_trace(std::string_view jsonl,
                                                             std::string_view source,
                                                             const TraceOptions& options = {});

/// load_mooncake_trace for a file whose first non-blank byte is '{', else load_azure_trace.
[[nodiscard]] std::vector<TraceRequest> load_trace(const std::string& path,
                                                   const TraceOptions& options = {});

}  // namespace freezeframe
