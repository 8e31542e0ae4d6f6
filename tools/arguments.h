#pragma once
// Command-line arguments shared by the subcommands: option values, sizes, positive numbers,
// the device memory a tool plans for, and the backend override.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "freezeframe/engine/spec/spec.h"

namespace freezeframe::tools {

/// The value after option args[i] (advancing i); throws naming the option when it is last.
[[nodiscard]] std::string_view take_value(std::span<const std::string_view> args, std::size_t& i);
/// A positive decimal number; throws naming `flag` otherwise.
[[nodiscard]] double parse_positive(std::string_view flag, std::string_view text);
/// "141GiB", "80GB", "512MiB" or a number of bytes; throws naming `flag` otherwise.
[[nodiscard]] std::int64_t parse_size_arg(std::string_view flag, std::string_view text);

/// `s` as the inside of a JSON string.
[[nodiscard]] std::string json_escape(std::string_view s);

/// Runs every layer of `spec` on `backend` (--backend); throws when the backend cannot run the
/// model's kind of attention (an MLA model needs an MLA backend). The engine checks the rest.
void use_backend(EngineSpec& spec, std::string_view backend);

/// What the engine commands share: the spec (the positional argument), --device-memory,
/// --backend and --json.
struct EngineArgs {
  std::string spec_path, json_path, backend;
  std::optional<std::int64_t> device_bytes;

  /// Consumes args[i] (and its value) when it is one of these; false otherwise.
  bool take(std::span<const std::string_view> args, std::size_t& i);
  /// The spec with --backend applied.
  [[nodiscard]] EngineSpec load() const;
};

struct DeviceMemory {
  std::int64_t bytes = 0;
  std::string note;  ///< where the figure comes from
};
/// `given` when set; else the GPU's free memory; else 141 GiB (an H200) without a GPU.
[[nodiscard]] DeviceMemory device_memory(std::optional<std::int64_t> given);

}  // namespace freezeframe::tools
