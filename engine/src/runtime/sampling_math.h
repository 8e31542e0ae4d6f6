#pragma once
// The arithmetic the sampler kernel and its host reference share, bit for bit (docs/DESIGN.md,
// "Sampling"). Every step is exact or IEEE-rounded in a way both sides repeat: the temperature
// division (round to nearest), a subtraction, two multiplications that no compiler may fuse into
// an FMA, and integer arithmetic from there on. The weight of a token, 2^32 · e^(x − max), is
// built from its exponent in 1/65536 steps of log2 by integer multiplies rather than expf, whose
// last bits differ between the GPU and the host; sums of weights are 64-bit integers, so their
// order does not matter. Private to model/.

#include <cstdint>
#include <cstring>
#include <limits>

#ifdef __CUDACC__
#define FF_SAMPLING_HD __host__ __device__ __forceinline__
#else
#define FF_SAMPLING_HD inline
#endif

namespace freezeframe::sampling {

/// Threads of the sampler's CTA (one CTA per request).
inline constexpr int kThreads = 1024;

FF_SAMPLING_HD std::uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

FF_SAMPLING_HD float bits_float(std::uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/// A logit as the sampler sees it: NaN as −∞ (never drawn while anything else can be) and −0 as
/// +0 (so equal values have equal keys).
FF_SAMPLING_HD float canonical(float x) {
  if (!(x == x)) return -std::numeric_limits<float>::infinity();
  return x == 0.0f ? 0.0f : x;
}

/// The logit at `temperature` (> 0): x / T, rounded to nearest on both sides.
FF_SAMPLING_HD float scaled(float logit, float temperature) {
  const float x = canonical(logit);
#ifdef __CUDA_ARCH__
  return canonical(__fdiv_rn(x, temperature));
#else
  return canonical(x / temperature);
#endif
}

/// An unsigned key in the order of the (canonical) float: larger value, larger key.
FF_SAMPLING_HD std::uint32_t order_key(float x) {
  const std::uint32_t u = float_bits(x);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

/// The float of an order key.
FF_SAMPLING_HD float key_value(std::uint32_t key) {
  return bits_float((key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key);
}

/// The rank of token `id` with value x: larger value first, then the lower id. Every token of a
/// row has a different rank, so "the k best" is one set whatever ties the values hold.
FF_SAMPLING_HD std::uint64_t rank_key(float x, std::int32_t id) {
  return (static_cast<std::uint64_t>(order_key(x)) << 32) | ~static_cast<std::uint32_t>(id);
}

FF_SAMPLING_HD std::int32_t rank_id(std::uint64_t rank) {
  return static_cast<std::int32_t>(~static_cast<std::uint32_t>(rank));
}

/// The high half of a 32 × 32-bit product.
FF_SAMPLING_HD std::uint32_t mulhi32(std::uint32_t a, std::uint32_t b) {
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(a) * b) >> 32);
}

/// The high half of a 64 × 64-bit product.
FF_SAMPLING_HD std::uint64_t mulhi64(std::uint64_t a, std::uint64_t b) {
#ifdef __CUDA_ARCH__
  return __umul64hi(a, b);
#else
  const std::uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32;
  const std::uint64_t b_lo = b & 0xffffffffu, b_hi = b >> 32;
  const std::uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi;
  const std::uint64_t middle = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + (lo_hi & 0xffffffffu);
  return a_hi * b_hi + (hi_lo >> 32) + (lo_hi >> 32) + (middle >> 32);
#endif
}

/// 2^(−2^(b − 16)) · 2^32, rounded: the factor of bit b of an exponent in 1/65536 steps.
FF_SAMPLING_HD std::uint32_t exp2_step(int b) {
  switch (b) {
    case 0: return 0xffff4e8eu;
    case 1: return 0xfffe9d1du;
    case 2: return 0xfffd3a3bu;
    case 3: return 0xfffa747fu;
    case 4: return 0xfff4e91cu;
    case 5: return 0xffe9d2b3u;
    case 6: return 0xffd3a752u;
    case 7: return 0xffa75652u;
    case 8: return 0xff4ecb59u;
    case 9: return 0xfe9e115cu;
    case 10: return 0xfd3e0c0du;
    case 11: return 0xfa83b2dbu;
    case 12: return 0xf5257d15u;
    case 13: return 0xeac0c6e8u;
    case 14: return 0xd744fccbu;
    default: return 0xb504f334u;
  }
}

/// The weight of value x in a row whose largest value is `max` (x ≤ max): 2^32 · e^(x − max),
/// truncated to an integer; 2^32 − 1 for the largest, 0 once e^(x − max) < 2^-32 (about 22 nats
/// below it). Within about 1e-5 of the exact value where it matters (the exponent is taken in
/// 1/65536 steps of log2).
FF_SAMPLING_HD std::uint32_t weight(float x, float max) {
  if (x == max) return 0xffffffffu;
  const float gap = max - x;  // > 0, or +inf, or NaN for max = −inf (every x is then max)
  // log2 units; a multiplication feeding a conversion, never an FMA.
  const float z = gap * 1.4426950216293335f;
  if (!(z < 32.0f)) return 0;
  const std::uint32_t q = static_cast<std::uint32_t>(z * 65536.0f);  // exact scaling, < 2^21
  std::uint32_t m = 0xffffffffu;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int b = 0; b < 16; ++b) {
    if ((q >> b) & 1u) m = mulhi32(m, exp2_step(b));
  }
  return m >> (q >> 16);
}

/// The weight the nucleus must reach: ⌈total · top_p⌉, at least 1 and at most total (total <
/// 2^53, exact in a double; the product is rounded to nearest on both sides).
FF_SAMPLING_HD std::uint64_t nucleus_target(std::uint64_t total, float top_p) {
  const double t = static_cast<double>(total) * static_cast<double>(top_p);
  double c = static_cast<double>(static_cast<std::uint64_t>(t));
  if (c < t) c += 1.0;
  std::uint64_t target = static_cast<std::uint64_t>(c);
  if (target < 1) target = 1;
  return target > total ? total : target;
}

/// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): four 32-bit
/// words from a 128-bit counter and a 64-bit key.
struct Philox4 {
  std::uint32_t v[4];
};

FF_SAMPLING_HD Philox4 philox4x32_10(Philox4 ctr, std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * ctr.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * ctr.v[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    ctr = {{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

/// The 64 random bits of the draw for the token at sequence position `position` of a request
/// with `seed`: a pure function of the two, so a replayed or recomputed step draws the same.
FF_SAMPLING_HD std::uint64_t draw_bits(std::uint64_t seed, std::int64_t position) {
  const auto p = static_cast<std::uint64_t>(position);
  const Philox4 r =
      philox4x32_10({{static_cast<std::uint32_t>(p), static_cast<std::uint32_t>(p >> 32),
                      0x73616d70u /* "samp" */, 0u}},
                    static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return (static_cast<std::uint64_t>(r.v[0]) << 32) | r.v[1];
}

/// The point in [0, total) the draw lands on.
FF_SAMPLING_HD std::uint64_t draw_point(std::uint64_t bits, std::uint64_t total) {
  return mulhi64(bits, total);
}

}  // namespace freezeframe::sampling
