#include "arguments.h"

#include <cuda_runtime_api.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>

#include "freezeframe/backends/registry.h"
#include "freezeframe/base/error.h"
#include "freezeframe/base/printable.h"
#include "freezeframe/core/device.h"
#include "freezeframe/engine/spec/byte_size.h"

namespace freezeframe::tools {

bool is_help(std::string_view arg) { return arg == "-h" || arg == "--help"; }

void refuse(std::string_view arg, std::string_view why) {
  const bool option = !arg.empty() && arg[0] == '-';
  std::string message =
      detail::concat(option ? "unknown option " : "unexpected argument ", quote(arg));
  if (arg == "--verbose" && why.empty()) why = "it goes first: freezeframe --verbose <command> ...";
  if (!why.empty()) message += detail::concat(" (", why, ")");
  throw UsageError(message);
}

std::string_view take_value(std::span<const std::string_view> args, std::size_t& i) {
  if (i + 1 >= args.size()) throw UsageError(detail::concat(printable(args[i]), " needs a value"));
  return args[++i];
}

double parse_number(std::string_view flag, std::string_view text, double lo, double hi,
                    bool lo_open, std::string_view range) {
  double value = 0;
  std::size_t used = 0;
  try {
    value = std::stod(std::string(text), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const bool above = lo_open ? value > lo : value >= lo;
  if (used == 0 || used != text.size() || !std::isfinite(value) || !above || value > hi) {
    throw UsageError(detail::concat(flag, ": ", quote(text), " is not a number ", range));
  }
  return value;
}

double parse_positive(std::string_view flag, std::string_view text) {
  return parse_number(flag, text, 0.0, std::numeric_limits<double>::max(), true, "above 0");
}

std::int64_t parse_count(std::string_view flag, std::string_view text, std::int64_t max) {
  return parse_whole(flag, text, 1, max);
}

std::int64_t parse_whole(std::string_view flag, std::string_view text, std::int64_t min,
                         std::int64_t max) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    throw UsageError(
        detail::concat(flag, ": ", quote(text), " is not a whole number from ", min, " to ", max));
  }
  return value;
}

std::int64_t parse_size_arg(std::string_view flag, std::string_view text) {
  const auto bytes = parse_byte_size(text);
  if (!bytes || *bytes <= 0) {
    throw UsageError(detail::concat(flag, ": ", quote(text),
                                    " is not a size; write e.g. 141GiB, "
                                    "80GB, 512MiB or a number of bytes"));
  }
  return *bytes;
}

std::string parse_quantization(std::string_view flag, std::string_view text) {
  if (text != "none" && text != "fp8") {
    throw UsageError(detail::concat(flag, ": ", quote(text), " is not none or fp8"));
  }
  return std::string(text);
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

void use_backend(EngineSpec& spec, std::string_view backend) {
  const AttentionBackend& b = find_backend(backend);
  FF_CHECK(b.is_mla() == spec.model.is_mla(), ErrorCode::kInvalidArgument, "--backend ",
           quote(backend), ": ",
           spec.model.is_mla() ? "an MLA model needs an MLA backend"
                               : "an MLA backend cannot run this model's attention");
  for (LayerSpec& layer : spec.model.layers) layer.backend = std::string(backend);
}

bool EngineArgs::take(std::span<const std::string_view> args, std::size_t& i) {
  const std::string_view a = args[i];
  if (a == "--device-memory") {
    device_bytes = parse_size_arg(a, take_value(args, i));
  } else if (a == "--backend") {
    backend = std::string(take_value(args, i));
  } else if (a == "--json") {
    json_path = std::string(take_value(args, i));
  } else if (!a.empty() && a[0] != '-') {
    if (!spec_path.empty()) refuse(a, "one spec at a time");
    spec_path = std::string(a);
  } else {
    return false;
  }
  return true;
}

void EngineArgs::require_spec() const {
  if (spec_path.empty()) throw UsageError("no spec file given");
}

EngineSpec EngineArgs::load() const {
  EngineSpec spec = load_spec(spec_path);
  if (!backend.empty()) use_backend(spec, backend);
  return spec;
}

DeviceMemory device_memory(std::optional<std::int64_t> given) {
  if (given) return {*given, "given"};
  std::size_t free = 0, total = 0;
  if (has_gpu() && cudaMemGetInfo(&free, &total) == cudaSuccess) {
    return {static_cast<std::int64_t>(free), "free memory of " + gpu_status()};
  }
  return {std::int64_t(141) << 30, "assumed: no GPU here, pass --device-memory"};
}

}  // namespace freezeframe::tools
