#include "freezeframe/core/dtype.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstring>

#include "freezeframe/core/error.h"

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

float load_as_float(const void* p, DType dtype) {
  switch (dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::kF16: {
      __half v;
      std::memcpy(&v, p, 2);
      return __half2float(v);
    }
    case DType::kBF16: {
      __nv_bfloat16 v;
      std::memcpy(&v, p, 2);
      return __bfloat162float(v);
    }
    case DType::kFp8E4M3: {
      __nv_fp8_e4m3 v;
      std::memcpy(&v, p, 1);
      return static_cast<float>(v);
    }
    case DType::kFp8E5M2: {
      __nv_fp8_e5m2 v;
      std::memcpy(&v, p, 1);
      return static_cast<float>(v);
    }
    case DType::kI32: {
      std::int32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<float>(v);
    }
    case DType::kI64: {
      std::int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<float>(v);
    }
    case DType::kU8: return static_cast<float>(*static_cast<const std::uint8_t*>(p));
  }
  FF_THROW(ErrorCode::kInternal, "unknown dtype value ", static_cast<int>(dtype));
}

void store_from_float(void* p, DType dtype, float value) {
  switch (dtype) {
    case DType::kF32: std::memcpy(p, &value, 4); return;
    case DType::kF16: {
      const __half v = __float2half_rn(value);
      std::memcpy(p, &v, 2);
      return;
    }
    case DType::kBF16: {
      const __nv_bfloat16 v = __float2bfloat16_rn(value);
      std::memcpy(p, &v, 2);
      return;
    }
    case DType::kFp8E4M3: {
      const __nv_fp8_storage_t v = __nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3);
      std::memcpy(p, &v, 1);
      return;
    }
    case DType::kFp8E5M2: {
      const __nv_fp8_storage_t v = __nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E5M2);
      std::memcpy(p, &v, 1);
      return;
    }
    case DType::kI32: {
      const auto v = static_cast<std::int32_t>(value);
      std::memcpy(p, &v, 4);
      return;
    }
    case DType::kI64: {
      const auto v = static_cast<std::int64_t>(value);
      std::memcpy(p, &v, 8);
      return;
    }
    case DType::kU8: *static_cast<std::uint8_t*>(p) = static_cast<std::uint8_t>(value); return;
  }
  FF_THROW(ErrorCode::kInternal, "unknown dtype value ", static_cast<int>(dtype));
}

float round_through(DType dtype, float value) {
  unsigned char bytes[8];
  store_from_float(bytes, dtype, value);
  return load_as_float(bytes, dtype);
}

}  // namespace freezeframe
