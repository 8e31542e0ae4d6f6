#pragma once
// f16, bf16 and fp8 e4m3 bit patterns to f32 on the host, exactly, and f32 to f16 and bf16
// rounded to nearest even (checkpoint readers and the weight sources; CUDA's __float2half_rn
// and __float2bfloat16_rn give the same bits, which a test checks).

#include <bit>
#include <cstdint>

namespace freezeframe::host_half {

[[nodiscard]] inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  std::uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000 | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FF) << 13);
  }
  return std::bit_cast<float>(bits);
}

[[nodiscard]] inline float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(std::uint32_t(b) << 16);
}

[[nodiscard]] inline std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7FFFFFFF) > 0x7F800000) return std::uint16_t((bits >> 16) | 0x40);  // quiet NaN
  // Adding 0x7FFF plus the kept part's lowest bit rounds to nearest, ties to even; a carry
  // out of the mantissa steps the exponent, up to infinity, as it should.
  return std::uint16_t((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

[[nodiscard]] inline std::uint16_t f32_to_f16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const auto sign = std::uint16_t((bits >> 16) & 0x8000);
  const std::uint32_t abs = bits & 0x7FFFFFFF;
  if (abs > 0x7F800000) return sign | 0x7E00;   // quiet NaN
  if (abs >= 0x477FF000) return sign | 0x7C00;  // 65520 and above round to infinity
  // Rounds `value` shifted right by `shift` bits to nearest, ties to even.
  const auto round_shift = [](std::uint32_t value, std::uint32_t shift) {
    const std::uint32_t kept = value >> shift, rest = value & ((1u << shift) - 1);
    const std::uint32_t half = 1u << (shift - 1);
    return kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);
  };
  if (abs >= 0x38800000) {  // normal in f16: rebias the exponent (127 → 15), keep 10 bits
    return sign | std::uint16_t(round_shift(abs - 0x38000000, 13));
  }
  // Below 2^-14: a multiple of f16's subnormal step 2^-24 (rounding up to the smallest normal
  // gives its encoding too).
  const std::uint32_t shift = 126 - (abs >> 23);
  if (shift > 24) return sign;
  return sign | std::uint16_t(round_shift((abs & 0x7FFFFF) | 0x800000, shift));
}

/// An OCP fp8 e4m3fn byte (bias 7, no infinities; S.1111.111 is NaN) as f32, exactly.
[[nodiscard]] inline float e4m3_to_f32(std::uint8_t b) {
  const std::uint32_t sign = std::uint32_t(b & 0x80) << 24;
  const std::uint32_t exponent = (b >> 3) & 0xF, mantissa = b & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7FC00000);
  if (exponent != 0) {
    return std::bit_cast<float>(sign | ((exponent + 120) << 23) | (mantissa << 20));
  }
  // Subnormal: mantissa · 2^-9, exact in f32.
  const float magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);
  return (b & 0x80) != 0 ? -magnitude : magnitude;
}

}  // namespace freezeframe::host_half
