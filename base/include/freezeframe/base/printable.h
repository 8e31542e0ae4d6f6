#pragma once
// Text read from a file and quoted in a message: bytes that would break the message (control
// characters, invalid UTF-8) are escaped, so a message stays one readable line, and long text
// is shortened, so a megabyte-long value or line does not become a megabyte-long message.
// Spec, trace and checkpoint readers share it.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace freezeframe {

/// How many characters of echoed text a message shows.
inline constexpr std::size_t kEchoChars = 80;

/// `text` with control characters, DEL, C1 controls, invisible format characters (zero-width
/// spaces, direction overrides, the byte order mark) and bytes of invalid UTF-8 escaped (\n,
/// \r, \t, \\, \xNN for each byte), cut after `max_chars` characters of the result with "…".
[[nodiscard]] std::string printable(std::string_view text, std::size_t max_chars = kEchoChars);

/// printable(text) in single quotes; when shortened, followed by the full length, e.g.
/// "'aaaa…' (5242880 bytes)".
[[nodiscard]] std::string quote(std::string_view text, std::size_t max_chars = kEchoChars);

/// "[64, 32]": a tensor's shape as messages write it.
[[nodiscard]] std::string shape_text(std::span<const std::int64_t> shape);

/// "1.50 GiB", "512 B": bytes in the largest binary unit that keeps the number ≥ 1.
[[nodiscard]] std::string format_bytes(std::int64_t bytes);

}  // namespace freezeframe
