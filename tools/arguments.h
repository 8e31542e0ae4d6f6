#pragma once
// Command-line arguments shared by the subcommands: option values, sizes, positive numbers,
// and the device memory a tool plans for.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace freezeframe::tools {

/// The value after option args[i] (advancing i); throws naming the option when it is last.
[[nodiscard]] std::string_view take_value(std::span<const std::string_view> args, std::size_t& i);
/// A positive decimal number; throws naming `flag` otherwise.
[[nodiscard]] double parse_positive(std::string_view flag, std::string_view text);
/// "141GiB", "80GB", "512MiB" or a number of bytes; throws naming `flag` otherwise.
[[nodiscard]] std::int64_t parse_size_arg(std::string_view flag, std::string_view text);

struct DeviceMemory {
  std::int64_t bytes = 0;
  std::string note;  ///< where the figure comes from
};
/// `given` when set; else the GPU's free memory; else 141 GiB (an H200) without a GPU.
[[nodiscard]] DeviceMemory device_memory(std::optional<std::int64_t> given);

}  // namespace freezeframe::tools
