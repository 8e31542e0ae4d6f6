#include "freezeframe/serving/request_trace.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "freezeframe/base/error.h"
#include "freezeframe/base/input_file.h"
#include "freezeframe/base/printable.h"

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

/// A whole non-negative decimal number (digits only: no sign, no spaces); false when the text
/// is not one or is past int64 (`too_large` then tells which).
bool parse_count(std::string_view text, std::int64_t& out, bool& too_large) {
  too_large = false;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  too_large = ec == std::errc::result_out_of_range;
  return ec == std::errc() && end == text.data() + text.size();
}

/// The value of the `digits` characters at `at` of `s`, or -1 unless all are digits.
int digits_at(std::string_view s, std::size_t at, std::size_t digits) {
  int value = 0;
  for (std::size_t i = at; i < at + digits; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    value = value * 10 + (s[i] - '0');
  }
  return value;
}

bool is_leap_year(int year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

int days_in_month(int year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && is_leap_year(year) ? 29 : kDays[month - 1];
}

/// Seconds since the epoch of "YYYY-MM-DD HH:MM:SS[.fraction]" in `seconds`; on a mistake,
/// what is wrong with it (empty when it is a valid time).
std::string parse_timestamp(std::string_view s, double& seconds) {
  static const std::string kFormat = "is not 'YYYY-MM-DD HH:MM:SS.fffffff'";
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':') {
    return kFormat;
  }
  const int year = digits_at(s, 0, 4), month = digits_at(s, 5, 2), day = digits_at(s, 8, 2);
  const int hour = digits_at(s, 11, 2), minute = digits_at(s, 14, 2), sec = digits_at(s, 17, 2);
  if (year < 0 || month < 0 || day < 0 || hour < 0 || minute < 0 || sec < 0) return kFormat;
  if (month < 1 || month > 12) return "has month " + std::to_string(month) + ", not 1..12";
  if (day < 1 || day > days_in_month(year, month)) {
    return "has day " + std::to_string(day) + ", but " + std::string(s.substr(0, 7)) + " has " +
           std::to_string(days_in_month(year, month)) + " days";
  }
  if (hour > 23) return "has hour " + std::to_string(hour) + ", not 0..23";
  if (minute > 59) return "has minute " + std::to_string(minute) + ", not 0..59";
  if (sec > 59) return "has second " + std::to_string(sec) + ", not 0..59";
  double fraction = 0.0;
  if (s.size() > 19) {
    if (s[19] != '.' || s.size() == 20) return kFormat;
    double scale = 0.1;
    for (char c : s.substr(20)) {
      if (c < '0' || c > '9') return kFormat;
      fraction += (c - '0') * scale;
      scale /= 10;
    }
  }
  seconds = static_cast<double>(
                days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day))) *
                86400.0 +
            hour * 3600.0 + minute * 60.0 + sec + fraction;
  return {};
}

}  // namespace

std::vector<TraceRequest> parse_azure_trace(std::string_view csv, std::string_view source,
                                            const TraceOptions& options) {
  FF_CHECK(options.time_scale > 0 && options.time_scale <= kMaxTimeScale,
           ErrorCode::kInvalidArgument, "the trace time scale must be above 0 and at most ",
           kMaxTimeScale, ", got ", options.time_scale);
  constexpr std::int64_t kMaxCount = std::numeric_limits<std::int32_t>::max();
  if (csv.substr(0, 3) == "\xEF\xBB\xBF") csv.remove_prefix(3);  // a UTF-8 byte order mark
  FF_CHECK(csv.find_first_not_of(" \t\r\n") != std::string_view::npos, ErrorCode::kInvalidArgument,
           "empty trace file ", quote(source, 200), ": expected the header '", kHeader, "'");
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
      FF_CHECK(line == kHeader, ErrorCode::kInvalidArgument, source, ":1: expected the header '",
               kHeader, "', got ", quote(line));
      continue;
    }
    if (line.empty()) continue;
    if (options.max_requests > 0 && out.size() == options.max_requests) break;
    const std::size_t c1 = line.find(','), c2 = line.find(',', c1 + 1);
    FF_CHECK(c1 != std::string_view::npos && c2 != std::string_view::npos &&
                 line.find(',', c2 + 1) == std::string_view::npos,
             ErrorCode::kInvalidArgument, source, ":", line_no,
             ": expected 3 comma-separated fields, got ", quote(line));
    const std::string_view stamp = line.substr(0, c1);
    double t = 0;
    const std::string wrong = parse_timestamp(stamp, t);
    FF_CHECK(wrong.empty(), ErrorCode::kInvalidArgument, source, ":", line_no, ": TIMESTAMP ",
             quote(stamp), " ", wrong);
    // Token counts are 32-bit (a sequence's length too): a value past that is refused, never
    // wrapped or clamped.
    const auto count = [&](std::string_view field, std::string_view text, std::int64_t min) {
      std::int64_t value = 0;
      bool too_large = false;
      const bool ok = parse_count(text, value, too_large);
      FF_CHECK(ok || too_large, ErrorCode::kInvalidArgument, source, ":", line_no, ": ", field,
               " must be ", min > 0 ? "a positive" : "a non-negative", " integer, got ",
               quote(text));
      FF_CHECK(!too_large && value <= kMaxCount, ErrorCode::kInvalidArgument, source, ":", line_no,
               ": ", field, " ", printable(text), " is more than a 32-bit token count holds (",
               kMaxCount, ")");
      FF_CHECK(value >= min, ErrorCode::kInvalidArgument, source, ":", line_no, ": ", field,
               " must be a positive integer, got ", value);
      return value;
    };
    const std::int64_t prompt = count("ContextTokens", line.substr(c1 + 1, c2 - c1 - 1), 1);
    const std::int64_t output = count("GeneratedTokens", line.substr(c2 + 1), 0);
    FF_CHECK(prompt + output <= kMaxCount, ErrorCode::kInvalidArgument, source, ":", line_no,
             ": ContextTokens + GeneratedTokens = ", prompt + output,
             " tokens, more than a 32-bit sequence length holds (", kMaxCount, ")");
    FF_CHECK(t >= previous, ErrorCode::kInvalidArgument, source, ":", line_no,
             ": timestamps must not go backwards");
    previous = t;
    if (std::isnan(first)) first = t;
    TraceRequest r;
    r.prompt_tokens = static_cast<std::int32_t>(prompt);
    r.output_tokens = static_cast<std::int32_t>(output);
    r.arrival_s = (t - first) * options.time_scale;
    out.push_back(r);
  }
  return out;
}

std::vector<TraceRequest> load_azure_trace(const std::string& path, const TraceOptions& options) {
  return parse_azure_trace(read_input_file(path, "trace", kMaxTraceBytes), path, options);
}

}  // namespace freezeframe
