// Every code of both fp8 formats (DESIGN 5.6) against a table built from
// the formats' definitions: through the library (V rows holding all 256
// codes read back exactly as O, K rows read back exactly as LSE) and through
// the oracle's own decoder.
#include <fmha_splitk/fmha_splitk.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "oracle/quant.h"

namespace {

using fmha_test::Dtype;
using fmha_test::Tensor;

constexpr int kCodes = 256;

// The formats' definitions, spelled out: 1 sign bit, 4 exponent bits, 3
// mantissa bits, no infinities. E4M3FN: bias 7, S.1111.111 is NaN (so 448 is
// the largest), +0 and -0. E4M3FNUZ: bias 8, the pattern of negative zero
// (0x80) is the only NaN, 240 is the largest.
struct Fp8Format {
  int32_t format;
  const char *name;
  int bias;
  double largest;
};
const Fp8Format kFormats[] = {{FMHA_FP8_E4M3FN, "e4m3fn", 7, 448.0}, {FMHA_FP8_E4M3FNUZ, "e4m3fnuz", 8, 240.0}};

bool is_nan_code(const Fp8Format &f, int code) {
  return f.format == FMHA_FP8_E4M3FN ? (code & 0x7f) == 0x7f : code == 0x80;
}

// Magnitudes in increasing order: the 7 subnormals are multiples of the
// smallest step 2^(1 - bias - 3), then each binade 2^e (e from 1 - bias)
// holds 8 evenly spaced values; a code's magnitude is its index (the low 7
// bits) in that sequence.
std::vector<double> definition_table(const Fp8Format &f) {
  std::vector<double> magnitude;
  const double step = std::pow(2.0, 1 - f.bias - 3);
  for (int m = 0; m < 8; ++m) magnitude.push_back(m * step);
  for (int binade = 1; binade < 16; ++binade)
    for (int m = 0; m < 8; ++m) magnitude.push_back(std::pow(2.0, binade - f.bias) * (1.0 + m / 8.0));
  std::vector<double> table(kCodes);
  for (int code = 0; code < kCodes; ++code) {
    const double value = magnitude[static_cast<size_t>(code & 0x7f)];
    table[static_cast<size_t>(code)] =
        is_nan_code(f, code) ? std::numeric_limits<double>::quiet_NaN() : ((code & 0x80) ? -value : value);
  }
  return table;
}

TEST(Fp8Codes, TableHasTheFormatsLandmarks) {
  const std::vector<double> fn = definition_table(kFormats[0]), fnuz = definition_table(kFormats[1]);
  EXPECT_EQ(fn[0x38], 1.0);
  EXPECT_EQ(fn[0xb8], -1.0);
  EXPECT_EQ(fn[0x7e], 448.0);
  EXPECT_EQ(fn[0x08], std::ldexp(1.0, -6));  // smallest normal
  EXPECT_EQ(fn[0x01], std::ldexp(1.0, -9));  // smallest subnormal
  EXPECT_TRUE(std::signbit(fn[0x80]) && fn[0x80] == 0.0);
  EXPECT_TRUE(std::isnan(fn[0x7f]) && std::isnan(fn[0xff]));
  EXPECT_EQ(fnuz[0x40], 1.0);
  EXPECT_EQ(fnuz[0x7f], 240.0);
  EXPECT_EQ(fnuz[0xff], -240.0);
  EXPECT_EQ(fnuz[0x08], std::ldexp(1.0, -7));
  EXPECT_EQ(fnuz[0x01], std::ldexp(1.0, -10));
  EXPECT_TRUE(std::isnan(fnuz[0x80]));
  for (const Fp8Format &f : kFormats) {
    const std::vector<double> table = definition_table(f);
    int nans = 0;
    for (double x : table) nans += std::isnan(x);
    EXPECT_EQ(nans, f.format == FMHA_FP8_E4M3FN ? 2 : 1) << f.name;
    for (int code = 1; code < 0x7f; ++code) EXPECT_LT(table[code - 1], table[code]) << f.name << " code " << code;
    EXPECT_EQ(table[f.format == FMHA_FP8_E4M3FN ? 0x7e : 0x7f], f.largest) << f.name;
  }
}

TEST(Fp8Codes, OracleDecoderMatchesTheDefinition) {
  for (const Fp8Format &f : kFormats) {
    const std::vector<double> table = definition_table(f);
    for (int code = 0; code < kCodes; ++code) {
      const double decoded = fmha_oracle::fp8_value(static_cast<uint8_t>(code), f.format);
      const double expected = table[static_cast<size_t>(code)];
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(decoded)) << f.name << " code 0x" << std::hex << code;
      } else {
        EXPECT_EQ(decoded, expected) << f.name << " code 0x" << std::hex << code;
        EXPECT_EQ(std::signbit(decoded), std::signbit(expected)) << f.name << " code 0x" << std::hex << code;
      }
    }
  }
}

// One key, Hq = 256 query heads sharing one K/V head of D = 256 dims, unit
// scales, softmax scale 1: query head h is the one-hot vector e_h, so its
// score is K[h] and, with a single key, LSE[h] = K[h] (to float rounding)
// and O[h] = V exactly.
// V holds code d in dim d (all 256 codes); K holds them too with the NaN
// codes replaced by 0 (a NaN in K would reach every score).
class Fp8CodesThroughLibrary : public ::testing::TestWithParam<std::tuple<int, int32_t>> {};

TEST_P(Fp8CodesThroughLibrary, DecodeExactly) {
  const Fp8Format &f = kFormats[std::get<0>(GetParam())];
  const int32_t scale_kind = std::get<1>(GetParam());
  const std::vector<double> table = definition_table(f);
  SCOPED_TRACE(std::string(f.name) + (scale_kind == FMHA_KV_SCALE_F32 ? ", f32 scales" : ", f16x2 scales"));

  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  problem.backend = FMHA_BACKEND_CPU;
  problem.batch = 1;
  problem.max_q_seqlen = 1;
  problem.max_kv_seqlen = 1;
  problem.heads_q = kCodes;
  problem.heads_kv = 1;
  problem.head_dim_qk = kCodes;
  problem.q_dtype = FMHA_DTYPE_BF16;
  problem.o_dtype = FMHA_DTYPE_F32;
  problem.kv_quant = FMHA_KV_QUANT_FP8;
  problem.fp8_format = f.format;
  problem.kv_scale_kind = scale_kind;
  problem.kv_scale_granularity = FMHA_SCALE_PER_TENSOR;
  problem.softmax_scale = 1.0f;
  problem.split_k = 1;
  fmha_splitk_plan_t raw = nullptr;
  const fmha_status planned = fmha_splitk_create_plan(&problem, &raw);
  if (planned == FMHA_STATUS_NOT_SUPPORTED) GTEST_SKIP() << fmha_last_error_message();
  ASSERT_EQ(planned, FMHA_STATUS_SUCCESS) << fmha_last_error_message();
  std::unique_ptr<fmha_splitk_plan_s, void (*)(fmha_splitk_plan_t)> plan(raw, &fmha_splitk_destroy_plan);

  Tensor q(Dtype::bf16, {1, 1, kCodes, kCodes}), k(Dtype::u8, {1, 1, 1, kCodes}), v(Dtype::u8, {1, 1, 1, kCodes});
  for (int64_t h = 0; h < kCodes; ++h) q.set({0, 0, h, h}, 1.0);
  for (int64_t code = 0; code < kCodes; ++code) {
    k.set({0, 0, 0, code}, std::isnan(table[static_cast<size_t>(code)]) ? 0.0 : static_cast<double>(code));
    v.set({0, 0, 0, code}, static_cast<double>(code));
  }
  // Per-tensor unit scales: 1.0f, or fp16 1.0 (0x3c00) with shift +0.
  Tensor scale(scale_kind == FMHA_KV_SCALE_F32 ? Dtype::f32 : Dtype::i32, {1});
  scale.set({0}, scale_kind == FMHA_KV_SCALE_F32 ? 1.0 : 0x3c00);
  Tensor o(Dtype::f32, {1, 1, kCodes, kCodes}), lse(Dtype::f32, {1, kCodes, 1});
  o.poison();
  lse.poison();

  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = q.dl();
  args.k = k.dl();
  args.v = v.dl();
  args.o = o.dl();
  args.lse = lse.dl();
  args.k_scale = scale.dl();
  args.v_scale = scale.dl();
  ASSERT_EQ(fmha_splitk_run(plan.get(), &args), FMHA_STATUS_SUCCESS) << fmha_last_error_message();

  for (int64_t h = 0; h < kCodes; ++h) {
    const double key = std::isnan(table[static_cast<size_t>(h)]) ? 0.0 : table[static_cast<size_t>(h)];
    // The LSE passes through exp2/log2 with the scale folded in, which costs
    // a few float ulps; neighbouring codes differ by >= 1/16 relative.
    EXPECT_NEAR(lse.get({0, h, 0}), key, std::max(1e-6 * std::fabs(key), 1e-12))
        << "K code 0x" << std::hex << h << " read back as the score";
    for (int64_t code = 0; code < kCodes; ++code) {
      const double got = o.get({0, 0, h, code}), expected = table[static_cast<size_t>(code)];
      if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(got)) << "V code 0x" << std::hex << code << " (NaN) gave " << got << ", head " << h;
      else
        EXPECT_EQ(got, expected) << "V code 0x" << std::hex << code << ", head " << std::dec << h;
      if (::testing::Test::HasFailure()) return;  // one report, not 65536
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8CodesThroughLibrary,
                         ::testing::Combine(::testing::Values(0, 1),
                                            ::testing::Values(FMHA_KV_SCALE_F32, FMHA_KV_SCALE_F16X2_SCALE_SHIFT)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int32_t>> &info) {
                           return std::string(kFormats[std::get<0>(info.param)].name) +
                                  (std::get<1>(info.param) == FMHA_KV_SCALE_F32 ? "_f32" : "_f16x2");
                         });

}  // namespace
