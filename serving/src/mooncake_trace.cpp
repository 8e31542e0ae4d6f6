// Mooncake traces (JSON Lines): each line one flat object of "timestamp" (ms), "input_length",
// "output_length" and "hash_ids" (an array of ints). Read by a strict scanner for exactly this
// shape, so every mistake is reported with its line and field and nothing is read without
// bound; the prefix reuse the hash ids allow is worked out on the way.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/serving/request_trace.h"

namespace freezeframe {
namespace {

constexpr std::int64_t kHashBlockTokens = kTraceHashBlockTokens;

/// Scans one line: the position and the line's text for messages.
class LineScanner {
 public:
  LineScanner(std::string_view line, std::string_view source, std::size_t line_no)
      : s_(line), source_(source), line_no_(line_no) {}

  [[noreturn]] void fail(const std::string& what) const {
    FF_THROW(ErrorCode::kInvalidArgument, source_, ":", line_no_, ": ", what, " in ", quote(s_));
  }
  void skip_space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\r')) ++at_;
  }
  bool take(char c) {
    skip_space();
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* what) {
    if (!take(c)) fail(std::string("expected ") + what);
  }
  std::string_view key() {
    expect('"', "a key in double quotes");
    const std::size_t end = s_.find('"', at_);
    if (end == std::string_view::npos) fail("an unterminated key");
    const std::string_view k = s_.substr(at_, end - at_);
    at_ = end + 1;
    return k;
  }
  /// A whole number in [0, max] (JSON digits, no sign, fraction or exponent).
  std::int64_t count(std::string_view field, std::int64_t max) {
    skip_space();
    const std::size_t begin = at_;
    while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s_.data() + begin, s_.data() + at_, v);
    if (begin == at_ || ec != std::errc() || end != s_.data() + at_ || v > max) {
      fail(std::string(field) + " must be a whole number from 0 to " + std::to_string(max));
    }
    return v;
  }
  [[nodiscard]] bool done() {
    skip_space();
    return at_ == s_.size();
  }

 private:
  std::string_view s_, source_;
  std::size_t line_no_;
  std::size_t at_ = 0;
};

}  // namespace

std::vector<TraceRequest> parse_mooncake_trace(std::string_view jsonl, std::string_view source,
                                               const TraceOptions& options) {
  FF_CHECK(options.time_scale > 0 && options.time_scale <= kMaxTimeScale,
           ErrorCode::kInvalidArgument, "the trace time scale must be above 0 and at most ",
           kMaxTimeScale, ", got ", options.time_scale);
  constexpr std::int64_t kMaxCount = std::numeric_limits<std::int32_t>::max();
  std::vector<TraceRequest> out;
  // A block reusable at position k means its id was seen at position k before; ids are prefix
  // hashes, so the pair (position, id) names the prefix up to it.
  std::set<std::pair<std::size_t, std::int64_t>> seen;
  std::int64_t previous_ms = 0;
  std::size_t line_no = 0, at = 0;
  std::vector<std::int64_t> ids;
  if (jsonl.starts_with("\xEF\xBB\xBF")) at = 3;  // a UTF-8 byte order mark
  while (at < jsonl.size()) {
    std::size_t end = jsonl.find('\n', at);
    if (end == std::string_view::npos) end = jsonl.size();
    const std::string_view line = jsonl.substr(at, end - at);
    at = end + 1;
    ++line_no;
    LineScanner in(line, source, line_no);
    if (in.done()) continue;
    if (options.max_requests > 0 && out.size() == options.max_requests) break;
    std::int64_t timestamp = -1, input = -1, output = -1;
    bool have_ids = false;
    ids.clear();
    in.expect('{', "a JSON object");
    do {
      const std::string_view k = in.key();
      in.expect(':', "':' after a key");
      if (k == "timestamp" && timestamp < 0) {
        timestamp = in.count("timestamp", std::int64_t(1) << 50);
      } else if (k == "input_length" && input < 0) {
        input = in.count("input_length", kMaxCount);
      } else if (k == "output_length" && output < 0) {
        output = in.count("output_length", kMaxCount);
      } else if (k == "hash_ids" && !have_ids) {
        have_ids = true;
        in.expect('[', "hash_ids as a list");
        if (!in.take(']')) {
          do {
            ids.push_back(in.count("a hash id", std::numeric_limits<std::int64_t>::max()));
            if (ids.size() > 1'000'000) in.fail("more than a million hash ids");
          } while (in.take(','));
          in.expect(']', "',' or ']' in hash_ids");
        }
      } else {
        in.fail("an unknown or repeated key " + quote(k) +
                "; expected timestamp, input_length, output_length and hash_ids once each");
      }
    } while (in.take(','));
    in.expect('}', "',' or '}'");
    if (!in.done()) in.fail("text after the object");
    if (timestamp < 0 || input < 0 || output < 0) {
      in.fail("a row needs timestamp, input_length and output_length");
    }
    if (input == 0) in.fail("input_length must be at least 1");
    if (input + output > kMaxCount) {
      in.fail("input_length + output_length is past 32 bits");
    }
    if (timestamp < previous_ms) in.fail("timestamps must not decrease");
    previous_ms = timestamp;
    const std::int64_t blocks = (input + kHashBlockTokens - 1) / kHashBlockTokens;
    if (static_cast<std::int64_t>(ids.size()) > blocks) {
      in.fail("hash_ids has " + std::to_string(ids.size()) + " ids for " + std::to_string(blocks) +
              " blocks of 512 prompt tokens");
    }
    std::size_t reusable = 0;
    while (reusable < ids.size() && seen.count({reusable, ids[reusable]}) > 0) ++reusable;
    for (std::size_t k = 0; k < ids.size(); ++k) seen.emplace(k, ids[k]);
    TraceRequest r;
    r.arrival_s = static_cast<double>(timestamp) * 1e-3 * options.time_scale;
    r.prompt_tokens = static_cast<std::int32_t>(input);
    r.output_tokens = static_cast<std::int32_t>(output);
    r.reusable_prefix_tokens = static_cast<std::int32_t>(
        std::min<std::int64_t>(input, static_cast<std::int64_t>(reusable) * kHashBlockTokens));
    r.hash_ids.assign(ids.begin(), ids.end());
    out.push_back(r);
  }
  FF_CHECK(!out.empty(), ErrorCode::kInvalidArgument, source, ": the trace holds no request");
  // Arrival times count from the first request.
  const double first = out.front().arrival_s;
  for (TraceRequest& r : out) r.arrival_s -= first;
  return out;
}

std::vector<TraceRequest> load_mooncake_trace(const std::string& path,
                                              const TraceOptions& options) {
  return parse_mooncake_trace(read_input_file(path, "trace", kMaxTraceBytes), path, options);
}

std::vector<TraceRequest> load_trace(const std::string& path, const TraceOptions& options) {
  const std::string text = read_input_file(path, "trace", kMaxTraceBytes);
  // A UTF-8 byte order mark is read past (both readers skip it), as is leading blank space.
  const std::size_t bom = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  const std::size_t first = text.find_first_not_of(" \t\r\n", bom);
  FF_CHECK(first != std::string::npos, ErrorCode::kInvalidArgument, "empty trace file ",
           quote(path, 200), text.size() > bom ? " (blank space only)" : "",
           ": expected an Azure CSV header or Mooncake JSON lines");
  if (text[first] == '{') {
    return parse_mooncake_trace(text, path, options);
  }
  return parse_azure_trace(text, path, options);
}

}  // namespace freezeframe
