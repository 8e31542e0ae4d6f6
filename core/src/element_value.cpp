#include "freezeframe/core/element_value.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

#include "freezeframe/base/error.h"

namespace freezeframe {

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
