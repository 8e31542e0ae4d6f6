#pragma once
// Reading an input file (a spec, a trace) with a bound: a file that is not a regular file
// (/dev/zero, a FIFO, a directory) or is larger than its kind may be is refused before reading,
// and the read itself stops past the bound, so no file, whatever its size claims, is read
// without limit. Specs (spec/) and traces (serving/) are read through it.

#include <cstdint>
#include <string>
#include <string_view>

namespace freezeframe {

/// The largest spec file read (a real spec is a few KiB).
inline constexpr std::int64_t kMaxSpecBytes = std::int64_t(1) << 20;
/// The largest trace file read (the Azure traces are under 1 MiB, Mooncake's a few MiB).
inline constexpr std::int64_t kMaxTraceBytes = std::int64_t(256) << 20;

/// Refuses `path` unless it is a regular file (a link to one is fine), before anything opens it:
/// opening a FIFO blocks until a writer comes, and a device never ends. Throws kNotFound when it
/// does not exist, kInvalidArgument naming what it is otherwise ("a FIFO", "a directory").
void require_regular_file(const std::string& path, std::string_view what);

/// The contents of the file at `path`; `what` names its kind in messages ("spec", "trace").
/// Throws kNotFound when it does not exist or cannot be opened, kInvalidArgument when it is not
/// a regular file or holds more than `max_bytes`, naming the file, its size and the limit.
[[nodiscard]] std::string read_input_file(const std::string& path, std::string_view what,
                                          std::int64_t max_bytes);

}  // namespace freezeframe
