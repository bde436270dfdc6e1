// Element access for the CPU backend: fp16 / bf16 <-> fp32 conversions
// (round-to-nearest-even, written from the formats' definitions) and
// addressing of canonical views.
#ifndef FMHA_SPLITK_BACKENDS_CPU_ELEMENTS_H_
#define FMHA_SPLITK_BACKENDS_CPU_ELEMENTS_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "core/backend_api.h"

namespace fmha::cpu {

inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Branch-free (the conversion loops vectorise): the exponent and mantissa
// move to their fp32 positions and the exponent is rebiased; inf / NaN get
// the top exponent, and zero / subnormal values are renormalised exactly by
// subtracting 2^-14.
inline float half_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t shifted = static_cast<uint32_t>(half & 0x7fffu) << 13;
  const uint32_t exponent = shifted & 0x0f800000u;
  const uint32_t special = 0u - static_cast<uint32_t>(exponent == 0x0f800000u);  // all ones for inf / NaN
  const uint32_t small = 0u - static_cast<uint32_t>(exponent == 0);              // all ones for zero / subnormal
  const uint32_t normal_bits = shifted + (112u << 23) + (special & (112u << 23));
  const uint32_t small_bits = float_bits(bits_float(shifted + (113u << 23)) - bits_float(113u << 23));
  return bits_float(sign | (small & small_bits) | (~small & normal_bits));
}

inline uint16_t float_to_half(float value) {
  const uint32_t bits = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN stays (quiet) NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half: the result is round(|value| * 2^24)
    // subnormal steps; adding and removing 2^23 rounds to nearest even.
    const float steps = bits_float(magnitude) * 16777216.0f;
    const float rounded = (steps + 8388608.0f) - 8388608.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(rounded));
  }
  uint32_t half = (magnitude >> 13) - (112u << 10);  // rebias the exponent
  const uint32_t dropped = magnitude & 0x1fffu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u))) ++half;  // carries into the exponent
  return static_cast<uint16_t>(sign | half);
}

inline float bf16_to_float(uint16_t bf16) { return bits_float(static_cast<uint32_t>(bf16) << 16); }

inline uint16_t float_to_bf16(float value) {
  const uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Element offset of `index` (one entry per leading dimension; the rest 0).
inline int64_t view_offset(const fmha_view &view, std::initializer_list<int64_t> index) {
  int64_t offset = 0;
  int dim = 0;
  for (int64_t i : index) offset += i * view.stride[dim++];
  return offset;
}

// Address of element `index` of a view. An empty view has no data (NULL);
// nothing is read through it, and offsetting NULL is undefined behaviour.
inline void *view_ptr(const fmha_view &view, std::initializer_list<int64_t> index) {
  if (view.data == nullptr) return nullptr;
  return static_cast<uint8_t *>(view.data) + view_offset(view, index) * static_cast<int64_t>(fmha_elem_bytes(view.elem));
}

// Element `index` of a 1-D int32 metadata view (or of row `row` of a 2-D one).
inline int32_t load_i32(const fmha_view &view, int64_t index) {
  return static_cast<const int32_t *>(view.data)[index * view.stride[0]];
}
inline int32_t load_i32(const fmha_view &view, int64_t row, int64_t column) {
  return static_cast<const int32_t *>(view.data)[row * view.stride[0] + column * view.stride[1]];
}

// Element `index` (in elements) of a float buffer of type `elem`, as fp32.
inline float load_float(const void *base, int32_t elem, int64_t index) {
  switch (elem) {
    case FMHA_ELEM_F16: {
      uint16_t half;
      std::memcpy(&half, static_cast<const uint16_t *>(base) + index, sizeof half);
      return half_to_float(half);
    }
    case FMHA_ELEM_BF16: {
      uint16_t bf16;
      std::memcpy(&bf16, static_cast<const uint16_t *>(base) + index, sizeof bf16);
      return bf16_to_float(bf16);
    }
    case FMHA_ELEM_F64:
      return static_cast<float>(static_cast<const double *>(base)[index]);
    default:
      return static_cast<const float *>(base)[index];
  }
}

// Converts `count` contiguous elements of type `elem` to fp32.
inline void load_row(const void *source, int32_t elem, int64_t count, float *destination) {
  switch (elem) {
    case FMHA_ELEM_F16: {
      const auto *halves = static_cast<const uint16_t *>(source);
      for (int64_t d = 0; d < count; ++d) destination[d] = half_to_float(halves[d]);
      return;
    }
    case FMHA_ELEM_BF16: {
      const auto *bf16s = static_cast<const uint16_t *>(source);
      for (int64_t d = 0; d < count; ++d) destination[d] = bf16_to_float(bf16s[d]);
      return;
    }
    case FMHA_ELEM_F64: {
      const auto *doubles = static_cast<const double *>(source);
      for (int64_t d = 0; d < count; ++d) destination[d] = static_cast<float>(doubles[d]);
      return;
    }
    default:
      std::memcpy(destination, source, static_cast<size_t>(count) * sizeof(float));
      return;
  }
}

// Stores `count` fp32 values as contiguous elements of type `elem`.
inline void store_row(const float *source, int64_t count, int32_t elem, void *destination) {
  switch (elem) {
    case FMHA_ELEM_F16: {
      auto *halves = static_cast<uint16_t *>(destination);
      for (int64_t d = 0; d < count; ++d) halves[d] = float_to_half(source[d]);
      return;
    }
    case FMHA_ELEM_BF16: {
      auto *bf16s = static_cast<uint16_t *>(destination);
      for (int64_t d = 0; d < count; ++d) bf16s[d] = float_to_bf16(source[d]);
      return;
    }
    case FMHA_ELEM_F64: {
      auto *doubles = static_cast<double *>(destination);
      for (int64_t d = 0; d < count; ++d) doubles[d] = source[d];
      return;
    }
    default:
      std::memcpy(destination, source, static_cast<size_t>(count) * sizeof(float));
      return;
  }
}

// Stores one fp32 value as element `index` of a buffer of type `elem`.
inline void store_float(void *base, int32_t elem, int64_t index, float value) {
  store_row(&value, 1, elem, static_cast<uint8_t *>(base) + index * static_cast<int64_t>(fmha_elem_bytes(elem)));
}

}  // namespace fmha::cpu

#endif  // FMHA_SPLITK_BACKENDS_CPU_ELEMENTS_H_
