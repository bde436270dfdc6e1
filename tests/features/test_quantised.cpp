// Quantised K/V (DESIGN 5.6) and fp8 compute against the float64 oracle of
// the dequantised inputs.
//
// Sixteen quantisation kinds (int4 with 1, 2, 4, 8 groups; fp8 e4m3fn and
// e4m3fnuz with fp16x2 scale+shift or float32 scales, per row, per head or
// per tensor), four cases each. Not the cross product with layouts, masks and
// split counts: a covering design that rotates those axes (and dtype, head
// dim, heads, 4-D / 5-D, fp8 storage, NaN in the rows that hold no key)
// through the 64 cases at different strides, so every kind meets four
// layouts, four masks and four split modes, and every layout, mask and split
// mode meets int4 and both fp8 formats. Twelve fp8 compute cases follow.
//
// Bounds: K/V dequantise exactly (fp8 or nibble times an fp16 or float
// scale, plus an fp16 shift, is exact in float32), so those cases keep the
// bf16 / fp16 bounds of DESIGN 6. fp8 compute rounds inside the math and has
// its own bounds (docs/numerics.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "features/harness.h"

namespace fmha_test {
namespace {

struct QuantKind {
  std::string name;
  int32_t kv_quant, groups, format, scale_kind, granularity;
};

std::vector<QuantKind> quant_kinds() {
  std::vector<QuantKind> kinds = {{"int4_g1", FMHA_KV_QUANT_INT4, 1, 0, 0, 0},
                                  {"int4_g2", FMHA_KV_QUANT_INT4, 2, 0, 0, 0},
                                  {"int4_g4", FMHA_KV_QUANT_INT4, 4, 0, 0, 0},
                                  {"int4_g8", FMHA_KV_QUANT_INT4, 8, 0, 0, 0}};
  static const char *const formats[] = {"e4m3fn", "e4m3fnuz"};
  static const char *const kinds_of_scale[] = {"f16x2", "f32"};
  static const char *const granularities[] = {"row", "head", "tensor"};
  for (int32_t format = 0; format < 2; ++format)
    for (int32_t scale_kind = 0; scale_kind < 2; ++scale_kind)
      for (int32_t granularity = 0; granularity < 3; ++granularity) {
        kinds.push_back({std::string("fp8_") + formats[format] + "_" + kinds_of_scale[scale_kind] + "_" +
                             granularities[granularity],
                         FMHA_KV_QUANT_FP8, 1, format, scale_kind, granularity});
      }
  return kinds;
}

enum Layout { kDense, kPadded, kGappy, kPaged, kRagged, kVarlenQ, kLayoutCount };
const char *const kLayoutNames[] = {"dense", "padded", "gappy", "paged", "ragged", "varlenq"};
enum Mask { kNone, kCausal, kLocal, kBias, kSoftcap, kSinks, kMaskCount };
const char *const kMaskNames[] = {"none", "causal", "local", "bias", "softcap", "sinks"};
enum Split { kSplit1, kSplit2, kSplit7, kSplitBeyondKeys, kSplitAuto, kBatchInvariant, kSplitCount };
const char *const kSplitNames[] = {"s1", "s2", "s7", "sBeyondKeys", "sAuto", "sInvariant"};

void apply_layout(AttentionCase &c, int layout, int t) {
  const int32_t page_sizes[] = {16, 1, 64, 4};
  switch (layout) {
    case kDense:
      c.kv_len.assign(c.kv_len.size(), *std::max_element(c.kv_len.begin(), c.kv_len.end()));
      break;
    case kPadded:
      c.kv_layout = FMHA_KV_PADDED;
      break;
    case kGappy:
      c.kv_layout = FMHA_KV_GAPPY;
      break;
    case kPaged:
      c.kv_layout = FMHA_KV_PAGED, c.page_size = page_sizes[t], c.kv_page_dim = t % 2 == 1;
      c.paged_seqstart = t == 2;
      break;
    case kRagged:
      c.kv_layout = FMHA_KV_RAGGED, c.page_size = page_sizes[(t + 1) % 4], c.last_page_len = t % 2 == 0;
      break;
    case kVarlenQ: {
      c.q_layout = FMHA_Q_VARLEN;
      c.kv_layout = t % 2 == 0 ? FMHA_KV_PADDED : FMHA_KV_PAGED;
      const int32_t counts[] = {1, 3, 0, 2};
      c.q_len.clear();
      for (size_t b = 0; b < c.kv_len.size(); ++b) c.q_len.push_back(counts[(b + static_cast<size_t>(t)) % 4]);
      break;
    }
  }
}

void apply_mask(AttentionCase &c, int mask) {
  switch (mask) {
    case kCausal:
      c.mask = FMHA_MASK_CAUSAL;
      break;
    case kLocal:
      c.mask = FMHA_MASK_LOCAL, c.window_left = 20, c.window_right = 5;
      break;
    case kBias:
      c.bias = true;
      break;
    case kSoftcap:
      c.softcap = 5.0f, c.q_amplitude = 3.0;
      break;
    case kSinks:
      c.sinks = true;
      break;
  }
}

void apply_split(AttentionCase &c, int split) {
  const int32_t longest = *std::max_element(c.kv_len.begin(), c.kv_len.end());
  const int32_t forced[] = {1, 2, 7, 2 * (longest + c.page_size) + 8};
  if (split < kSplitAuto) c.split_k = forced[split];
  if (split == kBatchInvariant) c.batch_invariant = true, c.kv_chunk_size = 32;
}

void set_kind(AttentionCase &c, const QuantKind &kind) {
  c.kv_quant = kind.kv_quant;
  c.kv_quant_groups = kind.groups;
  c.fp8_format = kind.format;
  c.kv_scale_kind = kind.scale_kind;
  c.kv_scale_granularity = kind.granularity;
}

// The shared axes of case t of quantisation kind k (global index i).
AttentionCase base_case(int i, int t) {
  const std::vector<int32_t> lengths[] = {{50, 131}, {17, 200, 3}, {96}, {255, 64}};
  const int32_t queries[] = {1, 2, 1, 4};
  const std::pair<int32_t, int32_t> heads[] = {{4, 2}, {2, 1}, {4, 4}, {8, 1}};
  const int32_t head_dims[] = {64, 128, 256};
  AttentionCase c;
  c.dtype = (i / 3) % 2 == 0 ? Dtype::bf16 : Dtype::f16;
  c.head_dim = head_dims[(i / 2) % 3];
  c.kv_len = lengths[(i + t) % 4];
  c.q_len = {queries[(i / 4 + t) % 4]};
  std::tie(c.heads_q, c.heads_kv) = heads[t];
  c.four_d = (i / 4) % 2 == 0;
  if (!c.four_d && t % 2 == 1) c.groups = 2;
  c.fp8_storage = static_cast<Fp8Storage>((i / 4 + t) % 3);
  // Rows that hold no key: NaN codes and NaN scales, which must not leak.
  c.nan_padding = i % 3 == 0;
  return c;
}

std::vector<AttentionCase> quantised_cases() {
  std::vector<AttentionCase> cases;
  const std::vector<QuantKind> kinds = quant_kinds();
  for (size_t k = 0; k < kinds.size(); ++k)
    for (int t = 0; t < 4; ++t) {
      const int i = static_cast<int>(4 * k) + t;
      AttentionCase c = base_case(i, t);
      set_kind(c, kinds[k]);
      const int layout = i % kLayoutCount, mask = (i + i / kLayoutCount) % kMaskCount,
                split = (i + 2 * (i / kLayoutCount) + 3) % kSplitCount;
      apply_layout(c, layout, t);
      apply_mask(c, mask);
      apply_split(c, split);
      c.name = kinds[k].name + "_" + std::to_string(t) + "_" + kLayoutNames[layout] + "_" + kMaskNames[mask] + "_" +
               kSplitNames[split] + "_" + dtype_name(c.dtype) + "_d" + std::to_string(c.head_dim);
      cases.push_back(c);
    }
  return cases;
}

class QuantisedKv : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(QuantisedKv, MatchesOracleOfDequantised) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  check_attention_case_if_supported(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Quantised, QuantisedKv, ::testing::ValuesIn(quantised_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

// Head dims short of their kernel's bucket (96 in 128, 48 in 64): the
// packed rows are shorter than the staged ones, whose rest must decode to
// zeros that meet Q's zero padding (and O columns that are not written).
std::vector<AttentionCase> short_head_cases() {
  std::vector<AttentionCase> cases;
  const std::vector<QuantKind> kinds = quant_kinds();
  // int4 g1, int4 g2, fp8 e4m3fn f16x2 per row, fp8 e4m3fn f32 per head.
  const size_t picks[] = {0, 1, 4, 8};
  const int32_t dims[] = {96, 48, 48, 96};
  for (int i = 0; i < 4; ++i) {
    AttentionCase c = base_case(i, i);
    set_kind(c, kinds[picks[i]]);
    c.head_dim = dims[i];
    c.nan_padding = true;
    apply_layout(c, kPadded, i);
    apply_split(c, i % 2 == 0 ? kSplit2 : kSplit1);
    c.name = "short_" + kinds[picks[i]].name + "_d" + std::to_string(c.head_dim) + "_" + dtype_name(c.dtype);
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(QuantisedShortHead, QuantisedKv, ::testing::ValuesIn(short_head_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

// fp8 with fp32 scales per row, and int4 with one group per row, whose V
// rows lie 2^-8 .. 2^8 apart: the streaming kernel puts V's scales on P
// over a power-of-two normaliser that grows (and rescales O) as larger
// scales arrive (int4: its shifts go into a sum of their own).
std::vector<AttentionCase> spread_scale_cases() {
  std::vector<AttentionCase> cases;
  const std::vector<QuantKind> kinds = quant_kinds();
  for (int i = 0; i < 6; ++i) {
    AttentionCase c = base_case(i, i % 4);  // (t indexes base_case's four shapes)
    // fp8 e4m3fn f32 per row (twice), e4m3fnuz f32 per row, e4m3fn f32 per
    // head, int4 g1 (twice) (see quant_kinds).
    const size_t picks[] = {7, 7, 13, 8, 0, 0};
    const size_t pick = picks[i];
    set_kind(c, kinds[pick]);
    c.head_dim = i % 2 == 0 ? 128 : 64;
    c.kv_len = {300 + 37 * i, 77};
    c.v_row_spread = 8;
    apply_layout(c, i % 2 == 0 ? kPadded : kPaged, i % 4);
    apply_split(c, i < 2 || i == 4 ? kSplit1 : kSplitAuto);
    c.name = "spread_" + kinds[pick].name + "_d" + std::to_string(c.head_dim) + "_" + dtype_name(c.dtype) + "_" +
             std::to_string(i);
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(QuantisedSpreadScales, QuantisedKv, ::testing::ValuesIn(spread_scale_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

// int4 with one group per row where a head's rows (68 bytes at D 128, 36
// at D 64) all sit at one offset mod 16 (G x Hkv a multiple of 4,
// contiguous views 16-byte aligned at both ends): the streaming kernel
// copies their aligned 16-byte chunks whole (kv_over16), each head's rows
// at their own offset. Every layout once, NaN in the rows that hold no key
// (which the chunks of the rows beside them take along).
std::vector<AttentionCase> whole_chunk_cases() {
  std::vector<AttentionCase> cases;
  const QuantKind int4_g1 = quant_kinds()[0];
  for (int layout = 0; layout < kLayoutCount; ++layout) {
    const int t = layout % 4;
    AttentionCase c = base_case(layout, t);
    set_kind(c, int4_g1);
    c.head_dim = layout % 2 == 0 ? 128 : 64;
    c.heads_q = 8, c.heads_kv = 4;
    c.nan_padding = true;
    apply_layout(c, layout, t);
    apply_mask(c, layout % kMaskCount);
    apply_split(c, (2 * layout + 1) % kSplitCount);
    c.name = "chunks_int4_g1_" + std::string(kLayoutNames[layout]) + "_" + kMaskNames[layout % kMaskCount] + "_d" +
             std::to_string(c.head_dim) + "_" + dtype_name(c.dtype);
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(QuantisedWholeChunks, QuantisedKv, ::testing::ValuesIn(whole_chunk_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

// fp8 compute, with the bounds of harness.h (docs/numerics.md).
std::vector<AttentionCase> fp8_compute_cases() {
  std::vector<AttentionCase> cases;
  static const char *const granularities[] = {"qrow", "qhead", "qtensor"};
  for (int i = 0; i < 12; ++i) {
    const bool qk = i < 8, pv = i >= 6;
    AttentionCase c = base_case(i, i % 4);
    c.dtype = Dtype::bf16;
    c.kv_quant = FMHA_KV_QUANT_FP8;
    c.fp8_format = i % 2;
    c.kv_scale_kind = (i / 2) % 2;
    c.kv_scale_granularity = (i / 3) % 3;
    c.fp8_qk = qk;
    c.q_scale_granularity = i % 3;
    c.fp8_pv = pv;
    c.error_bound = pv ? kFp8PvErrorBound : kFp8QkErrorBound;
    const int layout = (i * 5) % kLayoutCount, mask = (i * 7 + 1) % kMaskCount, split = (i + 1) % kSplitCount;
    apply_layout(c, layout, i % 4);
    apply_mask(c, mask);
    apply_split(c, split);
    c.name = std::string(qk && pv ? "fp8_qk_pv"
                         : qk     ? "fp8_qk"
                                  : "fp8_pv") +
             "_" + std::to_string(i) + "_" + (c.fp8_format == FMHA_FP8_E4M3FN ? "e4m3fn" : "e4m3fnuz") +
             (qk ? std::string("_") + granularities[i % 3] : "") + "_" + kLayoutNames[layout] + "_" + kMaskNames[mask] +
             "_" + kSplitNames[split];
    cases.push_back(c);
  }
  return cases;
}

class Fp8Compute : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Fp8Compute, WithinItsBound) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  check_attention_case_if_supported(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Quantised, Fp8Compute, ::testing::ValuesIn(fp8_compute_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

}  // namespace
}  // namespace fmha_test
