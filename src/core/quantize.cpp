#include "core/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/elements.h"
#include "core/checked_int.h"
#include "core/error.h"
#include "core/names.h"
#include "core/tensor_view.h"

namespace fmha::core {

namespace {

using cpu::half_to_float;

constexpr int32_t kInt4Levels = 15;  // nibbles 0..15
constexpr int64_t kNibblesPerWord = 8;
// DLPack 1.1 code of E4M3FN; E4M3FNUZ is the next (code - this = the
// fmha_fp8_format).
constexpr uint8_t kFp8CodeE4m3fn = 10;

// The two E4M3 formats differ in bias, largest value and NaN code.
struct Fp8Format {
  int exponent_bias;
  float max_value;
  uint8_t max_code;  // the largest finite magnitude
  uint8_t nan_code;
  bool negative_zero;
};

Fp8Format fp8_format_of(int32_t format) {
  if (format == FMHA_FP8_E4M3FNUZ) return {8, 240.0f, 0x7f, 0x80, false};
  return {7, 448.0f, 0x7e, 0x7f, true};
}

// x in fp8 by round-to-nearest-even, saturating to +-max (infinities too).
uint8_t encode_fp8(float x, const Fp8Format &format) {
  if (std::isnan(x)) return format.nan_code;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float magnitude = std::fabs(x);
  if (magnitude == 0) return format.negative_zero ? sign : 0;  // FNUZ has no -0
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = m * 2^exponent, m in [0.5, 1)
  // Values below the smallest normal (2^(1 - bias)) share its quantum; the
  // code of a subnormal is its count of quanta, and a count of 8 is exactly
  // the smallest normal's code, so rounding up into the normals needs no
  // special case. nearbyint rounds half to even in the default mode, and the
  // scaling by a power of two is exact.
  const int unbiased = std::max(exponent - 1, 1 - format.exponent_bias);
  const float steps = std::nearbyint(std::ldexp(magnitude, 3 - unbiased));  // in [0, 16]
  const int64_t code = std::isinf(magnitude) ? int64_t{format.max_code} + 1
                                             : static_cast<int64_t>(unbiased - (1 - format.exponent_bias)) * 8 +
                                                   static_cast<int64_t>(steps);
  const auto bits = static_cast<uint8_t>(std::min<int64_t>(code, format.max_code));
  // FNUZ has no -0: a negative value that rounds to zero is +0.
  if (bits == 0 && !format.negative_zero) return 0;
  return static_cast<uint8_t>(sign | bits);
}

// The neighbours of an fp16 value, for rounding in a chosen direction.
uint16_t half_step_down(uint16_t half) {
  if ((half & 0x7fffu) == 0) return 0x8001u;
  return static_cast<uint16_t>((half & 0x8000u) ? half + 1 : half - 1);
}
uint16_t half_step_up(uint16_t half) {
  if ((half & 0x7fffu) == 0) return 0x0001u;
  return static_cast<uint16_t>((half & 0x8000u) ? half - 1 : half + 1);
}

// The largest fp16 <= value and the smallest fp16 >= value (+-inf beyond the
// fp16 range).
uint16_t half_round_down(double value) {
  const uint16_t half = cpu::float_to_half(static_cast<float>(value));
  return static_cast<double>(half_to_float(half)) > value ? half_step_down(half) : half;
}
uint16_t half_round_up(double value) {
  const uint16_t half = cpu::float_to_half(static_cast<float>(value));
  return static_cast<double>(half_to_float(half)) < value ? half_step_up(half) : half;
}

bool half_is_finite(uint16_t half) { return (half & 0x7c00u) != 0x7c00u; }

const char *fp8_format_name(int32_t format) {
  return format == FMHA_FP8_E4M3FNUZ ? "FMHA_FP8_E4M3FNUZ" : "FMHA_FP8_E4M3FN";
}

// The leading (row) dims of src, as a small multi-index counter.
struct Rows {
  int32_t rank = 0;
  int64_t shape[FMHA_MAX_VIEW_RANK] = {};
  int64_t count = 1;
};

// Calls visit(index) for every row index in row-major order.
template <class Visit>
void for_each_row(const Rows &rows, Visit &&visit) {
  int64_t index[FMHA_MAX_VIEW_RANK] = {};
  for (int64_t row = 0; row < rows.count; ++row) {
    visit(static_cast<const int64_t *>(index));
    for (int32_t axis = rows.rank - 1; axis >= 0; --axis) {
      if (++index[axis] < rows.shape[axis]) break;
      index[axis] = 0;
    }
  }
}

// Element offset in `view` of `index` over its first `rank` axes.
int64_t offset_of(const fmha_view &view, const int64_t *index, int32_t rank) {
  int64_t offset = 0;
  for (int32_t axis = 0; axis < rank; ++axis) offset += index[axis] * view.stride[axis];
  return offset;
}

std::string index_string(const int64_t *index, int32_t rank) {
  std::string text = "[";
  for (int32_t axis = 0; axis < rank; ++axis) text += cat(axis ? ", " : "", index[axis]);
  return text + "]";
}

// The validated call: canonical views of the three tensors and the format.
struct Quantization {
  fmha_view src{};
  fmha_view dst{};
  fmha_view scale{};
  Rows rows;
  int64_t head_dim = 0;
  int32_t groups = 1;
  // fp8: how many trailing row dims index the scale (0 = per tensor).
  int32_t scale_dims = 0;
};

void check_on_host(const DLTensor *tensor, const char *name) {
  if (tensor->device.device_type != kDLCPU)
    fail(FMHA_STATUS_NOT_SUPPORTED,
         cat(name, " is on ", dl_device_string(tensor->device),
             "; fmha_quantize_kv runs on the host: quantise a kDLCPU tensor, then copy the result to the device"));
}

// The rule borrows `elems_text` (TensorRule).
TensorRule make_rule(const char *name, const std::vector<DimSpec> &dims, uint32_t elems, const char *elems_text) {
  TensorRule rule;
  rule.name = name;
  for (const DimSpec &dim : dims) rule.dims.push_back(dim);
  rule.elems = elems;
  rule.elems_text = elems_text;
  return rule;
}

// Names of the row dims of src in messages; static, as DimSpec keeps only
// the pointer.
const char *const kRowDimNames[FMHA_MAX_VIEW_RANK] = {"src dim 0", "src dim 1", "src dim 2",
                                                      "src dim 3", "src dim 4", "src dim 5"};

std::vector<DimSpec> row_dims(const Rows &rows, int32_t first) {
  std::vector<DimSpec> dims;
  for (int32_t axis = first; axis < rows.rank; ++axis) dims.push_back({kRowDimNames[axis], rows.shape[axis]});
  return dims;
}

void check_enums(const fmha_quantize_kv_args &args) {
  if (args.reserved0 != 0) invalid(cat("args.reserved0 = ", args.reserved0, " must be zero"));
  if (args.kv_quant == FMHA_KV_QUANT_NONE)
    invalid(
        "args.kv_quant = 0 (FMHA_KV_QUANT_NONE): nothing to quantise; use FMHA_KV_QUANT_INT4 or "
        "FMHA_KV_QUANT_FP8");
  if (args.kv_quant != FMHA_KV_QUANT_INT4 && args.kv_quant != FMHA_KV_QUANT_FP8)
    invalid(cat("args.kv_quant = ", args.kv_quant, " is not an fmha_kv_quant (1 = INT4, 2 = FP8)"));
  if (args.kv_quant == FMHA_KV_QUANT_INT4) {
    const int32_t groups = args.kv_quant_groups;
    if (groups != 0 && groups != 1 && groups != 2 && groups != 4 && groups != 8)
      invalid(cat("args.kv_quant_groups = ", groups, " must be 0, 1, 2, 4 or 8"));
    return;
  }
  if (args.fp8_format != FMHA_FP8_E4M3FN && args.fp8_format != FMHA_FP8_E4M3FNUZ)
    invalid(cat("args.fp8_format = ", args.fp8_format, " is not an fmha_fp8_format (0 = E4M3FN, 1 = E4M3FNUZ)"));
  if (args.kv_scale_kind != FMHA_KV_SCALE_F16X2_SCALE_SHIFT && args.kv_scale_kind != FMHA_KV_SCALE_F32)
    invalid(cat("args.kv_scale_kind = ", args.kv_scale_kind,
                " is not an fmha_kv_scale_kind (0 = F16X2_SCALE_SHIFT, 1 = F32)"));
  if (args.scale_granularity < FMHA_SCALE_PER_ROW || args.scale_granularity > FMHA_SCALE_PER_TENSOR)
    invalid(cat("args.scale_granularity = ", args.scale_granularity,
                " is not an fmha_scale_granularity (0 = PER_ROW, 1 = PER_HEAD, 2 = PER_TENSOR)"));
}

Quantization validate(const fmha_quantize_kv_args &args) {
  check_enums(args);
  if (args.src == nullptr) invalid("args.src is NULL");
  if (args.dst == nullptr) invalid("args.dst is NULL");
  const bool fp8 = args.kv_quant == FMHA_KV_QUANT_FP8;
  if (fp8 && args.scale == nullptr) invalid("args.scale is NULL; FMHA_KV_QUANT_FP8 writes the scales there");
  if (!fp8 && args.scale != nullptr)
    invalid("args.scale must be NULL with FMHA_KV_QUANT_INT4: the scales and shifts are the first words of dst");
  check_on_host(args.src, "args.src");
  check_on_host(args.dst, "args.dst");
  if (fp8) check_on_host(args.scale, "args.scale");

  const DLTensor &src = *args.src;
  if (src.ndim < 1 || src.ndim > FMHA_MAX_VIEW_RANK)
    invalid(cat("args.src has ndim = ", src.ndim, "; expected 1 to ", FMHA_MAX_VIEW_RANK, " dims [..., D]"));
  if (src.shape == nullptr) invalid("args.src->shape is NULL");
  std::vector<DimSpec> src_dims(static_cast<size_t>(src.ndim), DimSpec{"", kAnyExtent});
  for (int32_t axis = 0; axis + 1 < src.ndim; ++axis) src_dims[static_cast<size_t>(axis)].name = kRowDimNames[axis];
  src_dims.back().name = "D";
  TensorRule src_rule = make_rule("args.src", src_dims, kFloatElems, "float16, bfloat16 or float32");
  src_rule.contiguous_last = true;
  const Placement placement{kDLCPU, src.device.device_id, 0};

  Quantization q;
  q.src = canonical_view(src, src_rule, placement);
  q.rows.rank = q.src.ndim - 1;
  for (int32_t axis = 0; axis < q.rows.rank; ++axis) {
    q.rows.shape[axis] = q.src.shape[axis];
    q.rows.count = checked_product({q.rows.count, q.rows.shape[axis]}, "the row count of args.src");
  }
  q.head_dim = q.src.shape[q.rows.rank];
  if (q.head_dim == 0) invalid("args.src has D = 0 (its last dim); there is nothing to quantise in a row");

  std::vector<DimSpec> dst_dims = row_dims(q.rows, 0);
  if (!fp8) {
    q.groups = args.kv_quant_groups == 0 ? 1 : args.kv_quant_groups;
    if (q.head_dim % (kNibblesPerWord * q.groups) != 0)
      invalid(cat("args.src has D = ", q.head_dim, "; int4 with args.kv_quant_groups = ", q.groups,
                  " needs D to be a multiple of 8 * groups = ", kNibblesPerWord * q.groups));
    dst_dims.push_back({"groups + D/8", q.groups + q.head_dim / kNibblesPerWord});
    TensorRule dst_rule =
        make_rule("args.dst", dst_dims, elem_bit(FMHA_ELEM_I32), "int32 (args.kv_quant = FMHA_KV_QUANT_INT4)");
    dst_rule.contiguous_last = true;
    q.dst = canonical_view(*args.dst, dst_rule, placement);
    return q;
  }

  dst_dims.push_back({"D", q.head_dim});
  // The fp8 DLPack codes name their format; said here in terms of args
  // (canonical_view would name the problem's field).
  const DLDataType dst_dtype = args.dst->dtype;
  if (dst_dtype.bits == 8 && (dst_dtype.code == kFp8CodeE4m3fn || dst_dtype.code == kFp8CodeE4m3fn + 1) &&
      dst_dtype.code - kFp8CodeE4m3fn != args.fp8_format)
    invalid(cat("args.dst has dtype ", dl_dtype_string(dst_dtype), " but args.fp8_format = ", args.fp8_format, " (",
                fp8_format_name(args.fp8_format), ")"));
  const std::string dst_text = cat("fp8 codes: uint8, float8 code ", kFp8CodeE4m3fn + args.fp8_format, " (",
                                   fp8_format_name(args.fp8_format), ") or int32 words of four");
  TensorRule dst_rule = make_rule("args.dst", dst_dims, elem_bit(FMHA_ELEM_FP8), dst_text.c_str());
  dst_rule.fp8_format = args.fp8_format;
  dst_rule.fp8_words = true;
  dst_rule.contiguous_last = true;
  q.dst = canonical_view(*args.dst, dst_rule, placement);

  const bool f32 = args.kv_scale_kind == FMHA_KV_SCALE_F32;
  const uint32_t scale_elems = elem_bit(f32 ? FMHA_ELEM_F32 : FMHA_ELEM_I32);
  const char *scale_text = f32 ? "float32 (args.kv_scale_kind = FMHA_KV_SCALE_F32)"
                               : "int32 (args.kv_scale_kind = FMHA_KV_SCALE_F16X2_SCALE_SHIFT)";
  TensorRule scale_rule;
  switch (args.scale_granularity) {
    case FMHA_SCALE_PER_ROW:
      q.scale_dims = q.rows.rank;
      scale_rule = make_rule("args.scale", row_dims(q.rows, 0), scale_elems, scale_text);
      break;
    case FMHA_SCALE_PER_HEAD: {
      const int32_t rank = args.scale->ndim;
      if (rank < 1 || rank > 2 || rank > q.rows.rank)
        invalid(cat("args.scale has ndim = ", rank,
                    "; per-head scales are [G, Hkv] or [Hkv], the last two or one "
                    "dims of args.src before D (args.src has shape ",
                    shape_string(src.shape, src.ndim), ")"));
      q.scale_dims = rank;
      scale_rule = make_rule("args.scale", row_dims(q.rows, q.rows.rank - rank), scale_elems, scale_text);
      break;
    }
    default:
      q.scale_dims = 0;
      scale_rule = make_rule("args.scale", {{"1", 1}}, scale_elems, scale_text);
      break;
  }
  // A single row's (or the tensor's) scale may be 0-d.
  if (scale_rule.dims.empty()) scale_rule.dims.push_back({"1", 1});
  scale_rule.scalar_ok = scale_rule.dims.size() == 1 && scale_rule.dims[0].extent == 1;
  q.scale = canonical_view(*args.scale, scale_rule, placement);
  return q;
}

uint8_t *row_address(const fmha_view &view, const int64_t *index, int32_t rank) {
  return static_cast<uint8_t *>(view.data) + offset_of(view, index, rank) * elem_bytes(view.elem);
}

void store_u32(const fmha_view &view, int64_t element, uint32_t value) {
  std::memcpy(static_cast<uint8_t *>(view.data) + element * 4, &value, sizeof value);
}

// int4: every group's scale/shift is computed (and checked) before the
// first word is written, so a refused input leaves dst untouched.
void quantize_int4(const Quantization &q) {
  const int64_t group_size = q.head_dim / q.groups;
  const int32_t rank = q.rows.rank;
  std::vector<float> values(static_cast<size_t>(q.head_dim));
  std::vector<uint32_t> params(static_cast<size_t>(q.rows.count * q.groups));
  size_t next = 0;
  for_each_row(q.rows, [&](const int64_t *index) {
    cpu::load_row(row_address(q.src, index, rank), q.src.elem, q.head_dim, values.data());
    for (int32_t group = 0; group < q.groups; ++group) {
      const float *begin = values.data() + group * group_size;
      const auto [low, high] = std::minmax_element(begin, begin + group_size);
      const bool finite = std::all_of(begin, begin + group_size, [](float x) { return std::isfinite(x); });
      if (!finite)
        invalid(cat("args.src row ", index_string(index, rank), " group ", group,
                    " holds NaN or infinity; int4 needs finite values"));
      // shift rounds down and scale up, so that shift + 15 * scale >= max:
      // the 16 levels cover the group although both are stored in fp16.
      const uint16_t shift = half_round_down(*low);
      const double span = static_cast<double>(*high) - static_cast<double>(half_to_float(shift));
      const uint16_t scale = half_round_up(span / kInt4Levels);
      if (!half_is_finite(shift) || !half_is_finite(scale))
        invalid(cat("args.src row ", index_string(index, rank), " group ", group, " spans [", *low, ", ", *high,
                    "], beyond the fp16 range of the int4 scale and shift"));
      params[next++] = static_cast<uint32_t>(scale) | static_cast<uint32_t>(shift) << 16;
    }
  });

  next = 0;
  std::vector<uint32_t> words(static_cast<size_t>(q.groups + q.head_dim / kNibblesPerWord));
  for_each_row(q.rows, [&](const int64_t *index) {
    cpu::load_row(row_address(q.src, index, rank), q.src.elem, q.head_dim, values.data());
    std::fill(words.begin(), words.end(), 0u);
    for (int32_t group = 0; group < q.groups; ++group) {
      const uint32_t word = params[next++];
      words[static_cast<size_t>(group)] = word;
      const double scale = half_to_float(static_cast<uint16_t>(word & 0xffffu));
      const double shift = half_to_float(static_cast<uint16_t>(word >> 16));
      for (int64_t d = group * group_size; d < (group + 1) * group_size; ++d) {
        const double level = scale == 0 ? 0 : std::nearbyint((values[static_cast<size_t>(d)] - shift) / scale);
        const auto nibble = static_cast<uint32_t>(std::clamp(level, 0.0, static_cast<double>(kInt4Levels)));
        words[static_cast<size_t>(q.groups + d / kNibblesPerWord)] |= nibble << (4 * (d % kNibblesPerWord));
      }
    }
    std::memcpy(row_address(q.dst, index, rank), words.data(), words.size() * 4);
  });
}

// fp8: amax per scale entry first (and the fp16 scales checked), then codes
// and scales are written.
void quantize_fp8(const Quantization &q, const fmha_quantize_kv_args &args) {
  const Fp8Format format = fp8_format_of(args.fp8_format);
  const bool f16x2 = args.kv_scale_kind == FMHA_KV_SCALE_F16X2_SCALE_SHIFT;
  const int32_t rank = q.rows.rank;
  Rows slots;  // the scale entries, indexed by the last scale_dims row dims
  slots.rank = q.scale_dims;
  for (int32_t axis = 0; axis < slots.rank; ++axis) {
    slots.shape[axis] = q.rows.shape[rank - slots.rank + axis];
    slots.count *= slots.shape[axis];
  }
  const auto slot_of = [&](const int64_t *index) {
    int64_t slot = 0;
    for (int32_t axis = 0; axis < slots.rank; ++axis) slot = slot * slots.shape[axis] + index[rank - slots.rank + axis];
    return slot;
  };

  std::vector<float> values(static_cast<size_t>(q.head_dim));
  std::vector<float> amax(static_cast<size_t>(slots.count), 0.0f);
  for_each_row(q.rows, [&](const int64_t *index) {
    cpu::load_row(row_address(q.src, index, rank), q.src.elem, q.head_dim, values.data());
    float &slot_amax = amax[static_cast<size_t>(slot_of(index))];
    for (float x : values)
      if (std::isfinite(x)) slot_amax = std::max(slot_amax, std::fabs(x));
  });

  std::vector<float> scales(amax.size());
  std::vector<uint32_t> scale_words(amax.size());
  for (size_t slot = 0; slot < amax.size(); ++slot) {
    float scale = amax[slot] == 0 ? 1.0f : amax[slot] / format.max_value;
    // A subnormal amax can underflow the division; the smallest scale still
    // maps it to a code (saturated), never to a division by zero.
    if (scale == 0) scale = std::numeric_limits<float>::denorm_min();
    if (f16x2) {
      // Rounding up keeps amax / scale within fp8_max.
      const uint16_t half = half_round_up(scale);
      if (!half_is_finite(half))
        invalid(cat("args.src has amax ", amax[slot], ": the scale amax / ", format.max_value, " = ", scale,
                    " exceeds fp16, the scale type of args.kv_scale_kind = FMHA_KV_SCALE_F16X2_SCALE_SHIFT "
                    "(use FMHA_KV_SCALE_F32)"));
      scale = half_to_float(half);
      scale_words[slot] = half;  // shift 0 in the high half
    }
    scales[slot] = scale;
  }

  for_each_row(q.rows, [&](const int64_t *index) {
    cpu::load_row(row_address(q.src, index, rank), q.src.elem, q.head_dim, values.data());
    const float scale = scales[static_cast<size_t>(slot_of(index))];
    uint8_t *codes = row_address(q.dst, index, rank);
    for (int64_t d = 0; d < q.head_dim; ++d) codes[d] = encode_fp8(values[static_cast<size_t>(d)] / scale, format);
  });
  int64_t slot = 0;
  for_each_row(slots, [&](const int64_t *index) {
    const int64_t element = offset_of(q.scale, index, slots.rank);
    if (f16x2) {
      store_u32(q.scale, element, scale_words[static_cast<size_t>(slot)]);
    } else {
      std::memcpy(static_cast<uint8_t *>(q.scale.data) + element * 4, &scales[static_cast<size_t>(slot)], 4);
    }
    ++slot;
  });
}

}  // namespace

void quantize_kv(const fmha_quantize_kv_args &args) {
  const Quantization q = validate(args);
  if (args.kv_quant == FMHA_KV_QUANT_INT4) {
    quantize_int4(q);
  } else {
    quantize_fp8(q, args);
  }
}

}  // namespace fmha::core
