#include "features/harness.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "oracle/quant.h"

namespace fmha_test {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::vector<size_t> identity_order(size_t rank) {
  std::vector<size_t> order(rank);
  std::iota(order.begin(), order.end(), size_t{0});
  return order;
}

// Drops the group dim (index `g_dim`) for the 4-D forms.
std::vector<int64_t> with_groups(std::vector<int64_t> shape, size_t g_dim, bool four_d) {
  if (four_d) shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(g_dim));
  return shape;
}
std::vector<int64_t> index_with_groups(std::vector<int64_t> index, size_t g_dim, bool four_d) {
  if (four_d) index.erase(index.begin() + static_cast<std::ptrdiff_t>(g_dim));
  return index;
}

int32_t fmha_dtype_of(Dtype t) {
  switch (t) {
    case Dtype::f16:
      return FMHA_DTYPE_F16;
    case Dtype::bf16:
      return FMHA_DTYPE_BF16;
    case Dtype::f32:
      return FMHA_DTYPE_F32;
    default:
      return FMHA_DTYPE_DEFAULT;
  }
}

double round_to(Dtype t, double x) {
  switch (t) {
    case Dtype::f16:
      return half_bits_to_float(float_to_half_bits(static_cast<float>(x)));
    case Dtype::bf16:
      return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(x)));
    case Dtype::f32:
      return static_cast<float>(x);
    default:
      return x;
  }
}

// The elements of a tensor in logical row-major order, as flat offsets.
std::vector<int64_t> element_offsets(const Tensor &t) {
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(t.numel()));
  t.for_each_index([&](const std::vector<int64_t> &i) { offsets.push_back(t.offset(i)); });
  return offsets;
}

// DLPack 1.1 type code of e4m3fn; e4m3fnuz is the next (the offset is the
// fmha_fp8_format).
constexpr uint8_t kDlpackFp8E4m3fn = 10;

// fp16 NaN in both halves of a scale/shift word.
constexpr uint32_t kHalfNanPair = 0x7e007e00u;

std::vector<int64_t> leading_shape(const Tensor &t) { return {t.shape().begin(), t.shape().end() - 1}; }

// Calls f(row) for the index of every row of `t` (all dims but the last),
// row-major: a throwaway tensor of the leading shape walks them.
template <class F>
void for_each_row(const Tensor &t, F &&f) {
  Tensor(Dtype::u8, leading_shape(t)).for_each_index(f);
}

std::vector<double> row_values(const Tensor &t, std::vector<int64_t> index) {
  std::vector<double> row(static_cast<size_t>(t.shape().back()));
  index.push_back(0);
  for (size_t d = 0; d < row.size(); ++d) {
    index.back() = static_cast<int64_t>(d);
    row[d] = t.get(index);
  }
  return row;
}

// An int32 element holding the bits `word`.
double word_value(uint32_t word) {
  int32_t value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

uint16_t half_bits(double x) { return float_to_half_bits(static_cast<float>(x)); }

// Row- or group-wise int4 (DESIGN 5.6): per group, scale = (max - min) / 15
// and shift = min in fp16, nibble = round((x - shift) / scale). A group
// holding NaN (nan_padding rows) gets NaN for its scale and shift.
Tensor pack_int4(const Tensor &t, int32_t groups) {
  const int64_t head_dim = t.shape().back(), per_group = head_dim / groups;
  std::vector<int64_t> shape = t.shape();
  shape.back() = groups + head_dim / 8;
  Tensor packed(Dtype::i32, shape);
  for_each_row(t, [&](const std::vector<int64_t> &row) {
    const std::vector<double> x = row_values(t, row);
    std::vector<uint32_t> words(static_cast<size_t>(shape.back()), 0);
    for (int64_t g = 0; g < groups; ++g) {
      const auto first = x.begin() + g * per_group, last = first + per_group;
      if (std::any_of(first, last, [](double v) { return std::isnan(v); })) {
        words[static_cast<size_t>(g)] = kHalfNanPair;
        continue;
      }
      const double lo = *std::min_element(first, last), hi = *std::max_element(first, last);
      const uint16_t scale = half_bits(hi > lo ? (hi - lo) / 15.0 : 1.0), shift = half_bits(lo);
      words[static_cast<size_t>(g)] = scale | static_cast<uint32_t>(shift) << 16;
      const double s = half_bits_to_float(scale), t0 = half_bits_to_float(shift);
      for (int64_t d = g * per_group; d < (g + 1) * per_group; ++d) {
        const auto nibble =
            static_cast<uint32_t>(std::clamp(std::lround((x[static_cast<size_t>(d)] - t0) / s), 0L, 15L));
        words[static_cast<size_t>(groups + d / 8)] |= nibble << (4 * (d % 8));
      }
    }
    std::vector<int64_t> index = row;
    index.push_back(0);
    for (size_t w = 0; w < words.size(); ++w) {
      index.back() = static_cast<int64_t>(w);
      packed.set(index, word_value(words[w]));
    }
  });
  return packed;
}

// The finite fp8 code nearest to x (saturating at the largest magnitude);
// the format's NaN for NaN.
uint8_t nearest_fp8(double x, int32_t format) {
  if (std::isnan(x)) return format == FMHA_FP8_E4M3FN ? 0x7f : 0x80;
  static const auto table = [] {
    std::vector<std::vector<std::pair<double, uint8_t>>> by_format(2);
    for (int32_t f = 0; f < 2; ++f) {
      for (int code = 0; code < 256; ++code) {
        const double value = fmha_oracle::fp8_value(static_cast<uint8_t>(code), f);
        if (!std::isnan(value)) by_format[static_cast<size_t>(f)].push_back({value, static_cast<uint8_t>(code)});
      }
      std::sort(by_format[static_cast<size_t>(f)].begin(), by_format[static_cast<size_t>(f)].end());
    }
    return by_format;
  }();
  const std::vector<std::pair<double, uint8_t>> &codes = table[static_cast<size_t>(format)];
  auto above = std::lower_bound(codes.begin(), codes.end(), std::make_pair(x, uint8_t{0}));
  if (above == codes.end()) return codes.back().second;
  if (above == codes.begin()) return above->second;
  const auto below = above - 1;
  return x - below->first < above->first - x ? below->second : above->second;
}

struct Fp8Quantised {
  Tensor codes, scale;
};

// fp8 with scales of `granularity` (the head dims are the last `head_dims`
// leading dims): with a shift (fp16x2 words), the cell's range is centred
// and its half-width maps to the format's largest value; without (float32),
// its largest magnitude does. NaN values (nan_padding rows) are left out of
// the ranges and become NaN codes; a per-row cell of NaN only gets a NaN
// shift (fp16x2) or an infinite scale (float32).
Fp8Quantised quantise_fp8(const Tensor &t, int32_t format, bool with_shift, int32_t granularity, size_t head_dims,
                          Fp8Storage storage) {
  const std::vector<int64_t> lead = leading_shape(t);
  std::vector<int64_t> scale_shape{1};
  if (granularity == FMHA_SCALE_PER_ROW) scale_shape = lead;
  if (granularity == FMHA_SCALE_PER_HEAD)
    scale_shape.assign(lead.end() - static_cast<std::ptrdiff_t>(head_dims), lead.end());
  Fp8Quantised out{Tensor(Dtype::u8, t.shape()), Tensor(with_shift ? Dtype::i32 : Dtype::f32, scale_shape)};
  // Per cell (flat, in out.scale's contiguous order): range, then the
  // scale and shift as stored.
  const auto cells = static_cast<size_t>(out.scale.numel());
  std::vector<double> lo(cells, INFINITY), hi(cells, -INFINITY), scale(cells), shift(cells, 0.0);
  auto cell_of = [&](const std::vector<int64_t> &row) {
    if (granularity == FMHA_SCALE_PER_TENSOR) return size_t{0};
    const std::vector<int64_t> cell =
        granularity == FMHA_SCALE_PER_ROW
            ? row
            : std::vector<int64_t>(row.end() - static_cast<std::ptrdiff_t>(head_dims), row.end());
    return static_cast<size_t>(out.scale.offset(cell));
  };
  for_each_row(t, [&](const std::vector<int64_t> &row) {
    const size_t cell = cell_of(row);
    for (double x : row_values(t, row)) lo[cell] = std::min(lo[cell], x), hi[cell] = std::max(hi[cell], x);
  });
  const double largest = format == FMHA_FP8_E4M3FN ? 448.0 : 240.0;
  for (size_t cell = 0; cell < cells; ++cell) {
    if (with_shift) {
      const uint16_t s = half_bits(std::max((hi[cell] - lo[cell]) / 2.0, 1e-3) / largest);
      const uint16_t c = half_bits((hi[cell] + lo[cell]) / 2.0);
      out.scale.set_at(static_cast<int64_t>(cell), word_value(s | static_cast<uint32_t>(c) << 16));
      scale[cell] = half_bits_to_float(s);
      shift[cell] = half_bits_to_float(c);
    } else {
      const auto s = static_cast<float>(std::max({std::fabs(lo[cell]), std::fabs(hi[cell]), 1e-3}) / largest);
      out.scale.set_at(static_cast<int64_t>(cell), s);
      scale[cell] = s;
    }
  }
  for_each_row(t, [&](const std::vector<int64_t> &row) {
    const size_t cell = cell_of(row);
    const std::vector<double> x = row_values(t, row);
    std::vector<int64_t> index = row;
    index.push_back(0);
    for (size_t d = 0; d < x.size(); ++d) {
      index.back() = static_cast<int64_t>(d);
      out.codes.set(index, nearest_fp8((x[d] - shift[cell]) / scale[cell], format));
    }
  });
  if (storage != Fp8Storage::words) return out;
  std::vector<int64_t> word_shape = t.shape();
  word_shape.back() /= 4;
  Tensor words(Dtype::i32, word_shape);
  for_each_row(t, [&](const std::vector<int64_t> &row) {
    const std::vector<double> bytes = row_values(out.codes, row);
    std::vector<int64_t> index = row;
    index.push_back(0);
    for (int64_t w = 0; w < word_shape.back(); ++w) {
      uint32_t word = 0;
      for (int64_t j = 0; j < 4; ++j) word |= static_cast<uint32_t>(bytes[static_cast<size_t>(4 * w + j)]) << (8 * j);
      index.back() = w;
      words.set(index, word_value(word));
    }
  });
  out.codes = words;
  return out;
}

// A copy of `t` whose innermost dim is followed by `pad` elements of
// poison (0xff: an fp8 NaN code, a NaN of any float type), so that reading
// past a row shows.
Tensor with_padded_rows(const Tensor &t, int64_t pad) {
  Tensor out(t.dtype(), t.shape(), strides_for(t.shape(), identity_order(t.shape().size()), pad));
  out.poison();
  t.for_each_index([&](const std::vector<int64_t> &i) { out.set(i, t.get(i)); });
  return out;
}

// Turns a built case's K/V (and, with fp8_qk, Q) into the quantised inputs
// it names, fills the problem's quantisation fields and keeps the
// dequantised tensors for the oracle.
void quantise_inputs(AttentionData &d) {
  const AttentionCase &spec = d.spec;
  if (spec.kv_quant == FMHA_KV_QUANT_NONE && !spec.v_from_k && !spec.fp8_qk && !spec.fp8_pv) return;
  if (spec.kv_quant != FMHA_KV_QUANT_NONE && (spec.strided_kv || spec.kv_head_stride0))
    throw std::invalid_argument("harness: quantised K/V need contiguous K/V with distinct heads");
  if (spec.fp8_rows_4byte_aligned && (spec.kv_quant != FMHA_KV_QUANT_FP8 || spec.fp8_storage == Fp8Storage::words))
    throw std::invalid_argument("harness: 4-byte aligned rows are for fp8 K/V stored as bytes");
  fmha_splitk_problem &p = d.problem;
  const size_t head_dims = spec.four_d ? 1 : 2;
  if (spec.v_from_k) {
    p.flags |= FMHA_FLAG_V_FROM_K;
    p.head_dim_v = spec.head_dim_v;
    d.v.reset();
  }
  p.kv_quant = spec.kv_quant;
  if (spec.kv_quant == FMHA_KV_QUANT_INT4) {
    p.kv_quant_groups = spec.kv_quant_groups;
    for (auto [packed, ref] : {std::make_pair(&d.k, &d.k_ref), std::make_pair(&d.v, &d.v_ref)}) {
      if (!*packed) continue;
      *packed = pack_int4(**packed, spec.kv_quant_groups);
      *ref = fmha_oracle::dequantise_int4(**packed, spec.kv_quant_groups);
    }
  } else if (spec.kv_quant == FMHA_KV_QUANT_FP8) {
    p.fp8_format = spec.fp8_format;
    p.kv_scale_kind = spec.kv_scale_kind;
    p.kv_scale_granularity = spec.kv_scale_granularity;
    const bool shift = spec.kv_scale_kind == FMHA_KV_SCALE_F16X2_SCALE_SHIFT;
    for (auto [codes, scale, ref] :
         {std::make_tuple(&d.k, &d.k_scale, &d.k_ref), std::make_tuple(&d.v, &d.v_scale, &d.v_ref)}) {
      if (!*codes) continue;
      Fp8Quantised q =
          quantise_fp8(**codes, spec.fp8_format, shift, spec.kv_scale_granularity, head_dims, spec.fp8_storage);
      *codes = std::move(q.codes);
      *scale = std::move(q.scale);
      *ref = fmha_oracle::dequantise_fp8(**codes, spec.fp8_format, **scale, spec.kv_scale_granularity);
      if (spec.fp8_rows_4byte_aligned) *codes = with_padded_rows(**codes, 4);
    }
  }
  if (spec.v_from_k) d.v_ref = fmha_oracle::leading_dims(d.k_ref ? *d.k_ref : *d.k, spec.head_dim_v);
  if (spec.fp8_qk) {
    if (spec.dtype != Dtype::bf16) throw std::invalid_argument("harness: fp8 Q cases use bf16 (fp8 Q's natural type)");
    p.q_dtype = FMHA_DTYPE_FP8;
    p.flags |= FMHA_FLAG_FP8_QK;
    p.q_scale_granularity = spec.q_scale_granularity;
    Fp8Quantised q = quantise_fp8(*d.q, spec.fp8_format, false, spec.q_scale_granularity, head_dims, spec.fp8_storage);
    d.q = std::move(q.codes);
    d.q_scale = std::move(q.scale);
    d.q_ref = fmha_oracle::dequantise_fp8(*d.q, spec.fp8_format, *d.q_scale, spec.q_scale_granularity);
  }
  if (spec.fp8_pv) p.flags |= FMHA_FLAG_FP8_PV;
}

}  // namespace

std::vector<int64_t> strides_for(const std::vector<int64_t> &shape, const std::vector<size_t> &order, int64_t pad) {
  std::vector<int64_t> strides(shape.size(), 0);
  int64_t running = 1;
  for (size_t k = order.size(); k-- > 0;) {
    strides[order[k]] = running;
    running *= std::max<int64_t>(shape[order[k]], 1) + (k + 1 == order.size() ? pad : 0);
  }
  return strides;
}

Tensor int_tensor(const std::vector<int32_t> &values, std::vector<int64_t> shape) {
  Tensor t(Dtype::i32, std::move(shape));
  t.fill_int(values);
  return t;
}

uint64_t fresh_seed() {
  if (const char *env = std::getenv("FMHA_TEST_SEED")) return std::strtoull(env, nullptr, 0);
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

std::string seed_note(uint64_t seed) {
  return "random data seed " + std::to_string(seed) + " (replay with FMHA_TEST_SEED=" + std::to_string(seed) + ")";
}

std::string dtype_name(Dtype t) {
  switch (t) {
    case Dtype::f16:
      return "f16";
    case Dtype::bf16:
      return "bf16";
    case Dtype::f32:
      return "f32";
    case Dtype::f64:
      return "f64";
    case Dtype::i32:
      return "i32";
    case Dtype::u8:
      return "u8";
  }
  return "?";
}

Dtype output_dtype(const AttentionCase &spec) {
  switch (spec.o_dtype) {
    case FMHA_DTYPE_F16:
      return Dtype::f16;
    case FMHA_DTYPE_BF16:
      return Dtype::bf16;
    case FMHA_DTYPE_F32:
      return Dtype::f32;
    default:
      return spec.dtype;
  }
}

std::string AttentionCase::describe() const {
  static const char *const kv_layouts[] = {"dense", "padded", "gappy", "paged", "ragged"};
  static const char *const masks[] = {"none", "causal", "local", "causal_local"};
  std::ostringstream s;
  s << "case " << name << ": " << dtype_name(dtype) << "->" << dtype_name(output_dtype(*this))
    << (q_layout == FMHA_Q_VARLEN ? " varlen-q" : "") << " kv=" << kv_layouts[kv_layout];
  if (kv_layout == FMHA_KV_PAGED || kv_layout == FMHA_KV_RAGGED)
    s << " page_size=" << page_size << (kv_page_dim ? " [pages,ps,...]" : " [rows,...]")
      << (paged_seqstart ? " +seqstart" : "") << (kv_layout == FMHA_KV_RAGGED && !last_page_len ? " no-last-len" : "");
  s << " kv_len={";
  for (size_t b = 0; b < kv_len.size(); ++b) s << (b ? "," : "") << kv_len[b];
  s << "} q_len={";
  for (size_t b = 0; b < q_len.size(); ++b) s << (b ? "," : "") << q_len[b];
  s << "} G=" << groups << " Hq=" << heads_q << " Hkv=" << heads_kv << (kv_head_stride0 ? " (stride-0 heads)" : "")
    << (four_d ? " 4-D" : " 5-D") << " D=" << head_dim << " mask=" << masks[mask];
  if (mask == FMHA_MASK_LOCAL || mask == FMHA_MASK_CAUSAL_LOCAL) s << "(" << window_left << "," << window_right << ")";
  if (bias) s << " bias(" << dtype_name(bias_dtype) << (bias_masks_first_row ? ", row 0 -inf" : "") << ")";
  if (softcap > 0) s << " softcap=" << softcap;
  if (sinks) s << " sinks";
  if (softmax_scale != 0) s << " scale=" << softmax_scale;
  s << " split_k=" << split_k;
  if (batch_invariant) s << " batch-invariant(chunk " << kv_chunk_size << ")";
  if (length_hint) s << (stale_length_hint ? " stale-hint" : " hint");
  s << (lse ? " lse" : " no-lse") << (null_workspace ? " null-workspace" : "") << (strided_q_o ? " strided-q/o" : "")
    << (strided_kv ? " strided-kv" : "") << (strided_lse ? " strided-lse" : "")
    << (write_partials ? " write-partials" : "") << (nan_padding ? " NaN-padding" : "");
  static const char *const granularities[] = {"per-row", "per-head", "per-tensor"};
  static const char *const storages[] = {"uint8", "dlpack-fp8", "int32-words"};
  const char *format = fp8_format == FMHA_FP8_E4M3FN ? "e4m3fn" : "e4m3fnuz";
  if (kv_quant == FMHA_KV_QUANT_INT4) s << " int4(groups " << kv_quant_groups << ")";
  if (kv_quant == FMHA_KV_QUANT_FP8)
    s << " fp8-kv(" << format << ", " << (kv_scale_kind == FMHA_KV_SCALE_F32 ? "f32" : "f16x2") << " "
      << granularities[kv_scale_granularity] << " scales, " << storages[static_cast<int>(fp8_storage)]
      << (fp8_rows_4byte_aligned ? ", rows 4-byte aligned" : "") << ")";
  if (fp8_qk) s << " FP8_QK(q_scale " << granularities[q_scale_granularity] << ")";
  if (fp8_pv) s << " FP8_PV";
  if (v_from_k) s << " V_FROM_K(Dv " << head_dim_v << ")";
  if (error_bound > 0) s << " bound=" << error_bound;
  return s.str();
}

void PrintTo(const AttentionCase &spec, std::ostream *os) { *os << spec.describe(); }

std::unique_ptr<AttentionData> build_attention(const AttentionCase &spec, uint64_t seed) {
  auto data = std::make_unique<AttentionData>();
  data->spec = spec;
  AttentionData &d = *data;
  // Values and layout draw from separate streams, so the same seed gives the
  // same logical data in every layout (the oracle self-tests rely on it).
  std::mt19937_64 values(seed), layout(seed ^ 0x9e3779b97f4a7c15ull);
  auto uniform_int = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(layout); };

  const int64_t B = spec.batch(), G = spec.groups, Hq = spec.heads_q, D = spec.head_dim;
  const int64_t Hkv = spec.heads_kv;  // distinct K/V heads
  const int64_t Hk_tensor = spec.kv_head_stride0 ? Hq : Hkv;
  const bool paged = spec.kv_layout == FMHA_KV_PAGED || spec.kv_layout == FMHA_KV_RAGGED;
  const int64_t ps = paged ? spec.page_size : 0;
  if (spec.four_d && G != 1) throw std::invalid_argument("harness: 4-D forms need groups == 1");

  d.kv_len = spec.kv_len;
  if (spec.kv_layout == FMHA_KV_RAGGED && !spec.last_page_len)
    for (int32_t &len : d.kv_len) len = static_cast<int32_t>((len + ps - 1) / ps * ps);
  if (spec.kv_layout == FMHA_KV_DENSE)
    for (int32_t len : d.kv_len)
      if (len != d.kv_len[0]) throw std::invalid_argument("harness: DENSE needs equal lengths");
  std::vector<int64_t> q_len(static_cast<size_t>(B)), q_start(static_cast<size_t>(B));
  int64_t total_q = 0, max_q = 0;
  for (int64_t b = 0; b < B; ++b) {
    q_len[b] = spec.q_layout == FMHA_Q_FIXED ? spec.q_len.at(0) : spec.q_len.at(static_cast<size_t>(b));
    q_start[b] = total_q;
    total_q += q_len[b];
    max_q = std::max(max_q, q_len[b]);
  }
  if (spec.q_layout == FMHA_Q_FIXED) max_q = spec.q_len.at(0);
  int64_t max_kv = 0;
  for (int32_t len : d.kv_len) max_kv = std::max<int64_t>(max_kv, len);

  // Logical values: Q [B][Mq_b][G][Hq][D]; K, V [B][L_b][G][Hkv][D].
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> q_values(static_cast<size_t>(total_q * G * Hq * D));
  for (double &x : q_values) x = spec.q_amplitude * normal(values);
  std::vector<int64_t> kv_start(static_cast<size_t>(B));
  int64_t total_kv = 0;
  for (int64_t b = 0; b < B; ++b) {
    kv_start[b] = total_kv;
    total_kv += d.kv_len[b];
  }
  std::vector<double> k_values(static_cast<size_t>(total_kv * G * Hkv * D)), v_values(k_values.size());
  for (double &x : k_values) x = normal(values);
  for (double &x : v_values) x = normal(values);
  auto kv_index = [&](int64_t b, int64_t j, int64_t g, int64_t h) {
    return static_cast<size_t>((((kv_start[b] + j) * G + g) * Hkv + h) * D);
  };
  // V rows of magnitudes 2^-spread .. 2^spread (per-row V scales far apart).
  if (spec.v_row_spread > 0)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < d.kv_len[b]; ++j)
        for (int64_t g = 0; g < G; ++g)
          for (int64_t h = 0; h < Hkv; ++h) {
            const int span = 2 * spec.v_row_spread + 1;
            const double factor = std::ldexp(1.0, static_cast<int>((5 * j + 3 * b + h) % span) - spec.v_row_spread);
            for (int64_t x = 0; x < D; ++x) v_values[kv_index(b, j, g, h) + static_cast<size_t>(x)] *= factor;
          }

  // Problem.
  fmha_splitk_problem &p = d.problem;
  p.batch = B;
  p.max_q_seqlen = max_q;
  p.groups = static_cast<int32_t>(G);
  p.heads_q = static_cast<int32_t>(Hq);
  p.heads_kv = static_cast<int32_t>(Hkv);
  p.head_dim_qk = static_cast<int32_t>(D);
  p.q_layout = spec.q_layout;
  p.kv_layout = spec.kv_layout;
  p.page_size = paged ? spec.page_size : 0;
  p.q_dtype = fmha_dtype_of(spec.dtype);
  p.kv_dtype = fmha_dtype_of(spec.dtype);
  p.o_dtype = spec.o_dtype;
  p.mask = spec.mask;
  p.window_left = spec.window_left;
  p.window_right = spec.window_right;
  p.has_bias = spec.bias;
  p.has_sinks = spec.sinks;
  p.softmax_scale = spec.softmax_scale;
  p.softcap = spec.softcap;
  p.split_k = spec.split_k;
  p.kv_chunk_size = spec.kv_chunk_size;
  if (spec.batch_invariant) p.flags |= FMHA_FLAG_BATCH_INVARIANT;
  if (spec.write_partials) p.flags |= FMHA_FLAG_WRITE_PARTIALS;

  // Q.
  {
    const int64_t rows_b = spec.q_layout == FMHA_Q_FIXED ? B : 1;
    const int64_t rows_m = spec.q_layout == FMHA_Q_FIXED ? max_q : total_q;
    const std::vector<int64_t> shape = with_groups({rows_b, rows_m, G, Hq, D}, 2, spec.four_d);
    d.q.emplace(spec.dtype, shape, strides_for(shape, identity_order(shape.size()), spec.strided_q_o ? 8 : 0));
    d.q->poison();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < q_len[b]; ++i) {
        const int64_t rb = spec.q_layout == FMHA_Q_FIXED ? b : 0;
        const int64_t rm = spec.q_layout == FMHA_Q_FIXED ? i : q_start[b] + i;
        for (int64_t g = 0; g < G; ++g)
          for (int64_t h = 0; h < Hq; ++h)
            for (int64_t x = 0; x < D; ++x)
              d.q->set(index_with_groups({rb, rm, g, h, x}, 2, spec.four_d),
                       q_values[static_cast<size_t>((((q_start[b] + i) * G + g) * Hq + h) * D + x)]);
      }
    if (spec.q_layout == FMHA_Q_VARLEN) {
      std::vector<int32_t> starts;
      for (int64_t b = 0; b < B; ++b) starts.push_back(static_cast<int32_t>(q_start[b]));
      starts.push_back(static_cast<int32_t>(total_q));
      d.q_seqstart = int_tensor(starts, {B + 1});
    }
  }

  // Where each logical key lives: (dim-0 index, dim-1 index) of K/V.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> key_rows(static_cast<size_t>(B));
  std::vector<int64_t> kv_shape_rows;  // the leading (row) dims of K/V
  bool two_row_dims = true;
  switch (spec.kv_layout) {
    case FMHA_KV_DENSE:
    case FMHA_KV_PADDED: {
      const int64_t capacity = spec.kv_layout == FMHA_KV_DENSE ? max_kv : max_kv + spec.padded_extra;
      kv_shape_rows = {B, capacity};
      p.max_kv_seqlen = capacity;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < d.kv_len[b]; ++j) key_rows[b].push_back({b, j});
      break;
    }
    case FMHA_KV_GAPPY: {
      // Sequences in a random order with random gaps between them.
      std::vector<int64_t> order(static_cast<size_t>(B));
      std::iota(order.begin(), order.end(), int64_t{0});
      std::shuffle(order.begin(), order.end(), layout);
      std::vector<int32_t> starts(static_cast<size_t>(B));
      int64_t cursor = uniform_int(0, 7);
      for (int64_t b : order) {
        starts[b] = static_cast<int32_t>(cursor);
        for (int64_t j = 0; j < d.kv_len[b]; ++j) key_rows[b].push_back({0, cursor + j});
        cursor += d.kv_len[b] + uniform_int(0, 7);
      }
      kv_shape_rows = {1, cursor};
      p.max_kv_seqlen = max_kv;
      d.kv_seqstart = int_tensor(starts, {B});
      break;
    }
    case FMHA_KV_PAGED:
    case FMHA_KV_RAGGED: {
      std::vector<int64_t> start(static_cast<size_t>(B), 0), pages(static_cast<size_t>(B));
      int64_t total_pages = 0, max_pages = 0;
      for (int64_t b = 0; b < B; ++b) {
        if (spec.paged_seqstart) start[b] = uniform_int(0, ps + 3);
        pages[b] = (start[b] + d.kv_len[b] + ps - 1) / ps;
        total_pages += pages[b];
        max_pages = std::max(max_pages, pages[b]);
      }
      const int64_t num_pages = total_pages + 2;  // spare pages nobody uses
      std::vector<int32_t> page_ids(static_cast<size_t>(num_pages));
      std::iota(page_ids.begin(), page_ids.end(), 0);
      std::shuffle(page_ids.begin(), page_ids.end(), layout);
      p.num_pages = num_pages;
      p.max_kv_seqlen = max_kv;
      two_row_dims = spec.kv_page_dim;
      kv_shape_rows = spec.kv_page_dim ? std::vector<int64_t>{num_pages, ps} : std::vector<int64_t>{num_pages * ps};
      size_t next = 0;
      std::vector<std::vector<int32_t>> seq_pages(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t n = 0; n < pages[b]; ++n) seq_pages[b].push_back(page_ids[next++]);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < d.kv_len[b]; ++j) {
          const int64_t pos = start[b] + j, page = seq_pages[b][static_cast<size_t>(pos / ps)];
          key_rows[b].push_back(spec.kv_page_dim ? std::make_pair(page, pos % ps)
                                                 : std::make_pair(page * ps + pos % ps, int64_t{0}));
        }
      if (spec.kv_layout == FMHA_KV_PAGED) {
        const int64_t columns = max_pages + 1;  // a spare column, as tables have
        p.max_pages_per_seq = columns;
        std::vector<int32_t> table(static_cast<size_t>(B * columns));
        for (int64_t b = 0; b < B; ++b)
          for (int64_t n = 0; n < columns; ++n)
            table[static_cast<size_t>(b * columns + n)] = n < pages[b]
                                                              ? seq_pages[b][static_cast<size_t>(n)]
                                                              : static_cast<int32_t>(uniform_int(0, num_pages - 1));
        d.block_table = int_tensor(table, {B, columns});
        d.kv_seqlen = int_tensor(d.kv_len, {B});
        if (spec.paged_seqstart) {
          std::vector<int32_t> starts(start.begin(), start.end());
          d.kv_seqstart = int_tensor(starts, {B});
        }
      } else {
        std::vector<int32_t> indptr{0}, indices, last;
        for (int64_t b = 0; b < B; ++b) {
          for (int32_t id : seq_pages[b]) indices.push_back(id);
          indptr.push_back(static_cast<int32_t>(indices.size()));
          last.push_back(static_cast<int32_t>(d.kv_len[b] == 0 ? ps : d.kv_len[b] - (pages[b] - 1) * ps));
        }
        p.max_pages_per_seq = max_pages;
        d.kv_indptr = int_tensor(indptr, {B + 1});
        d.kv_indices = int_tensor(indices, {static_cast<int64_t>(indices.size())});
        if (spec.last_page_len) d.kv_last_page_len = int_tensor(last, {B});
      }
      break;
    }
    default:
      throw std::invalid_argument("harness: unknown kv_layout");
  }
  if (spec.kv_layout == FMHA_KV_PADDED || spec.kv_layout == FMHA_KV_GAPPY) d.kv_seqlen = int_tensor(d.kv_len, {B});

  // K and V: garbage everywhere (large, so a stray read shows), then the keys.
  {
    const size_t row_dims = kv_shape_rows.size();
    std::vector<int64_t> shape = kv_shape_rows;
    for (int64_t x : {G, Hk_tensor}) shape.push_back(x);
    const size_t g_dim = row_dims;
    std::vector<int64_t> storage_shape = shape;  // stride-0 heads share one head's storage
    if (spec.kv_head_stride0) storage_shape[g_dim + 1] = 1;
    auto make = [&](std::optional<Tensor> &t) {
      std::vector<int64_t> full = shape, storage = storage_shape;
      full.push_back(D);
      storage.push_back(D);
      full = with_groups(full, g_dim, spec.four_d);
      storage = with_groups(storage, g_dim, spec.four_d);
      std::vector<size_t> order = identity_order(full.size());
      int64_t pad = 0;
      if (spec.strided_kv) {
        if (spec.kv_layout == FMHA_KV_DENSE || spec.kv_layout == FMHA_KV_PADDED)
          std::swap(order[0], order[1]);  // sequences interleaved: batch stride smaller than row stride
        else
          pad = 8;  // padded rows
      }
      std::vector<int64_t> strides = strides_for(storage, order, pad);
      if (spec.kv_head_stride0) strides[full.size() - 2] = 0;
      t.emplace(spec.dtype, full, strides);
      std::uniform_real_distribution<double> garbage(-50.0, 50.0);
      const double nan = std::numeric_limits<double>::quiet_NaN();
      t->for_each_index([&](const std::vector<int64_t> &i) { t->set(i, spec.nan_padding ? nan : garbage(layout)); });
    };
    make(d.k);
    make(d.v);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < d.kv_len[b]; ++j) {
        const auto [i0, i1] = key_rows[b][static_cast<size_t>(j)];
        for (int64_t g = 0; g < G; ++g)
          for (int64_t h = 0; h < (spec.kv_head_stride0 ? 1 : Hkv); ++h) {
            std::vector<int64_t> index = two_row_dims ? std::vector<int64_t>{i0, i1} : std::vector<int64_t>{i0};
            for (int64_t x : {g, h}) index.push_back(x);
            index.push_back(0);
            index = index_with_groups(index, g_dim, spec.four_d);
            const size_t src = kv_index(b, j, g, h);
            for (int64_t x = 0; x < D; ++x) {
              index.back() = x;
              d.k->set(index, k_values[src + static_cast<size_t>(x)]);
              d.v->set(index, v_values[src + static_cast<size_t>(x)]);
            }
          }
      }
  }

  if (spec.bias) {
    const std::vector<int64_t> shape = with_groups({B, G, Hq, max_q, p.max_kv_seqlen}, 1, spec.four_d);
    d.bias.emplace(spec.bias_dtype, shape);
    // Columns past the longest sequence (PADDED capacity) are garbage; the
    // rest is drawn in the same order in every layout.
    d.bias->fill_uniform(layout, -50.0, 50.0);
    std::uniform_real_distribution<double> bias_value(-1.0, 1.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t i = 0; i < max_q; ++i)
            for (int64_t j = 0; j < max_kv; ++j)
              d.bias->set(index_with_groups({b, g, h, i, j}, 1, spec.four_d),
                          spec.bias_masks_first_row && i == 0 ? kNegInf : bias_value(values));
  }
  if (spec.sinks) {
    d.sinks.emplace(Dtype::f32, spec.four_d ? std::vector<int64_t>{Hq} : std::vector<int64_t>{G, Hq});
    d.sinks->fill_uniform(values, 0.0, 3.0);
  }
  if (spec.length_hint) {
    d.length_hint = d.kv_len;
    if (spec.stale_length_hint)
      for (int32_t &len : d.length_hint) len = static_cast<int32_t>(uniform_int(0, p.max_kv_seqlen));
    d.problem.kv_seqlen_hint = d.length_hint.data();
  }
  quantise_inputs(d);
  return data;
}

fmha_oracle::AttentionInputs AttentionData::oracle_inputs() const {
  fmha_oracle::AttentionInputs in;
  in.q_layout = spec.q_layout;
  in.kv_layout = spec.kv_layout;
  in.page_size = problem.page_size;
  in.kv_page_dim = spec.kv_page_dim;
  in.mask = spec.mask;
  in.window_left = spec.window_left;
  in.window_right = spec.window_right;
  in.softmax_scale = spec.softmax_scale;
  in.softcap = spec.softcap;
  auto ptr = [](const std::optional<Tensor> &t) { return t ? &*t : nullptr; };
  in.q = q_ref ? &*q_ref : ptr(q);
  in.k = k_ref ? &*k_ref : ptr(k);
  in.v = v_ref ? &*v_ref : ptr(v);
  in.bias = ptr(bias);
  in.sinks = ptr(sinks);
  in.kv_seqlen = ptr(kv_seqlen);
  in.kv_seqstart = ptr(kv_seqstart);
  in.q_seqstart = ptr(q_seqstart);
  in.block_table = ptr(block_table);
  in.kv_indptr = ptr(kv_indptr);
  in.kv_indices = ptr(kv_indices);
  in.kv_last_page_len = ptr(kv_last_page_len);
  return in;
}

namespace {

// (rows_b, rows_m) of Q, O and LSE.
std::pair<int64_t, int64_t> output_rows(const AttentionData &d) { return {d.q->shape()[0], d.q->shape()[1]}; }

}  // namespace

Tensor AttentionData::make_o() const {
  const auto [rows_b, rows_m] = output_rows(*this);
  const std::vector<int64_t> shape =
      with_groups({rows_b, rows_m, problem.groups, problem.heads_q, head_dim_v()}, 2, spec.four_d);
  Tensor o(output_dtype(spec), shape, strides_for(shape, identity_order(shape.size()), spec.strided_q_o ? 8 : 0));
  o.poison();
  return o;
}

Tensor AttentionData::make_lse() const {
  const auto [rows_b, rows_m] = output_rows(*this);
  const std::vector<int64_t> shape = with_groups({rows_b, problem.groups, problem.heads_q, rows_m}, 1, spec.four_d);
  std::vector<size_t> order = identity_order(shape.size());
  if (spec.strided_lse) {  // stored as [B, M, G, H], the order O is in
    order.erase(order.end() - 1);
    order.insert(order.begin() + 1, shape.size() - 1);
  }
  Tensor lse(Dtype::f32, shape, strides_for(shape, order, 0));
  lse.poison();
  return lse;
}

Tensor AttentionData::make_o_partial(int32_t splits) const {
  const auto [rows_b, rows_m] = output_rows(*this);
  const std::vector<int64_t> shape =
      with_groups({splits, rows_b, rows_m, problem.groups, problem.heads_q, head_dim_v()}, 3, spec.four_d);
  Tensor o(Dtype::f32, shape);
  o.poison();
  return o;
}

Tensor AttentionData::make_lse_partial(int32_t splits) const {
  const auto [rows_b, rows_m] = output_rows(*this);
  Tensor lse(Dtype::f32, with_groups({splits, rows_b, problem.groups, problem.heads_q, rows_m}, 2, spec.four_d));
  lse.poison();
  return lse;
}

DeviceInputs upload_inputs(const AttentionData &data) {
  Device &device = device_under_test();
  DeviceInputs in;
  auto up = [&](std::optional<DeviceTensor> &dst, const std::optional<Tensor> &src) {
    if (src) dst = device.upload(*src);
  };
  up(in.q, data.q);
  up(in.k, data.k);
  up(in.v, data.v);
  up(in.bias, data.bias);
  up(in.sinks, data.sinks);
  up(in.kv_seqlen, data.kv_seqlen);
  up(in.kv_seqstart, data.kv_seqstart);
  up(in.q_seqstart, data.q_seqstart);
  up(in.block_table, data.block_table);
  up(in.kv_indptr, data.kv_indptr);
  up(in.kv_indices, data.kv_indices);
  up(in.kv_last_page_len, data.kv_last_page_len);
  up(in.k_scale, data.k_scale);
  up(in.v_scale, data.v_scale);
  up(in.q_scale, data.q_scale);
  // Device tensors take their DLPack dtype from the host dtype (uint8);
  // fp8 handed over with its DLPack 1.1 code is relabelled here.
  if (data.spec.fp8_storage == Fp8Storage::dlpack_code) {
    const uint8_t code = static_cast<uint8_t>(kDlpackFp8E4m3fn + data.spec.fp8_format);
    for (std::optional<DeviceTensor> *t : {&in.q, &in.k, &in.v})
      if (*t && (*t)->dl()->dtype.code == kDLUInt && (*t)->dl()->dtype.bits == 8) (*t)->dl_mutable()->dtype.code = code;
  }
  return in;
}

RunResult run_attention(const AttentionData &data, const DeviceInputs &inputs, const fmha_splitk_problem &problem) {
  Device &device = device_under_test();
  RunResult result;
  fmha_splitk_problem p = problem;
  p.backend = device.backend();
  auto fail = [&](const char *call, fmha_status status) {
    result.status = status;
    result.error = std::string(call) + " returned " + fmha_status_string(status) + ": " + fmha_last_error_message();
    return std::move(result);
  };
  fmha_splitk_plan_t raw_plan = nullptr;
  const fmha_status status = fmha_splitk_create_plan(&p, &raw_plan);
  if (status != FMHA_STATUS_SUCCESS) return fail("fmha_splitk_create_plan", status);
  std::unique_ptr<fmha_splitk_plan_s, void (*)(fmha_splitk_plan_t)> plan(raw_plan, &fmha_splitk_destroy_plan);
  return run_planned(data, inputs, p, plan.get());
}

RunResult run_planned(const AttentionData &data, const DeviceInputs &inputs, const fmha_splitk_problem &p,
                      fmha_splitk_plan_t plan) {
  Device &device = device_under_test();
  RunResult result;
  auto fail = [&](const char *call, fmha_status status) {
    result.status = status;
    result.error = std::string(call) + " returned " + fmha_status_string(status) + ": " + fmha_last_error_message();
    return std::move(result);
  };
  fmha_status status;
  if ((status = fmha_splitk_get_plan_info(plan, &result.info)) != FMHA_STATUS_SUCCESS)
    return fail("fmha_splitk_get_plan_info", status);
  size_t workspace_size = 0;
  if ((status = fmha_splitk_plan_workspace_size(plan, &workspace_size)) != FMHA_STATUS_SUCCESS)
    return fail("fmha_splitk_plan_workspace_size", status);
  std::shared_ptr<void> workspace;
  if (!data.spec.null_workspace && workspace_size > 0)
    workspace = std::shared_ptr<void>(device.alloc_raw(workspace_size), [&device](void *w) { device.free_raw(w); });

  const bool partials = (p.flags & FMHA_FLAG_WRITE_PARTIALS) != 0;
  std::optional<DeviceTensor> o, lse, o_partial, lse_partial;
  if (partials) {
    result.o_partial = data.make_o_partial(p.split_k);
    result.lse_partial = data.make_lse_partial(p.split_k);
    o_partial = device.upload(result.o_partial);
    lse_partial = device.upload(result.lse_partial);
  } else {
    result.o = data.make_o();
    o = device.upload(result.o);
    if (data.spec.lse) {
      result.lse = data.make_lse();
      lse = device.upload(result.lse);
    }
  }

  auto dl = [](const std::optional<DeviceTensor> &t) { return t ? t->dl() : nullptr; };
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = dl(inputs.q);
  args.k = dl(inputs.k);
  args.v = dl(inputs.v);
  args.o = dl(o);
  args.lse = dl(lse);
  args.bias = dl(inputs.bias);
  args.sinks = dl(inputs.sinks);
  args.kv_seqlen = dl(inputs.kv_seqlen);
  args.kv_seqstart = dl(inputs.kv_seqstart);
  args.q_seqstart = dl(inputs.q_seqstart);
  args.block_table = dl(inputs.block_table);
  args.kv_indptr = dl(inputs.kv_indptr);
  args.kv_indices = dl(inputs.kv_indices);
  args.kv_last_page_len = dl(inputs.kv_last_page_len);
  args.k_scale = dl(inputs.k_scale);
  args.v_scale = dl(inputs.v_scale);
  args.q_scale = dl(inputs.q_scale);
  args.o_partial = dl(o_partial);
  args.lse_partial = dl(lse_partial);
  args.workspace = workspace.get();
  args.workspace_size = workspace ? workspace_size : 0;
  args.stream = device.stream();
  if ((status = fmha_splitk_run(plan, &args)) != FMHA_STATUS_SUCCESS) return fail("fmha_splitk_run", status);
  device.synchronize();
  if (partials) {
    device.download(*o_partial, result.o_partial);
    device.download(*lse_partial, result.lse_partial);
  } else {
    device.download(*o, result.o);
    if (lse) device.download(*lse, result.lse);
  }
  result.status = FMHA_STATUS_SUCCESS;
  return result;
}

RunResult run_attention(const AttentionData &data) { return run_attention(data, upload_inputs(data), data.problem); }

double rounding_error(Dtype output, const std::vector<double> &ref) {
  double err = 0.0, norm = 0.0;
  for (double x : ref) {
    const double e = round_to(output, x) - x;
    err += e * e;
    norm += x * x;
  }
  return norm > 0.0 ? std::sqrt(err / norm) : 0.0;
}

double attention_tolerance(Dtype input, Dtype output, const std::vector<double> &ref) {
  return (input == Dtype::bf16 ? 2e-3 : 1e-3) + rounding_error(output, ref);
}

double case_tolerance(const AttentionCase &spec, Dtype output, const std::vector<double> &ref) {
  return spec.error_bound > 0.0 ? spec.error_bound + rounding_error(output, ref)
                                : attention_tolerance(spec.dtype, output, ref);
}

double relative_error(const std::vector<double> &out, const std::vector<double> &ref) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    err += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return norm > 0.0 ? std::sqrt(err / norm) : (err > 0.0 ? INFINITY : 0.0);
}

::testing::AssertionResult o_matches(const std::vector<double> &out, const fmha_oracle::AttentionOutput &ref,
                                     double tolerance) {
  if (out.size() != ref.o.size())
    return ::testing::AssertionFailure() << "O has " << out.size() << " elements, the oracle " << ref.o.size();
  const int64_t D = ref.head_dim_v, rows = D > 0 ? static_cast<int64_t>(out.size()) / D : 0;
  // One bad row among many barely moves the global norm: bound every row
  // too, more loosely (a short row's rounding error is noisier).
  const double row_bound = 8.0 * tolerance;
  auto row_name = [&](int64_t row) {
    const int64_t h = row % ref.heads_q, g = row / ref.heads_q % ref.groups,
                  m = row / (ref.heads_q * ref.groups) % ref.rows_m, b = row / (ref.heads_q * ref.groups * ref.rows_m);
    return "row (b " + std::to_string(b) + ", m " + std::to_string(m) + ", g " + std::to_string(g) + ", h " +
           std::to_string(h) + ")";
  };
  int64_t nan_count = 0, first_nan = -1, nonzero_empty = 0, first_nonzero_empty = -1, worst_row = -1;
  double err = 0.0, norm = 0.0, worst_row_error = 0.0;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t h = row % ref.heads_q, g = row / ref.heads_q % ref.groups,
                  m = row / (ref.heads_q * ref.groups) % ref.rows_m, b = row / (ref.heads_q * ref.groups * ref.rows_m);
    const bool empty =
        ref.lse[static_cast<size_t>(((b * ref.groups + g) * ref.heads_q + h) * ref.rows_m + m)] == kNegInf;
    double row_err = 0.0, row_norm = 0.0;
    bool nonzero = false;
    for (int64_t d = 0; d < D; ++d) {
      const size_t e = static_cast<size_t>(row * D + d);
      if (!std::isfinite(out[e])) {
        if (first_nan < 0) first_nan = row;
        ++nan_count;
        continue;
      }
      nonzero = nonzero || out[e] != 0.0;
      row_err += (out[e] - ref.o[e]) * (out[e] - ref.o[e]);
      row_norm += ref.o[e] * ref.o[e];
    }
    if (empty && nonzero) {
      if (first_nonzero_empty < 0) first_nonzero_empty = row;
      ++nonzero_empty;
    }
    err += row_err;
    norm += row_norm;
    const double row_error = row_norm > 0.0 ? std::sqrt(row_err / row_norm) : (row_err > 0.0 ? INFINITY : 0.0);
    if (row_error > worst_row_error) worst_row_error = row_error, worst_row = row;
  }
  const double rel = norm > 0.0 ? std::sqrt(err / norm) : (err > 0.0 ? INFINITY : 0.0);
  if (nan_count > 0 || nonzero_empty > 0 || !(rel <= tolerance) || !(worst_row_error <= row_bound)) {
    auto failure = ::testing::AssertionFailure();
    failure << "O: relative error " << rel << " (bound " << tolerance << "), worst " << row_name(worst_row)
            << " relative error " << worst_row_error << " (row bound " << row_bound << ")";
    if (nan_count > 0)
      failure << "; " << nan_count << " of " << out.size() << " elements NaN/inf (first in " << row_name(first_nan)
              << ")";
    if (nonzero_empty > 0)
      failure << "; " << nonzero_empty << " rows that see no key are not 0 (first: " << row_name(first_nonzero_empty)
              << ")";
    return failure;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult lse_matches(const std::vector<double> &out, const std::vector<double> &ref_lse,
                                       double tolerance) {
  if (out.size() != ref_lse.size())
    return ::testing::AssertionFailure() << "LSE has " << out.size() << " elements, the oracle " << ref_lse.size();
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (size_t e = 0; e < out.size(); ++e) {
    bool ok;
    if (ref_lse[e] == kNegInf) {
      ok = out[e] == kNegInf;
    } else {
      const double err = std::fabs(out[e] - ref_lse[e]) / std::max(1.0, std::fabs(ref_lse[e]));
      ok = std::isfinite(out[e]) && err <= tolerance;
      if (std::isfinite(out[e])) worst = std::max(worst, err);
    }
    if (!ok) {
      if (first < 0) first = static_cast<int64_t>(e);
      ++bad;
    }
  }
  if (bad > 0)
    return ::testing::AssertionFailure() << "LSE: " << bad << " of " << out.size()
                                         << " entries wrong (first at flat index " << first << ": got "
                                         << out[static_cast<size_t>(first)] << ", oracle "
                                         << ref_lse[static_cast<size_t>(first)] << "); worst finite error " << worst;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult outside_untouched(const Tensor &t, const char *what) {
  std::vector<bool> covered(t.bytes(), false);
  const size_t elem = dtype_bytes(t.dtype()), lead = 32;  // Tensor's data starts 32 bytes into its buffer
  for (int64_t off : element_offsets(t))
    for (size_t byte = 0; byte < elem; ++byte) covered[lead + static_cast<size_t>(off) * elem + byte] = true;
  const uint8_t *buffer = static_cast<const uint8_t *>(t.data()) - lead;
  for (size_t i = 0; i < t.bytes(); ++i)
    if (!covered[i] && buffer[i] != 0xff)
      return ::testing::AssertionFailure() << what << ": byte " << static_cast<int64_t>(i) - static_cast<int64_t>(lead)
                                           << " (relative to the data pointer) lies outside every element but was "
                                              "written";
  return ::testing::AssertionSuccess();
}

std::string plan_note(const fmha_splitk_plan_info &info) {
  std::ostringstream s;
  s << "plan: backend " << info.backend_name << ", split_k " << info.split_k << ", kv_chunk_size " << info.kv_chunk_size
    << ", workers " << info.num_workers << ", max_partials " << info.max_partials << ", workspace "
    << info.workspace_size << " B, kernel " << info.kernel_name;
  return s.str();
}

fmha_status merge_on_device(const MergeInputs &in, Tensor &o, Tensor *lse, std::string &error) {
  Device &device = device_under_test();
  std::vector<DeviceTensor> keep;
  auto up = [&](const Tensor *t) -> const DLTensor * {
    if (!t) return nullptr;
    keep.push_back(device.upload(*t));
    return keep.back().dl();
  };
  keep.reserve(4 + 2 * in.o_list.size());
  fmha_merge_args args = FMHA_MERGE_ARGS_INIT;
  args.o_stacked = up(in.o_stacked);
  args.lse_stacked = up(in.lse_stacked);
  std::vector<const DLTensor *> o_list, lse_list;
  for (const Tensor *t : in.o_list) o_list.push_back(up(t));
  for (const Tensor *t : in.lse_list) lse_list.push_back(up(t));
  if (!in.o_list.empty() || !in.lse_list.empty()) {
    args.num_partials = in.o_list.size();
    args.o_list = o_list.data();
    args.lse_list = lse_list.data();
  }
  DeviceTensor o_device = device.upload(o);
  std::optional<DeviceTensor> lse_device;
  if (lse) lse_device = device.upload(*lse);
  args.o = o_device.dl();
  args.lse = lse_device ? lse_device->dl() : nullptr;
  args.stream = device.stream();
  const fmha_status status = fmha_merge(&args);
  if (status != FMHA_STATUS_SUCCESS) {
    error = std::string("fmha_merge returned ") + fmha_status_string(status) + ": " + fmha_last_error_message();
    return status;
  }
  device.synchronize();
  device.download(o_device, o);
  if (lse) device.download(*lse_device, *lse);
  return status;
}

namespace {

// WRITE_PARTIALS: chunk s of the UNIFORM schedule covers keys [s * chunk,
// (s + 1) * chunk) with chunk = ceil(max_kv_seqlen / split_k); sinks are
// folded into chunk 0 (docs/design-notes.md).
void check_partials(const AttentionData &data, const RunResult &run, const fmha_oracle::AttentionOutput &ref) {
  const int32_t splits = data.problem.split_k;
  const int64_t chunk = (data.problem.max_kv_seqlen + splits - 1) / splits;
  const double chunk_tolerance = case_tolerance(data.spec, Dtype::f32, ref.o);
  EXPECT_TRUE(outside_untouched(run.o_partial, "o_partial"));
  EXPECT_TRUE(outside_untouched(run.lse_partial, "lse_partial"));
  for (int32_t s = 0; s < splits; ++s) {
    SCOPED_TRACE("chunk " + std::to_string(s) + " of " + std::to_string(splits) + " (keys from " +
                 std::to_string(s * chunk) + ")");
    fmha_oracle::AttentionInputs inputs = data.oracle_inputs();
    inputs.key_begin = s * chunk;
    inputs.key_end = (s + 1) * chunk;
    if (s != 0) inputs.sinks = nullptr;
    const fmha_oracle::AttentionOutput part = fmha_oracle::AttentionOracle(inputs).forward();
    EXPECT_TRUE(o_matches(fmha_oracle::slice_to_doubles(run.o_partial, s), part, chunk_tolerance));
    EXPECT_TRUE(lse_matches(fmha_oracle::slice_to_doubles(run.lse_partial, s), part.lse));
  }

  Tensor merged_o = data.make_o(), merged_lse = data.make_lse();
  MergeInputs in;
  in.o_stacked = &run.o_partial;
  in.lse_stacked = &run.lse_partial;
  std::string error;
  ASSERT_EQ(merge_on_device(in, merged_o, &merged_lse, error), FMHA_STATUS_SUCCESS) << error;
  const double tolerance = case_tolerance(data.spec, output_dtype(data.spec), ref.o);
  EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(merged_o), ref, tolerance)) << "partials merged by fmha_merge";
  EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(merged_lse), ref.lse)) << "partials merged by fmha_merge";

  fmha_splitk_problem direct = data.problem;
  direct.flags &= ~static_cast<uint32_t>(FMHA_FLAG_WRITE_PARTIALS);
  const RunResult direct_run = run_attention(data, upload_inputs(data), direct);
  ASSERT_EQ(direct_run.status, FMHA_STATUS_SUCCESS) << direct_run.error;
  const double difference = relative_error(fmha_oracle::to_doubles(merged_o), fmha_oracle::to_doubles(direct_run.o));
  EXPECT_LE(difference, tolerance) << "partials merged by fmha_merge vs the run's own merge";
}

}  // namespace

void check_attention_case(const AttentionCase &spec) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  SCOPED_TRACE(spec.describe());
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(data->oracle_inputs()).forward();
  const RunResult run = run_attention(*data);
  ASSERT_EQ(run.status, FMHA_STATUS_SUCCESS) << run.error;
  SCOPED_TRACE(plan_note(run.info));
  if (spec.write_partials) {
    check_partials(*data, run, ref);
    return;
  }
  const std::vector<double> o = fmha_oracle::to_doubles(run.o);
  // The measured error goes into the test report (--gtest_output=xml), where
  // the bounds of docs/numerics.md were read from.
  ::testing::Test::RecordProperty("o_relative_error", std::to_string(relative_error(o, ref.o)));
  ::testing::Test::RecordProperty("o_output_rounding", std::to_string(rounding_error(output_dtype(spec), ref.o)));
  EXPECT_TRUE(o_matches(o, ref, case_tolerance(spec, output_dtype(spec), ref.o)));
  EXPECT_TRUE(outside_untouched(run.o, "O"));
  if (spec.lse) {
    EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(run.lse), ref.lse));
    EXPECT_TRUE(outside_untouched(run.lse, "LSE"));
  }
}

void check_attention_case_if_supported(const AttentionCase &spec) {
  const std::unique_ptr<AttentionData> probe = build_attention(spec, 0);
  fmha_splitk_problem problem = probe->problem;
  problem.backend = device_under_test().backend();
  fmha_splitk_plan_t plan = nullptr;
  const fmha_status status = fmha_splitk_create_plan(&problem, &plan);
  fmha_splitk_destroy_plan(plan);
  if (status == FMHA_STATUS_NOT_SUPPORTED) GTEST_SKIP() << fmha_last_error_message();
  check_attention_case(spec);
}

}  // namespace fmha_test
