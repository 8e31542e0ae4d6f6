#pragma once
// GPT-2's byte-level alphabet: every byte is spelled as one printable character, so a
// vocabulary of strings covers arbitrary bytes. Bytes '!'..'~', U+00A1..U+00AC and
// U+00AE..U+00FF are themselves; the other 68 (controls, space, DEL, U+00A0, U+00AD) become
// U+0100 onwards in byte order (space is 'Ġ', newline 'Ċ'). Private to model/.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace freezeframe::byte_level {

/// The character that spells byte `b`.
[[nodiscard]] char32_t char_of(std::uint8_t b);

/// The byte a character spells, or nullopt for a character outside the alphabet.
[[nodiscard]] std::optional<std::uint8_t> byte_of(char32_t c);

/// `bytes` spelled in the alphabet, as UTF-8.
[[nodiscard]] std::string spell(std::string_view bytes);

/// The bytes `spelling` stands for, or nullopt when it is not valid UTF-8 made only of the
/// alphabet's characters.
[[nodiscard]] std::optional<std::string> unspell(std::string_view spelling);

}  // namespace freezeframe::byte_level
