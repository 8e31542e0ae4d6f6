#include "freezeframe/base/printable.h"

#include <cstdio>

namespace freezeframe {
namespace {

/// The length of the valid UTF-8 sequence at the start of `s` (2 to 4), or 0.
std::size_t utf8_sequence(std::string_view s) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  std::size_t n = 0;
  unsigned min = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2, min = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3, min = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  unsigned code = lead & (0x7F >> n);
  for (std::size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i) & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are not valid UTF-8.
  if (code < min || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return 0;
  if (code <= 0x9F) return 0;  // C1 controls: escaped like the C0 ones
  // Invisible ones that would make a message misleading: zero-width spaces and joiners, line
  // and paragraph separators, direction overrides, the byte order mark.
  if ((code >= 0x200B && code <= 0x200F) || (code >= 0x2028 && code <= 0x202E) ||
      (code >= 0x2060 && code <= 0x2064) || code == 0xFEFF) {
    return 0;
  }
  return n;
}

/// printable(); `cut` tells whether the text was shortened.
std::string escape(std::string_view text, std::size_t max_chars, bool& cut) {
  cut = false;
  std::string out;
  std::size_t chars = 0;
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    std::string piece;
    std::size_t used = 1, width = 1;
    if (c == '\n') {
      piece = "\\n";
    } else if (c == '\r') {
      piece = "\\r";
    } else if (c == '\t') {
      piece = "\\t";
    } else if (c == '\\') {
      piece = "\\\\";
    } else if (c >= 0x20 && c < 0x7F) {
      piece = static_cast<char>(c);
    } else if (const std::size_t n = c >= 0x80 ? utf8_sequence(text.substr(i)) : 0; n > 0) {
      piece = text.substr(i, n);
      used = n;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      piece = hex;
    }
    if (piece.size() > 1 && used == 1) width = piece.size();
    if (chars + width > max_chars) {
      cut = true;
      return out + "…";
    }
    out += piece;
    chars += width;
    i += used;
  }
  return out;
}

}  // namespace

std::string printable(std::string_view text, std::size_t max_chars) {
  bool cut = false;
  return escape(text, max_chars, cut);
}

std::string quote(std::string_view text, std::size_t max_chars) {
  bool cut = false;
  std::string out(1, '\'');
  out += escape(text, max_chars, cut);
  out += '\'';
  if (cut) out += " (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string format_bytes(std::int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while ((value >= 1024.0 || value <= -1024.0) && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  }
  return text;
}

}  // namespace freezeframe
