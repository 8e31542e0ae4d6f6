#include "freezeframe/engine/request_trace.h"

#include <charconv>
#include <cmath>

#include "freezeframe/core/error.h"
#include "input_file.h"
#include "printable.h"

namespace freezeframe {
namespace {

constexpr std::string_view kHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

template <typename T>
bool parse_number(std::string_view text, T& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

/// Seconds since the epoch of "YYYY-MM-DD HH:MM:SS[.fraction]", or NaN when malformed.
double parse_timestamp(std::string_view s) {
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':') {
    return NAN;
  }
  int year = 0, sec = 0;
  unsigned month = 0, day = 0, hour = 0, minute = 0;
  if (!parse_number(s.substr(0, 4), year) || !parse_number(s.substr(5, 2), month) ||
      !parse_number(s.substr(8, 2), day) || !parse_number(s.substr(11, 2), hour) ||
      !parse_number(s.substr(14, 2), minute) || !parse_number(s.substr(17, 2), sec) ||
      month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || sec > 60) {
    return NAN;
  }
  double fraction = 0.0;
  if (s.size() > 19) {
    if (s[19] != '.' || s.size() == 20) return NAN;
    double scale = 0.1;
    for (char c : s.substr(20)) {
      if (c < '0' || c > '9') return NAN;
      fraction += (c - '0') * scale;
      scale /= 10;
    }
  }
  return static_cast<double>(days_from_civil(year, month, day)) * 86400.0 + hour * 3600.0 +
         minute * 60.0 + sec + fraction;
}

}  // namespace

std::vector<TraceRequest> parse_azure_trace(std::string_view csv, std::string_view source,
                                            const TraceOptions& options) {
  FF_CHECK(std::isfinite(options.time_scale) && options.time_scale > 0, ErrorCode::kInvalidArgument,
           "the trace time scale must be positive, got ", options.time_scale);
  std::vector<TraceRequest> out;
  double first = NAN, previous = -INFINITY;
  std::size_t line_no = 0, at = 0;
  while (at <= csv.size()) {
    std::size_t end = csv.find('\n', at);
    if (end == std::string_view::npos) end = csv.size();
    std::string_view line = csv.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1) {
      FF_CHECK(line == kHeader, ErrorCode::kInvalidArgument, source,
               ":1: expected the header '", kHeader, "', got ", quote(line));
      continue;
    }
    if (line.empty()) continue;
    if (options.max_requests > 0 && out.size() == options.max_requests) break;
    const std::size_t c1 = line.find(','), c2 = line.find(',', c1 + 1);
    FF_CHECK(c1 != std::string_view::npos && c2 != std::string_view::npos &&
                 line.find(',', c2 + 1) == std::string_view::npos,
             ErrorCode::kInvalidArgument, source, ":", line_no,
             ": expected 3 comma-separated fields, got ", quote(line));
    const double t = parse_timestamp(line.substr(0, c1));
    TraceRequest r;
    FF_CHECK(std::isfinite(t), ErrorCode::kInvalidArgument, source, ":", line_no,
             ": TIMESTAMP ", quote(line.substr(0, c1)), " is not 'YYYY-MM-DD HH:MM:SS.fffffff'");
    FF_CHECK(parse_number(line.substr(c1 + 1, c2 - c1 - 1), r.prompt_tokens) && r.prompt_tokens > 0,
             ErrorCode::kInvalidArgument, source, ":", line_no,
             ": ContextTokens must be a positive integer, got ",
             quote(line.substr(c1 + 1, c2 - c1 - 1)));
    FF_CHECK(parse_number(line.substr(c2 + 1), r.output_tokens) && r.output_tokens >= 0,
             ErrorCode::kInvalidArgument, source, ":", line_no,
             ": GeneratedTokens must be a non-negative integer, got ", quote(line.substr(c2 + 1)));
    FF_CHECK(t >= previous, ErrorCode::kInvalidArgument, source, ":", line_no,
             ": timestamps must not go backwards");
    previous = t;
    if (std::isnan(first)) first = t;
    r.arrival_s = (t - first) * options.time_scale;
    out.push_back(r);
  }
  return out;
}

std::vector<TraceRequest> load_azure_trace(const std::string& path, const TraceOptions& options) {
  return parse_azure_trace(read_input_file(path, "trace", kMaxTraceBytes), path, options);
}

}  // namespace freezeframe
