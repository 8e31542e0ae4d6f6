#pragma once
// UTF-8 scanning for the tokenizer: one code point at a time, where a byte that does not start
// a well-formed sequence (a stray continuation byte, an overlong form, a surrogate, a value past
// U+10FFFF, a truncated sequence) stands alone as one "character" of its own. Text from any
// source can then be split and encoded byte for byte; only valid UTF-8 has a Unicode class.
// Private to model/.

#include <cstddef>
#include <string>
#include <string_view>

namespace freezeframe::utf8 {

/// What next() returns for a byte that is not part of a well-formed sequence.
inline constexpr char32_t kInvalid = 0xFFFFFFFF;

struct Char {
  char32_t cp = kInvalid;  ///< the code point, or kInvalid
  std::size_t bytes = 1;   ///< its length in the text (1 for an invalid byte)
};

/// The character starting at text[at] (at < text.size()).
[[nodiscard]] inline Char next(std::string_view text, std::size_t at) {
  const auto b0 = static_cast<unsigned char>(text[at]);
  if (b0 < 0x80) return {b0, 1};
  std::size_t n = 0;
  char32_t cp = 0, min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {};
  }
  if (text.size() - at < n) return {};
  for (std::size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(text[at + i]);
    if ((b & 0xC0) != 0x80) return {};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {};
  return {cp, n};
}

/// Appends code point `cp` (at most U+10FFFF, not a surrogate) as UTF-8.
inline void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

/// Whether `text` is well-formed UTF-8 throughout.
[[nodiscard]] inline bool valid(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const Char c = next(text, at);
    if (c.cp == kInvalid) return false;
    at += c.bytes;
  }
  return true;
}

}  // namespace freezeframe::utf8
