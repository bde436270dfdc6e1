// Dequantisation from the bits, element by element, through each tensor's
// own strides.
#include "oracle/quant.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace fmha_oracle {
namespace {

[[noreturn]] void fail(const std::string &what) { throw std::invalid_argument("oracle: " + what); }

uint32_t word_at(const Tensor &t, const std::vector<int64_t> &index) {
  return static_cast<uint32_t>(static_cast<int32_t>(t.get(index)));
}

// The shape of `t` with its last dim replaced by `last`.
std::vector<int64_t> with_last_dim(const Tensor &t, int64_t last) {
  std::vector<int64_t> shape = t.shape();
  if (shape.empty()) fail("a K/V tensor needs a head dim");
  shape.back() = last;
  return shape;
}

struct ScaleShift {
  double scale, shift;
};

ScaleShift scale_shift_at(const Tensor &scale, const std::vector<int64_t> &row, int32_t granularity) {
  std::vector<int64_t> index;
  const size_t rank = scale.shape().size();
  switch (granularity) {
    case FMHA_SCALE_PER_ROW:
      if (rank != row.size()) fail("a per-row scale needs the leading dims of its tensor");
      index = row;
      break;
    case FMHA_SCALE_PER_HEAD:
      if (rank == 0 || rank > row.size()) fail("a per-head scale is [G, H] or [H]");
      index.assign(row.end() - static_cast<std::ptrdiff_t>(rank), row.end());
      break;
    case FMHA_SCALE_PER_TENSOR:
      if (scale.numel() != 1) fail("a per-tensor scale has one element");
      index.assign(rank, 0);
      break;
    default:
      fail("unknown scale granularity");
  }
  for (size_t d = 0; d < index.size(); ++d)
    if (index[d] >= scale.shape()[d]) fail("scale tensor smaller than its data");
  if (scale.dtype() == fmha_test::Dtype::f32) return {scale.get(index), 0.0};
  if (scale.dtype() != fmha_test::Dtype::i32) fail("scales are int32 fp16x2 or float32");
  const uint32_t word = word_at(scale, index);
  return {half_value(static_cast<uint16_t>(word & 0xffffu)), half_value(static_cast<uint16_t>(word >> 16))};
}

}  // namespace

double half_value(uint16_t bits) {
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  if (exponent == 0x1f)
    return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

double fp8_value(uint8_t code, int32_t format) {
  const bool fnuz = format == FMHA_FP8_E4M3FNUZ;
  if (format != FMHA_FP8_E4M3FN && !fnuz) fail("unknown fp8 format");
  const int bias = fnuz ? 8 : 7;
  const int exponent = (code >> 3) & 0xf, mantissa = code & 0x7;
  const bool negative = (code & 0x80) != 0;
  const bool nan = fnuz ? code == 0x80 : (exponent == 0xf && mantissa == 0x7);
  if (nan) return std::numeric_limits<double>::quiet_NaN();
  // Subnormals: 0.mmm * 2^(1 - bias); normals: 1.mmm * 2^(e - bias).
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa, 1 - bias - 3) : std::ldexp(8 + mantissa, exponent - bias - 3);
  return negative ? -magnitude : magnitude;
}

Tensor dequantise_int4(const Tensor &packed, int32_t groups) {
  if (packed.dtype() != fmha_test::Dtype::i32) fail("int4 K/V are int32 words");
  const int64_t words = packed.shape().back() - groups;
  if (groups < 1 || words <= 0 || words % groups != 0)
    fail("int4 rows need groups + D/8 words, D/8 a multiple of groups");
  const int64_t head_dim = 8 * words, dims_per_group = head_dim / groups;
  Tensor out(fmha_test::Dtype::f64, with_last_dim(packed, head_dim));
  out.for_each_index([&](const std::vector<int64_t> &index) {
    const int64_t d = index.back(), group = d / dims_per_group;
    std::vector<int64_t> at = index;
    at.back() = group;
    const uint32_t scale_word = word_at(packed, at);
    at.back() = groups + d / 8;
    const uint32_t nibble = (word_at(packed, at) >> (4 * (d % 8))) & 0xfu;
    out.set(index, nibble * half_value(static_cast<uint16_t>(scale_word & 0xffffu)) +
                       half_value(static_cast<uint16_t>(scale_word >> 16)));
  });
  return out;
}

Tensor dequantise_fp8(const Tensor &codes, int32_t format, const Tensor &scale, int32_t granularity) {
  const bool words = codes.dtype() == fmha_test::Dtype::i32;
  if (!words && codes.dtype() != fmha_test::Dtype::u8) fail("fp8 data is uint8 bytes or int32 words");
  const int64_t head_dim = codes.shape().back() * (words ? 4 : 1);
  Tensor out(fmha_test::Dtype::f64, with_last_dim(codes, head_dim));
  out.for_each_index([&](const std::vector<int64_t> &index) {
    const int64_t d = index.back();
    std::vector<int64_t> at = index;
    at.back() = words ? d / 4 : d;
    const uint32_t raw = words ? word_at(codes, at) >> (8 * (d % 4)) : static_cast<uint32_t>(codes.get(at));
    const std::vector<int64_t> row(index.begin(), index.end() - 1);
    const ScaleShift s = scale_shift_at(scale, row, granularity);
    out.set(index, fp8_value(static_cast<uint8_t>(raw & 0xffu), format) * s.scale + s.shift);
  });
  return out;
}

Tensor leading_dims(const Tensor &k, int64_t head_dim_v) {
  if (head_dim_v < 1 || head_dim_v > k.shape().back()) fail("V_FROM_K needs head_dim_v <= K's head dim");
  Tensor v(k.dtype(), with_last_dim(k, head_dim_v));
  v.for_each_index([&](const std::vector<int64_t> &index) { v.set(index, k.get(index)); });
  return v;
}

}  // namespace fmha_oracle
