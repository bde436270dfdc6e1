// The oracle's dequantisation of quantised K/V and fp8 Q (DESIGN 5.6, 5.7),
// written from the format definitions: it reads the packed bits and turns
// them into float64 tensors in the same logical layout, which the float64
// AttentionOracle then attends over exactly.
#ifndef FMHA_SPLITK_TESTS_ORACLE_QUANT_H_
#define FMHA_SPLITK_TESTS_ORACLE_QUANT_H_

#include <fmha_splitk/fmha_splitk.h>

#include <cstdint>

#include "common/tensor.h"

namespace fmha_oracle {

using fmha_test::Tensor;

// The value of fp8 `code` in `format` (fmha_fp8_format): sign, 4-bit
// exponent, 3-bit mantissa with subnormals; E4M3FN has bias 7 and NaN at
// S.1111.111, E4M3FNUZ bias 8 and NaN at 0x80 only (no negative zero).
// Neither has infinities.
double fp8_value(uint8_t code, int32_t format);

// The value of fp16 bits (the halves of an int32 scale/shift word).
double half_value(uint16_t bits);

// int4 K/V: int32 words [..., groups + D/8] -> float64 [..., D]. Word g < groups
// holds group g's fp16 scale (low half) and shift (high half); dim d = 8w + j
// is the nibble at bits 4j..4j+3 of value word w; value = nibble * scale +
// shift with the scale/shift of d's group (D / groups dims each).
Tensor dequantise_int4(const Tensor &packed, int32_t groups);

// fp8 codes (u8 [..., D], or int32 words [..., D/4] with dim 4w + j = byte j
// of word w) -> float64 [..., D]: value = fp8 * scale + shift. `scale` is
// int32 fp16x2 (scale low, shift high) or float32 (no shift), in granularity
//   PER_ROW:    the leading dims of `codes` (one scale per row),
//   PER_HEAD:   the trailing head dims of the leading dims ([G, H] or [H]),
//   PER_TENSOR: [1] or 0-d.
Tensor dequantise_fp8(const Tensor &codes, int32_t format, const Tensor &scale, int32_t granularity);

// MLA (FMHA_FLAG_V_FROM_K): V is the first `head_dim_v` dims of K's rows.
Tensor leading_dims(const Tensor &k, int64_t head_dim_v);

}  // namespace fmha_oracle

#endif  // FMHA_SPLITK_TESTS_ORACLE_QUANT_H_
