#include "freezeframe/engine/spec/byte_size.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace freezeframe {

std::optional<std::int64_t> parse_byte_size(std::string_view text) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  text = trim(text);
  std::size_t number_end = 0;
  while (number_end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[number_end])) || text[number_end] == '.')) {
    ++number_end;
  }
  if (number_end == 0) return std::nullopt;
  const std::string number(text.substr(0, number_end));
  if (number.find('.') != number.rfind('.') || number.front() == '.' || number.back() == '.') {
    return std::nullopt;
  }
  std::string unit(trim(text.substr(number_end)));
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else {
    static constexpr std::string_view kLetters = "kmgt";
    const std::size_t power = kLetters.find(unit[0]);
    if (power == std::string_view::npos) return std::nullopt;
    const std::string_view rest = std::string_view(unit).substr(1);
    if (rest == "ib" || rest == "i") {
      scale = std::pow(1024.0, double(power + 1));
    } else if (rest == "b" || rest.empty()) {
      scale = std::pow(1000.0, double(power + 1));
    } else {
      return std::nullopt;
    }
  }
  if (scale == 1 && number.find('.') != std::string::npos) return std::nullopt;  // "1.5" bytes
  // from_chars, not stod: hundreds of digits are "not a size", not an out_of_range exception.
  double mantissa = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), mantissa);
  if (ec != std::errc() || end != number.data() + number.size()) return std::nullopt;
  const double value = mantissa * scale;
  if (!std::isfinite(value) || value > 4.6e18) return std::nullopt;
  return static_cast<std::int64_t>(value);
}

}  // namespace freezeframe
