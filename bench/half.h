// fp16 and bf16 encodings, for inputs the CLI builds on the host and outputs
// it reads back. Round to nearest even, as the GPUs convert.
#ifndef FMHA_SPLITK_BENCH_HALF_H_
#define FMHA_SPLITK_BENCH_HALF_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace fmha_cli {

inline uint16_t float_to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t biased = (bits >> 23) & 0xffu;
  uint32_t mantissa = bits & 0x7fffffu;
  if (biased == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  const int32_t exponent = static_cast<int32_t>(biased) - 127 + 15;
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  int shift = 13;
  uint32_t base = static_cast<uint32_t>(exponent) << 10;
  if (exponent <= 0) {  // subnormal half: the implicit bit joins the shifted mantissa
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    shift = 14 - exponent;
    base = 0;
  }
  uint32_t half = base + (mantissa >> shift);  // a carry out of the mantissa bumps the exponent, as it should
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

inline float f16_to_float(uint16_t half) {
  const int exponent = (half >> 10) & 0x1f;
  const int mantissa = half & 0x3ff;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
  }
  return (half & 0x8000u) ? -magnitude : magnitude;
}

inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline float bf16_to_float(uint16_t bf16) {
  const uint32_t bits = static_cast<uint32_t>(bf16) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_HALF_H_
