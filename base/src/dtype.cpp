#include "freezeframe/base/dtype.h"

#include "freezeframe/base/error.h"

namespace freezeframe {

std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kFp8E4M3: return 1;
    case DType::kFp8E5M2: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  FF_THROW(ErrorCode::kInternal, "unknown dtype value ", static_cast<int>(dtype));
}

std::string_view name_of(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kFp8E4M3: return "fp8_e4m3";
    case DType::kFp8E5M2: return "fp8_e5m2";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "unknown";
}

std::optional<DType> parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"f32", DType::kF32},     {"float32", DType::kF32},      {"float", DType::kF32},
      {"f16", DType::kF16},     {"float16", DType::kF16},      {"half", DType::kF16},
      {"bf16", DType::kBF16},   {"bfloat16", DType::kBF16},    {"fp8_e4m3", DType::kFp8E4M3},
      {"fp8", DType::kFp8E4M3}, {"fp8_e5m2", DType::kFp8E5M2}, {"i32", DType::kI32},
      {"int32", DType::kI32},   {"i64", DType::kI64},          {"int64", DType::kI64},
      {"u8", DType::kU8},       {"uint8", DType::kU8},
  };
  for (const Alias& alias : kAliases) {
    if (alias.name == name) return alias.dtype;
  }
  return std::nullopt;
}

bool is_fp8(DType dtype) { return dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2; }

}  // namespace freezeframe
