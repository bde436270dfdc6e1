// fmha_quantize_kv(): exact bit layouts on hand-made rows, round trips
// through a small decoder written here from DESIGN 5.6 (sharing no code with
// the library), and every refused argument with its status and message.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "test_api_support.h"

namespace fmha_api_test {
namespace {

// ---- The independent decoder ----------------------------------------------

uint32_t word_at(const Tensor &tensor, int64_t element) {
  uint32_t word;
  std::memcpy(&word, static_cast<const uint8_t *>(tensor.data()) + element * 4, 4);
  return word;
}

uint8_t byte_at(const Tensor &tensor, int64_t byte) { return static_cast<const uint8_t *>(tensor.data())[byte]; }

float half_of(uint32_t bits) { return fmha_test::half_bits_to_float(static_cast<uint16_t>(bits & 0xffffu)); }

// E4M3: 1 sign, 4 exponent, 3 mantissa bits; bias 7 (FN) or 8 (FNUZ).
double decode_fp8(uint8_t code, int32_t format) {
  const bool fnuz = format == FMHA_FP8_E4M3FNUZ;
  if (fnuz ? code == 0x80 : (code & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();
  const int bias = fnuz ? 8 : 7;
  const int exponent = (code >> 3) & 0xf;
  const int mantissa = code & 0x7;
  const double magnitude =
      exponent == 0 ? std::ldexp(mantissa / 8.0, 1 - bias) : std::ldexp(1.0 + mantissa / 8.0, exponent - bias);
  return (code & 0x80) ? -magnitude : magnitude;
}

double fp8_max(int32_t format) { return format == FMHA_FP8_E4M3FNUZ ? 240.0 : 448.0; }

fmha_quantize_kv_args int4_args(const Tensor &src, const Tensor &dst, int32_t groups) {
  fmha_quantize_kv_args args = FMHA_QUANTIZE_KV_ARGS_INIT;
  args.src = src.dl();
  args.dst = dst.dl();
  args.kv_quant = FMHA_KV_QUANT_INT4;
  args.kv_quant_groups = groups;
  return args;
}

fmha_quantize_kv_args fp8_args(const Tensor &src, const Tensor &dst, const Tensor &scale, int32_t format, int32_t kind,
                               int32_t granularity) {
  fmha_quantize_kv_args args = FMHA_QUANTIZE_KV_ARGS_INIT;
  args.src = src.dl();
  args.dst = dst.dl();
  args.scale = scale.dl();
  args.kv_quant = FMHA_KV_QUANT_FP8;
  args.fp8_format = format;
  args.kv_scale_kind = kind;
  args.scale_granularity = granularity;
  return args;
}

// Row-major shape with the last dim replaced.
std::vector<int64_t> with_last(std::vector<int64_t> shape, int64_t last) {
  shape.back() = last;
  return shape;
}

// Strides of `shape` whose rows are `pad` elements longer than needed.
std::vector<int64_t> padded_strides(const std::vector<int64_t> &shape, int64_t pad) {
  std::vector<int64_t> strides(shape.size(), 1);
  int64_t next = shape.back() + pad;
  for (int axis = static_cast<int>(shape.size()) - 2; axis >= 0; --axis) {
    strides[static_cast<size_t>(axis)] = next;
    next *= shape[static_cast<size_t>(axis)];
  }
  return strides;
}

// ---- int4 -----------------------------------------------------------------

TEST(QuantizeInt4, RowOfLevelsGivesNibblesInOrder) {
  Tensor src(Dtype::f32, {1, 16});
  for (int d = 0; d < 16; ++d) src.set({0, d}, d);
  Tensor dst(Dtype::i32, {1, 3});
  const fmha_quantize_kv_args args = int4_args(src, dst, 1);
  EXPECT_FMHA_OK(fmha_quantize_kv(&args));
  EXPECT_EQ(word_at(dst, 0), 0x00003c00u);  // scale 1.0 (fp16 0x3c00) low, shift 0 high
  EXPECT_EQ(word_at(dst, 1), 0x76543210u);  // dims 0..7 at bits 4j
  EXPECT_EQ(word_at(dst, 2), 0xfedcba98u);  // dims 8..15
}

TEST(QuantizeInt4, GroupsHaveTheirOwnScaleAndShift) {
  // Group 0: levels -8..7 step 1 (shift -8, scale 1); group 1: constant 5
  // (scale 0, shift 5, nibbles 0).
  Tensor src(Dtype::f16, {1, 32});
  for (int d = 0; d < 16; ++d) src.set({0, d}, d - 8);
  for (int d = 16; d < 32; ++d) src.set({0, d}, 5.0);
  Tensor dst(Dtype::i32, {1, 2 + 4});
  const fmha_quantize_kv_args args = int4_args(src, dst, 2);
  EXPECT_FMHA_OK(fmha_quantize_kv(&args));
  EXPECT_EQ(word_at(dst, 0), 0xc8003c00u);  // shift -8 (0xc800), scale 1
  EXPECT_EQ(word_at(dst, 1), 0x45000000u);  // shift 5 (0x4500), scale 0
  EXPECT_EQ(word_at(dst, 2), 0x76543210u);
  EXPECT_EQ(word_at(dst, 3), 0xfedcba98u);
  EXPECT_EQ(word_at(dst, 4), 0u);
  EXPECT_EQ(word_at(dst, 5), 0u);
}

TEST(QuantizeInt4, RoundTripWithinHalfAStep) {
  std::mt19937_64 rng(20261202);
  const std::vector<int64_t> shape = {2, 5, 2, 3, 64};
  for (Dtype dtype : {Dtype::f16, Dtype::bf16, Dtype::f32}) {
    for (int32_t groups : {0, 1, 2, 4, 8}) {
      SCOPED_TRACE(testing::Message() << "dtype " << static_cast<int>(dtype) << " groups " << groups);
      Tensor src(dtype, shape, padded_strides(shape, 8));
      src.fill_normal(rng, 0.5, 3.0);
      const int32_t used_groups = groups == 0 ? 1 : groups;
      const std::vector<int64_t> dst_shape = with_last(shape, used_groups + 64 / 8);
      Tensor dst(Dtype::i32, dst_shape, padded_strides(dst_shape, 3));
      const fmha_quantize_kv_args args = int4_args(src, dst, groups);
      EXPECT_FMHA_OK(fmha_quantize_kv(&args));
      std::vector<int64_t> row_shape(shape.begin(), shape.end() - 1);
      Tensor rows(Dtype::f32, row_shape);
      int64_t failures = 0;
      rows.for_each_index([&](const std::vector<int64_t> &row) {
        std::vector<int64_t> at = row;
        at.push_back(0);
        const int64_t dst_row = dst.offset(at);
        for (int64_t d = 0; d < 64; ++d) {
          const int64_t group = d / (64 / used_groups);
          const uint32_t params = word_at(dst, dst_row + group);
          const double scale = half_of(params);
          const double shift = half_of(params >> 16);
          const uint32_t nibble = (word_at(dst, dst_row + used_groups + d / 8) >> (4 * (d % 8))) & 0xfu;
          at.back() = d;
          const double x = src.get(at);
          const double error = std::fabs(nibble * scale + shift - x);
          if (!(error <= scale / 2 * (1 + 1e-6) + 1e-6 * std::fabs(x)) && failures++ < 5)
            ADD_FAILURE() << "dim " << d << ": x = " << x << ", nibble " << nibble << " * " << scale << " + " << shift
                          << " is off by " << error;
        }
      });
      EXPECT_EQ(failures, 0);
    }
  }
}

// ---- fp8 ------------------------------------------------------------------

TEST(QuantizeFp8, E4m3fnCodesOnHandMadeRow) {
  // amax 448 makes the per-tensor scale exactly 1: each code is the value's.
  Tensor src(Dtype::f32, {1, 8});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values = {448, -448, 1, 0.5f, std::ldexp(1.0f, -9), 17, nan, inf};
  for (int d = 0; d < 8; ++d) src.set({0, d}, values[static_cast<size_t>(d)]);
  Tensor dst(Dtype::u8, {1, 8});
  Tensor scale(Dtype::f32, {1});
  const fmha_quantize_kv_args args =
      fp8_args(src, dst, scale, FMHA_FP8_E4M3FN, FMHA_KV_SCALE_F32, FMHA_SCALE_PER_TENSOR);
  EXPECT_FMHA_OK(fmha_quantize_kv(&args));
  EXPECT_EQ(scale.get({0}), 1.0);
  // 17 lies halfway between 16 and 18: to even (16). Infinity saturates.
  const std::vector<uint8_t> expected = {0x7e, 0xfe, 0x38, 0x30, 0x01, 0x58, 0x7f, 0x7e};
  for (int d = 0; d < 8; ++d) EXPECT_EQ(byte_at(dst, d), expected[static_cast<size_t>(d)]) << "dim " << d;
}

TEST(QuantizeFp8, E4m3fnuzCodesOnHandMadeRow) {
  Tensor src(Dtype::f32, {8});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values = {240, -240, 1, 0.5f, std::ldexp(1.0f, -10), 17, nan, -0.0f};
  for (int d = 0; d < 8; ++d) src.set({d}, values[static_cast<size_t>(d)]);
  // fp8 as int32 words of four: dim 4w + j is byte j of word w.
  Tensor dst(Dtype::i32, {2});
  Tensor scale(Dtype::i32, {});
  const fmha_quantize_kv_args args =
      fp8_args(src, dst, scale, FMHA_FP8_E4M3FNUZ, FMHA_KV_SCALE_F16X2_SCALE_SHIFT, FMHA_SCALE_PER_ROW);
  EXPECT_FMHA_OK(fmha_quantize_kv(&args));
  EXPECT_EQ(word_at(scale, 0), 0x00003c00u);  // scale 1.0, shift 0
  // No negative zero in FNUZ: -0 is 0x00; 0x80 is NaN.
  EXPECT_EQ(word_at(dst, 0), 0x3840ff7fu);
  EXPECT_EQ(word_at(dst, 1), 0x00806001u);
}

struct Fp8Case {
  int32_t format;
  int32_t kind;
  int32_t granularity;
  int32_t scale_rank;  // per head: 2 ([G, Hkv]) or 1 ([Hkv])
  Dtype dst_dtype;     // u8 or i32 words
  uint8_t dst_code;    // DLPack code for u8: kDLUInt, 10 or 11
};

class QuantizeFp8RoundTrip : public testing::TestWithParam<Fp8Case> {};

TEST_P(QuantizeFp8RoundTrip, WithinFp8Precision) {
  const Fp8Case c = GetParam();
  std::mt19937_64 rng(7 + static_cast<uint64_t>(c.granularity));
  const std::vector<int64_t> shape = {2, 6, 2, 3, 32};
  Tensor src(Dtype::bf16, shape, padded_strides(shape, 16));
  src.fill_normal(rng, 0.0, 2.0);
  src.set({1, 2, 1, 0, 5}, 0.0);  // a zero stays zero
  const bool words = c.dst_dtype == Dtype::i32;
  const std::vector<int64_t> dst_shape = with_last(shape, words ? 8 : 32);
  Tensor dst(c.dst_dtype, dst_shape, padded_strides(dst_shape, 4));
  dst.dl_mutable()->dtype.code = words ? static_cast<uint8_t>(kDLInt) : c.dst_code;
  std::vector<int64_t> scale_shape;
  if (c.granularity == FMHA_SCALE_PER_ROW) scale_shape = {2, 6, 2, 3};
  if (c.granularity == FMHA_SCALE_PER_HEAD)
    scale_shape = c.scale_rank == 2 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{3};
  if (c.granularity == FMHA_SCALE_PER_TENSOR) scale_shape = {1};
  const bool f32 = c.kind == FMHA_KV_SCALE_F32;
  Tensor scale(f32 ? Dtype::f32 : Dtype::i32, scale_shape);
  const fmha_quantize_kv_args args = fp8_args(src, dst, scale, c.format, c.kind, c.granularity);
  EXPECT_FMHA_OK(fmha_quantize_kv(&args));

  // The scale index of a src row, and each scale's amax.
  const auto scale_index = [&](const std::vector<int64_t> &at) {
    if (c.granularity == FMHA_SCALE_PER_ROW) return std::vector<int64_t>(at.begin(), at.end() - 1);
    if (c.granularity == FMHA_SCALE_PER_HEAD) return std::vector<int64_t>(at.end() - 1 - c.scale_rank, at.end() - 1);
    return std::vector<int64_t>{0};
  };
  Tensor amax(Dtype::f64, scale_shape);
  src.for_each_index([&](const std::vector<int64_t> &at) {
    const std::vector<int64_t> s = scale_index(at);
    amax.set(s, std::max(amax.get(s), std::fabs(src.get(at))));
  });
  const double fp8_limit = fp8_max(c.format);
  const double min_normal = std::ldexp(1.0, c.format == FMHA_FP8_E4M3FNUZ ? -7 : -6);
  int64_t failures = 0;
  src.for_each_index([&](const std::vector<int64_t> &at) {
    const std::vector<int64_t> s = scale_index(at);
    double stored_scale = 0;
    if (f32) {
      stored_scale = scale.get(s);
      EXPECT_EQ(static_cast<float>(stored_scale), static_cast<float>(amax.get(s) / fp8_limit));
    } else {
      const uint32_t word = word_at(scale, scale.offset(s));
      EXPECT_EQ(word >> 16, 0u) << "the shift is zero";
      stored_scale = half_of(word);
      EXPECT_GE(stored_scale, amax.get(s) / fp8_limit * (1 - 1e-7));
      EXPECT_LE(stored_scale, amax.get(s) / fp8_limit * (1 + 1.0 / 512));
    }
    std::vector<int64_t> row = at;
    row.back() = 0;
    const uint8_t code = byte_at(dst, dst.offset(row) * (words ? 4 : 1) + at.back());
    const double x = src.get(at);
    const double y = decode_fp8(code, c.format) * stored_scale;
    const double in_fp8 = std::fabs(x) / stored_scale;
    const bool ok = in_fp8 >= min_normal ? std::fabs(y - x) <= std::ldexp(std::fabs(x), -4)
                                         : std::fabs(y - x) <= min_normal / 16 * stored_scale * (1 + 1e-6);
    if (!ok && failures++ < 5) ADD_FAILURE() << "x = " << x << " came back as " << y << " (code " << int{code} << ")";
  });
  EXPECT_EQ(failures, 0);
  std::vector<int64_t> zero_row = {1, 2, 1, 0, 0};
  EXPECT_EQ(byte_at(dst, dst.offset(zero_row) * (words ? 4 : 1) + 5), 0x00) << "the zero's code";
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantizeFp8RoundTrip,
    testing::Values(Fp8Case{FMHA_FP8_E4M3FN, FMHA_KV_SCALE_F32, FMHA_SCALE_PER_ROW, 0, Dtype::u8, kDLUInt},
                    Fp8Case{FMHA_FP8_E4M3FN, FMHA_KV_SCALE_F16X2_SCALE_SHIFT, FMHA_SCALE_PER_ROW, 0, Dtype::i32, 0},
                    Fp8Case{FMHA_FP8_E4M3FNUZ, FMHA_KV_SCALE_F32, FMHA_SCALE_PER_HEAD, 2, Dtype::u8, 11},
                    Fp8Case{FMHA_FP8_E4M3FN, FMHA_KV_SCALE_F16X2_SCALE_SHIFT, FMHA_SCALE_PER_HEAD, 1, Dtype::u8, 10},
                    Fp8Case{FMHA_FP8_E4M3FN, FMHA_KV_SCALE_F32, FMHA_SCALE_PER_TENSOR, 0, Dtype::u8, 10},
                    Fp8Case{FMHA_FP8_E4M3FNUZ, FMHA_KV_SCALE_F16X2_SCALE_SHIFT, FMHA_SCALE_PER_TENSOR, 0, Dtype::i32,
                            0}));

// ---- The helper's output feeds a plan ----------------------------------------

// O of one query row against keys and values given as decoded doubles.
std::vector<double> reference_row(const std::vector<double> &q, const std::vector<std::vector<double>> &k,
                                  const std::vector<std::vector<double>> &v) {
  std::vector<double> scores;
  double top = -INFINITY;
  for (const auto &key : k) {
    double dot = 0;
    for (size_t d = 0; d < q.size(); ++d) dot += q[d] * key[d];
    scores.push_back(dot / std::sqrt(static_cast<double>(q.size())));
    top = std::max(top, scores.back());
  }
  std::vector<double> o(v[0].size(), 0.0);
  double sum = 0;
  for (size_t j = 0; j < k.size(); ++j) {
    const double p = std::exp(scores[j] - top);
    sum += p;
    for (size_t d = 0; d < o.size(); ++d) o[d] += p * v[j][d];
  }
  for (double &value : o) value /= sum;
  return o;
}

// B = 1, Mq = 1, Mkv = 24, G = 1, Hq = Hkv = 1, D = 32: K/V quantised by
// the helper, attention by the CPU backend, against a reference over the
// values decoded here.
TEST(QuantizeFeedsPlan, Int4AndFp8KvMatchTheirDecodedValues) {
  constexpr int64_t kKeys = 24, kDim = 32;
  std::mt19937_64 rng(99);
  Tensor q(Dtype::f16, {1, 1, 1, 1, kDim});
  Tensor k(Dtype::f16, {1, kKeys, 1, 1, kDim});
  Tensor v(Dtype::f16, {1, kKeys, 1, 1, kDim});
  q.fill_uniform(rng, -1, 1);
  k.fill_uniform(rng, -1, 1);
  v.fill_uniform(rng, -1, 1);
  std::vector<double> query(kDim);
  for (int64_t d = 0; d < kDim; ++d) query[static_cast<size_t>(d)] = q.get({0, 0, 0, 0, d});

  for (int32_t kv_quant : {FMHA_KV_QUANT_INT4, FMHA_KV_QUANT_FP8}) {
    SCOPED_TRACE(kv_quant == FMHA_KV_QUANT_INT4 ? "int4, 2 groups" : "fp8 E4M3FN, per-row F16X2 scales");
    const bool int4 = kv_quant == FMHA_KV_QUANT_INT4;
    const int64_t last = int4 ? 2 + kDim / 8 : kDim;
    Tensor kq(int4 ? Dtype::i32 : Dtype::u8, {1, kKeys, 1, 1, last});
    Tensor vq(int4 ? Dtype::i32 : Dtype::u8, {1, kKeys, 1, 1, last});
    Tensor ks(Dtype::i32, {1, kKeys, 1, 1});
    Tensor vs(Dtype::i32, {1, kKeys, 1, 1});
    for (auto [src, dst, scale] : {std::tuple{&k, &kq, &ks}, std::tuple{&v, &vq, &vs}}) {
      fmha_quantize_kv_args args =
          int4 ? int4_args(*src, *dst, 2)
               : fp8_args(*src, *dst, *scale, FMHA_FP8_E4M3FN, FMHA_KV_SCALE_F16X2_SCALE_SHIFT, FMHA_SCALE_PER_ROW);
      EXPECT_FMHA_OK(fmha_quantize_kv(&args));
    }
    // Decode both caches.
    const auto decode = [&](const Tensor &packed, const Tensor &scales) {
      std::vector<std::vector<double>> rows(kKeys, std::vector<double>(kDim));
      for (int64_t j = 0; j < kKeys; ++j)
        for (int64_t d = 0; d < kDim; ++d) {
          const int64_t row = packed.offset({0, j, 0, 0, 0});
          double value;
          if (int4) {
            const uint32_t params = word_at(packed, row + d / (kDim / 2));
            const uint32_t nibble = (word_at(packed, row + 2 + d / 8) >> (4 * (d % 8))) & 0xfu;
            value = nibble * static_cast<double>(half_of(params)) + half_of(params >> 16);
          } else {
            const uint32_t word = word_at(scales, scales.offset({0, j, 0, 0}));
            value = decode_fp8(byte_at(packed, row + d), FMHA_FP8_E4M3FN) * half_of(word) + half_of(word >> 16);
          }
          rows[static_cast<size_t>(j)][static_cast<size_t>(d)] = value;
        }
      return rows;
    };
    const std::vector<double> expected = reference_row(query, decode(kq, ks), decode(vq, vs));

    fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
    problem.backend = FMHA_BACKEND_CPU;
    problem.batch = 1;
    problem.max_q_seqlen = 1;
    problem.max_kv_seqlen = kKeys;
    problem.heads_q = 1;
    problem.heads_kv = 1;
    problem.head_dim_qk = kDim;
    problem.q_dtype = FMHA_DTYPE_F16;
    problem.o_dtype = FMHA_DTYPE_F32;
    problem.kv_quant = kv_quant;
    problem.kv_quant_groups = int4 ? 2 : 0;
    problem.fp8_format = FMHA_FP8_E4M3FN;
    problem.kv_scale_kind = FMHA_KV_SCALE_F16X2_SCALE_SHIFT;
    problem.kv_scale_granularity = FMHA_SCALE_PER_ROW;
    fmha_splitk_plan_t plan = make_plan(problem);
    ASSERT_NE(plan, nullptr);
    Tensor o(Dtype::f32, {1, 1, 1, 1, kDim});
    fmha_splitk_args run = FMHA_SPLITK_ARGS_INIT;
    run.q = q.dl();
    run.k = kq.dl();
    run.v = vq.dl();
    run.o = o.dl();
    if (!int4) {
      run.k_scale = ks.dl();
      run.v_scale = vs.dl();
    }
    EXPECT_FMHA_OK(fmha_splitk_run(plan, &run));
    fmha_splitk_destroy_plan(plan);
    double error = 0, norm = 0;
    for (int64_t d = 0; d < kDim; ++d) {
      const double reference = expected[static_cast<size_t>(d)];
      error += std::pow(o.get({0, 0, 0, 0, d}) - reference, 2);
      norm += reference * reference;
    }
    EXPECT_LE(std::sqrt(error / norm), 1e-4);
  }
}

// ---- Refused arguments ----------------------------------------------------

class QuantizeErrors : public testing::Test {
 protected:
  Tensor src{Dtype::f16, {2, 4, 32}};
  Tensor dst{Dtype::i32, {2, 4, 2 + 4}};
  Tensor codes{Dtype::u8, {2, 4, 32}};
  Tensor scale{Dtype::f32, {2, 4}};
  fmha_quantize_kv_args int4 = int4_args(src, dst, 2);
  fmha_quantize_kv_args fp8 = fp8_args(src, codes, scale, FMHA_FP8_E4M3FN, FMHA_KV_SCALE_F32, FMHA_SCALE_PER_ROW);
};

TEST_F(QuantizeErrors, ValidCallsPass) {
  EXPECT_FMHA_OK(fmha_quantize_kv(&int4));
  EXPECT_FMHA_OK(fmha_quantize_kv(&fp8));
}

TEST_F(QuantizeErrors, StructRules) {
  EXPECT_FMHA_ERROR(fmha_quantize_kv(nullptr), FMHA_STATUS_INVALID_ARGUMENT, "args is NULL");
  int4.struct_size = 8;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.struct_size = 8");
  // A newer caller's larger struct is fine while its unknown bytes are zero.
  struct Larger {
    fmha_quantize_kv_args args;
    uint64_t future;
  } larger{int4_args(src, dst, 2), 0};
  larger.args.struct_size = sizeof(Larger);
  EXPECT_FMHA_OK(fmha_quantize_kv(&larger.args));
  larger.future = 1;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&larger.args), FMHA_STATUS_INVALID_ARGUMENT, "unknown nonzero fields");
  int4 = int4_args(src, dst, 2);
  int4.reserved0 = 3;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.reserved0 = 3");
}

TEST_F(QuantizeErrors, Enums) {
  int4.kv_quant = FMHA_KV_QUANT_NONE;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.kv_quant = 0");
  int4.kv_quant = 9;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.kv_quant = 9");
  int4.kv_quant = FMHA_KV_QUANT_INT4;
  int4.kv_quant_groups = 3;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.kv_quant_groups = 3");
  fmha_quantize_kv_args bad = fp8;
  bad.fp8_format = 5;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.fp8_format = 5");
  bad = fp8;
  bad.kv_scale_kind = 7;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.kv_scale_kind = 7");
  bad = fp8;
  bad.scale_granularity = 3;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.scale_granularity = 3");
}

TEST_F(QuantizeErrors, Pointers) {
  fmha_quantize_kv_args bad = int4;
  bad.src = nullptr;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.src is NULL");
  bad = int4;
  bad.dst = nullptr;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.dst is NULL");
  bad = int4;
  bad.scale = scale.dl();
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.scale must be NULL");
  bad = fp8;
  bad.scale = nullptr;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.scale is NULL");
}

TEST_F(QuantizeErrors, GpuTensorsAreNotSupported) {
  dst.dl_mutable()->device = {kDLCUDA, 0};
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_NOT_SUPPORTED, "args.dst is on cuda:0");
  EXPECT_NE(std::string(fmha_last_error_message()).find("quantise"), std::string::npos);
  scale.dl_mutable()->device = {kDLROCM, 1};
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&fp8), FMHA_STATUS_NOT_SUPPORTED, "args.scale is on rocm:1");
  src.dl_mutable()->device = {kDLCUDA, 0};
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&fp8), FMHA_STATUS_NOT_SUPPORTED, "args.src is on cuda:0");
}

TEST_F(QuantizeErrors, MixedCpuDevices) {
  dst.dl_mutable()->device = {kDLCPU, 1};
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.dst is on cpu:1");
}

TEST_F(QuantizeErrors, SrcDtypeRankAndStrides) {
  Tensor ints(Dtype::i32, {2, 4, 32});
  int4.src = ints.dl();
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.src has dtype int32");
  Tensor seven(Dtype::f16, {1, 1, 1, 1, 1, 1, 32});
  int4.src = seven.dl();
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.src has ndim = 7");
  Tensor strided(Dtype::f16, {2, 4, 32}, {256, 64, 2});
  int4.src = strided.dl();
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.src has last-dim stride 2");
  Tensor empty_rows(Dtype::f16, {2, 0});
  int4.src = empty_rows.dl();
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.src has D = 0");
}

TEST_F(QuantizeErrors, Int4HeadDimAndDst) {
  Tensor d24(Dtype::f16, {2, 4, 24});
  int4.src = d24.dl();
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "multiple of 8 * groups = 16");
  Tensor d12(Dtype::f16, {2, 4, 12});
  int4.src = d12.dl();
  int4.kv_quant_groups = 1;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.src has D = 12");
  int4 = int4_args(src, dst, 1);  // one group: dst needs 1 + 4 words, not 6
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.dst has shape [2, 4, 6]");
  Tensor floats(Dtype::f32, {2, 4, 6});
  int4 = int4_args(src, floats, 2);
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.dst has dtype float32");
  Tensor other_rows(Dtype::i32, {2, 5, 6});
  int4 = int4_args(src, other_rows, 2);
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.dst has shape [2, 5, 6]");
}

TEST_F(QuantizeErrors, Int4RefusesNonFiniteAndHugeValuesWithoutWriting) {
  Tensor f32(Dtype::f32, {2, 4, 32});
  f32.set({1, 2, 7}, std::numeric_limits<double>::quiet_NaN());
  dst.poison();
  const std::vector<uint8_t> before(static_cast<const uint8_t *>(dst.data()),
                                    static_cast<const uint8_t *>(dst.data()) + dst.bytes() - 32);
  int4.src = f32.dl();
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "args.src row [1, 2] group 0");
  EXPECT_EQ(std::memcmp(before.data(), dst.data(), before.size()), 0) << "dst was written";
  f32.set({1, 2, 7}, 0.0);
  f32.set({0, 3, 20}, 1e6);
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&int4), FMHA_STATUS_INVALID_ARGUMENT, "beyond the fp16 range");
}

TEST_F(QuantizeErrors, Fp8DstAndScale) {
  fmha_quantize_kv_args bad = fp8;
  codes.dl_mutable()->dtype.code = 11;  // e4m3fnuz codes for an E4M3FN request
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.fp8_format = 0");
  codes.dl_mutable()->dtype.code = kDLUInt;
  Tensor short_codes(Dtype::u8, {2, 4, 16});
  bad.dst = short_codes.dl();
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.dst has shape [2, 4, 16]");
  bad = fp8;
  bad.kv_scale_kind = FMHA_KV_SCALE_F16X2_SCALE_SHIFT;  // scale is float32
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.scale has dtype float32");
  Tensor wrong_rows(Dtype::f32, {2, 3});
  bad = fp8;
  bad.scale = wrong_rows.dl();
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.scale has shape [2, 3]");
  Tensor rank3(Dtype::f32, {2, 4, 1});
  bad.scale = rank3.dl();
  bad.scale_granularity = FMHA_SCALE_PER_HEAD;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.scale has ndim = 3");
  Tensor heads(Dtype::f32, {5});
  bad.scale = heads.dl();
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.scale has shape [5]");
  Tensor two(Dtype::f32, {2});
  bad.scale = two.dl();
  bad.scale_granularity = FMHA_SCALE_PER_TENSOR;
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "args.scale has shape [2]");
}

TEST_F(QuantizeErrors, Fp8F16ScaleOverflow) {
  Tensor huge(Dtype::f32, {2, 4, 32});
  huge.set({0, 0, 0}, 1e30);
  Tensor words(Dtype::i32, {2, 4});
  fmha_quantize_kv_args bad =
      fp8_args(huge, codes, words, FMHA_FP8_E4M3FN, FMHA_KV_SCALE_F16X2_SCALE_SHIFT, FMHA_SCALE_PER_ROW);
  EXPECT_FMHA_ERROR(fmha_quantize_kv(&bad), FMHA_STATUS_INVALID_ARGUMENT, "FMHA_KV_SCALE_F16X2_SCALE_SHIFT");
}

}  // namespace
}  // namespace fmha_api_test
