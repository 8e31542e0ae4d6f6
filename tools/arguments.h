#pragma once
// Command-line arguments shared by the subcommands: option values, sizes, positive numbers,
// the device memory a tool plans for, and the backend override.

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "freezeframe/engine/spec/spec.h"

namespace freezeframe::tools {

/// A mistake on the command line (an unknown option, a missing or malformed value): the tool
/// prints it with the command's usage on stderr and exits 2, where other errors exit 1.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// -h or --help.
[[nodiscard]] bool is_help(std::string_view arg);
/// Throws UsageError for an argument the command does not take: "unknown option '--x'", or
/// "unexpected argument 'x'" for a positional one, with `why` after it when given.
[[noreturn]] void refuse(std::string_view arg, std::string_view why = {});

/// The value after option args[i] (advancing i); throws UsageError naming the option when it
/// is last.
[[nodiscard]] std::string_view take_value(std::span<const std::string_view> args, std::size_t& i);
/// A positive, finite decimal number; throws UsageError naming `flag` otherwise.
[[nodiscard]] double parse_positive(std::string_view flag, std::string_view text);
/// A finite number in [lo, hi] ((lo, hi] when `lo_open`); a UsageError naming the flag and
/// `range` (e.g. "in (0, 1]") otherwise.
[[nodiscard]] double parse_number(std::string_view flag, std::string_view text, double lo,
                                  double hi, bool lo_open, std::string_view range);
/// A whole number in [1, max]; throws UsageError naming `flag` otherwise (so that a count
/// never overflows the int it goes into).
[[nodiscard]] std::int64_t parse_count(std::string_view flag, std::string_view text,
                                       std::int64_t max = std::numeric_limits<int>::max());
/// A whole number in [min, max]; throws UsageError naming `flag` otherwise.
[[nodiscard]] std::int64_t parse_whole(std::string_view flag, std::string_view text,
                                       std::int64_t min, std::int64_t max);
/// "141GiB", "80GB", "512MiB" or a number of bytes; throws UsageError naming `flag` otherwise.
[[nodiscard]] std::int64_t parse_size_arg(std::string_view flag, std::string_view text);

/// "none" or "fp8" (model.quantization); throws UsageError naming `flag` otherwise.
[[nodiscard]] std::string parse_quantization(std::string_view flag, std::string_view text);

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

  /// Consumes args[i] (and its value) when it is one of these; false otherwise. A second spec
  /// is refused (UsageError).
  bool take(std::span<const std::string_view> args, std::size_t& i);
  /// Throws UsageError when no spec was given.
  void require_spec() const;
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
