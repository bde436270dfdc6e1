// Quantised element formats of the CPU backend (DESIGN 5.6): the two fp8
// formats, decoded exactly from their definitions, fp8 rounding for the
// quantised P of FMHA_FLAG_FP8_PV, and the int4 row layout.
#ifndef FMHA_SPLITK_BACKENDS_CPU_QUANTISED_H_
#define FMHA_SPLITK_BACKENDS_CPU_QUANTISED_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cpu/elements.h"
#include "fmha_splitk/fmha_splitk.h"

namespace fmha::cpu {

// One fp8 format: its decode table and its largest finite value.
struct Fp8Format {
  std::array<float, 256> value;  // the value of every byte (NaN codes: NaN)
  float max_finite;              // E4M3FN 448, E4M3FNUZ 240
  int exponent_bias;             // E4M3FN 7, E4M3FNUZ 8
};

// Sign, 4 exponent bits, 3 mantissa bits. E4M3FN (bias 7): S.1111.111 is NaN,
// no infinities. E4M3FNUZ (bias 8): 0x80 (the would-be negative zero) is
// the only NaN, no infinities.
inline Fp8Format make_fp8_format(int32_t format) {
  Fp8Format made{};
  const bool fnuz = format == FMHA_FP8_E4M3FNUZ;
  made.exponent_bias = fnuz ? 8 : 7;
  for (int code = 0; code < 256; ++code) {
    const int exponent = (code >> 3) & 15;
    const int mantissa = code & 7;
    const bool nan = fnuz ? code == 0x80 : (code & 0x7f) == 0x7f;
    // Subnormals (exponent 0) have the smallest normal's exponent, no
    // implicit one.
    const float magnitude = exponent == 0
                                ? std::ldexp(static_cast<float>(mantissa), 1 - made.exponent_bias - 3)
                                : std::ldexp(static_cast<float>(8 + mantissa), exponent - made.exponent_bias - 3);
    made.value[static_cast<size_t>(code)] =
        nan ? std::numeric_limits<float>::quiet_NaN() : ((code & 0x80) != 0 ? -magnitude : magnitude);
  }
  made.max_finite = fnuz ? 240.0f : 448.0f;
  return made;
}

inline const Fp8Format &fp8_format(int32_t format) {
  static const Fp8Format e4m3fn = make_fp8_format(FMHA_FP8_E4M3FN);
  static const Fp8Format e4m3fnuz = make_fp8_format(FMHA_FP8_E4M3FNUZ);
  return format == FMHA_FP8_E4M3FNUZ ? e4m3fnuz : e4m3fn;
}

// `value` (>= 0 or NaN) rounded to the nearest fp8 value of `format`, ties
// to even, saturating at max_finite (what a saturating hardware conversion
// gives); NaN stays NaN. The mantissa step is 2^(e - 3) for a normal value
// of exponent e and the subnormal step below the smallest normal.
inline float fp8_round(float value, const Fp8Format &format) {
  if (!(value > 0.0f)) return value;  // zero and NaN
  const int min_exponent = 1 - format.exponent_bias;
  const int exponent = std::max(std::ilogb(value), min_exponent);
  const float step = std::ldexp(1.0f, exponent - 3);
  // nearbyint rounds to nearest even in the default rounding mode; the
  // quotient and the product are exact (powers of two).
  return std::min(std::nearbyint(value / step) * step, format.max_finite);
}

// An fp16 scale (low 16 bits) and fp16 shift (high 16 bits) of one int32.
struct ScaleShift {
  float scale;
  float shift;
};

inline ScaleShift unpack_scale_shift(int32_t word) {
  const auto bits = static_cast<uint32_t>(word);
  return {half_to_float(static_cast<uint16_t>(bits & 0xffffu)), half_to_float(static_cast<uint16_t>(bits >> 16))};
}

// Decodes an int4 row of `head_dim` dims in `groups` groups (which split
// the dims evenly, in order): `groups` scale/shift words, then the nibbles,
// dim 8w + j at bits 4j..4j+3 of value word w (DESIGN 5.6).
inline void load_int4_row(const int32_t *row, int64_t groups, int64_t head_dim, float *destination) {
  const int32_t *words = row + groups;
  const int64_t group_dims = head_dim / groups;
  for (int64_t group = 0; group < groups; ++group) {
    const ScaleShift scale = unpack_scale_shift(row[group]);
    for (int64_t d = group * group_dims; d < (group + 1) * group_dims; ++d) {
      const uint32_t nibble = (static_cast<uint32_t>(words[d / 8]) >> (4 * (d % 8))) & 15u;
      destination[d] = static_cast<float>(nibble) * scale.scale + scale.shift;
    }
  }
}

// Decodes `count` fp8 bytes as value * scale + shift.
inline void load_fp8_row(const uint8_t *row, const Fp8Format &format, ScaleShift scale, int64_t count,
                         float *destination) {
  for (int64_t d = 0; d < count; ++d) destination[d] = format.value[row[d]] * scale.scale + scale.shift;
}

}  // namespace fmha::cpu

#endif  // FMHA_SPLITK_BACKENDS_CPU_QUANTISED_H_
