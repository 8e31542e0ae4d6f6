#pragma once
// Byte sizes as people write them: "141GiB", "80GB", "512 MiB", "4096". Binary units (KiB, MiB,
// GiB, TiB) are powers of 1024, decimal ones (KB, MB, GB, TB) powers of 1000; "B" is optional
// after a unit letter ("80G" = 80 GB).

#include <cstdint>
#include <optional>
#include <string_view>

namespace freezeframe {

/// The number of bytes `text` names, or nothing when it is not a size (empty, negative, an
/// unknown unit, trailing junk, or more than 2^62 bytes). Fractions are allowed with a unit
/// ("1.5GiB") and rounded down to whole bytes.
[[nodiscard]] std::optional<std::int64_t> parse_byte_size(std::string_view text);

}  // namespace freezeframe
