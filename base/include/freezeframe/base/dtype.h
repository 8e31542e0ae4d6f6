#pragma once
// Element types of tensors and caches, with their sizes and names (reading and writing one
// element on the host: freezeframe/core/element_value.h).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace freezeframe {

enum class DType : std::uint8_t {
  kF32,
  kF16,
  kBF16,
  kFp8E4M3,  ///< OCP e4m3fn: max finite 448, no infinities
  kFp8E5M2,
  kI32,
  kI64,
  kU8,
};

/// Bytes per element.
[[nodiscard]] std::size_t size_of(DType dtype);
/// Short lower-case name as used in specs and messages: "f32", "f16", "bf16", "fp8_e4m3", ...
[[nodiscard]] std::string_view name_of(DType dtype);
/// Inverse of name_of; also accepts the common aliases "float32", "float16", "bfloat16", "fp8".
[[nodiscard]] std::optional<DType> parse_dtype(std::string_view name);
[[nodiscard]] bool is_fp8(DType dtype);

}  // namespace freezeframe
