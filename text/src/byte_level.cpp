#include "byte_level.h"

#include "freezeframe/base/utf8.h"

namespace freezeframe::byte_level {
namespace {

constexpr bool printable(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> char_of{};
  std::array<std::int16_t, 324> byte_of{};  // by character; -1 where none (all are < U+0144)
  std::array<std::string, 256> utf8_of{};
  Tables() {
    byte_of.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      char_of[b] = printable(b) ? char32_t(b) : next++;
      byte_of[char_of[b]] = std::int16_t(b);
      utf8::append(utf8_of[b], char_of[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t char_of(std::uint8_t b) { return tables().char_of[b]; }

std::optional<std::uint8_t> byte_of(char32_t c) {
  if (c >= tables().byte_of.size() || tables().byte_of[c] < 0) return std::nullopt;
  return static_cast<std::uint8_t>(tables().byte_of[c]);
}

std::string spell(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char b : bytes) out += tables().utf8_of[static_cast<std::uint8_t>(b)];
  return out;
}

std::optional<std::string> unspell(std::string_view spelling) {
  std::string out;
  out.reserve(spelling.size());
  for (std::size_t at = 0; at < spelling.size();) {
    const utf8::Char c = utf8::next(spelling, at);
    const auto b = c.cp == utf8::kInvalid ? std::nullopt : byte_of(c.cp);
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
    at += c.bytes;
  }
  return out;
}

}  // namespace freezeframe::byte_level
