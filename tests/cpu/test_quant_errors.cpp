// The API contract of quantised K/V, fp8 compute and MLA: every malformed
// problem or tensor gets INVALID_ARGUMENT and a message that names the
// argument (plan time: src/core/problem.cpp; run time: run_views.cpp).
#include <fmha_splitk/fmha_splitk.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "test_api_support.h"

namespace fmha_api_test {
namespace {

constexpr int64_t kBatch = 2, kKeys = 16, kHeadsQ = 4, kHeadsKv = 2, kHeadDim = 64;

// B = 2, Mq = 1, Mkv = 16, Hq = 4, Hkv = 2, D = 64, bf16 Q, dense K/V in
// the problem's quantisation, on the CPU backend.
fmha_splitk_problem quant_problem(int32_t kv_quant) {
  fmha_splitk_problem problem = basic_problem();
  problem.max_kv_seqlen = kKeys;
  problem.q_dtype = FMHA_DTYPE_BF16;
  problem.kv_quant = kv_quant;
  return problem;
}

void expect_invalid_problem(const fmha_splitk_problem &problem, const char *part) {
  fmha_splitk_plan_t plan = untouched_plan();
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&problem, &plan), FMHA_STATUS_INVALID_ARGUMENT, part);
  EXPECT_EQ(plan, untouched_plan());
}

TEST(QuantProblemErrors, Int4Groups) {
  fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_INT4);
  for (int32_t groups : {3, 16, -1}) {
    problem.kv_quant_groups = groups;
    SCOPED_TRACE(groups);
    expect_invalid_problem(problem, "problem.kv_quant_groups");
  }
  // 8 groups need D / 8 words to be a multiple of 8: D = 32 has 4.
  problem.kv_quant_groups = 8;
  problem.head_dim_qk = 32;
  expect_invalid_problem(problem, "does not divide the int4 words");
}

TEST(QuantProblemErrors, HeadDimNotInWholeWords) {
  fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_INT4);
  problem.head_dim_qk = 20;
  expect_invalid_problem(problem, "problem.head_dim_qk");
}

TEST(QuantProblemErrors, EnumsOutOfRange) {
  const struct {
    int32_t fmha_splitk_problem::*field;
    const char *name;
  } fields[] = {{&fmha_splitk_problem::kv_quant, "problem.kv_quant"},
                {&fmha_splitk_problem::fp8_format, "problem.fp8_format"},
                {&fmha_splitk_problem::kv_scale_kind, "problem.kv_scale_kind"},
                {&fmha_splitk_problem::kv_scale_granularity, "problem.kv_scale_granularity"},
                {&fmha_splitk_problem::q_scale_granularity, "problem.q_scale_granularity"}};
  for (const auto &f : fields) {
    fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_FP8);
    problem.*f.field = 9;
    SCOPED_TRACE(f.name);
    expect_invalid_problem(problem, f.name);
  }
}

TEST(QuantProblemErrors, Fp8ComputeNeedsFp8) {
  fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_INT4);
  problem.q_dtype = FMHA_DTYPE_FP8;
  problem.flags = FMHA_FLAG_FP8_QK;
  expect_invalid_problem(problem, "FMHA_FLAG_FP8_QK needs fp8 K/V");
  problem = quant_problem(FMHA_KV_QUANT_NONE);
  problem.flags = FMHA_FLAG_FP8_PV;
  expect_invalid_problem(problem, "FMHA_FLAG_FP8_PV needs fp8 K/V");
  problem = quant_problem(FMHA_KV_QUANT_FP8);
  problem.q_dtype = FMHA_DTYPE_FP8;  // without the flag
  expect_invalid_problem(problem, "FMHA_FLAG_FP8_QK");
  problem.q_dtype = FMHA_DTYPE_BF16;
  problem.flags = FMHA_FLAG_FP8_QK;  // without fp8 Q
  expect_invalid_problem(problem, "problem.q_dtype");
  problem.flags = 0;
  problem.o_dtype = FMHA_DTYPE_FP8;
  expect_invalid_problem(problem, "problem.o_dtype");
}

TEST(QuantProblemErrors, QuantisationIsNotAKvDtype) {
  fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_FP8);
  problem.kv_dtype = FMHA_DTYPE_FP8;
  expect_invalid_problem(problem, "problem.kv_quant");
}

TEST(QuantProblemErrors, HeadDimV) {
  fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_FP8);
  problem.head_dim_qk = 576;
  problem.head_dim_v = 512;  // without V_FROM_K
  expect_invalid_problem(problem, "problem.head_dim_v");
  problem.flags = FMHA_FLAG_V_FROM_K;
  problem.head_dim_v = 600;
  expect_invalid_problem(problem, "problem.head_dim_v");
}

// Valid host tensors of a quantised problem (zero data: only the shapes
// and dtypes matter here), the plan, and the args to mutate.
class QuantRun {
 public:
  explicit QuantRun(const fmha_splitk_problem &problem) : problem_(problem) {
    const int64_t groups = problem.kv_quant_groups ? problem.kv_quant_groups : 1;
    const int64_t dv = problem.head_dim_v ? problem.head_dim_v : problem.head_dim_qk;
    const bool fp8_q = (problem.flags & FMHA_FLAG_FP8_QK) != 0;
    q = Tensor(fp8_q ? Dtype::u8 : Dtype::bf16, {kBatch, 1, kHeadsQ, problem.head_dim_qk});
    o = Tensor(Dtype::bf16, {kBatch, 1, kHeadsQ, dv});
    const bool int4 = problem.kv_quant == FMHA_KV_QUANT_INT4;
    const Dtype kv = int4 ? Dtype::i32 : problem.kv_quant == FMHA_KV_QUANT_FP8 ? Dtype::u8 : Dtype::bf16;
    k = Tensor(kv, {kBatch, kKeys, kHeadsKv, int4 ? groups + problem.head_dim_qk / 8 : problem.head_dim_qk});
    v = Tensor(kv, {kBatch, kKeys, kHeadsKv, int4 ? groups + dv / 8 : dv});
    const Dtype scale = problem.kv_scale_kind == FMHA_KV_SCALE_F32 ? Dtype::f32 : Dtype::i32;
    k_scale = Tensor(scale, scale_shape(problem.kv_scale_granularity, kKeys, kHeadsKv));
    v_scale = k_scale;
    q_scale = Tensor(Dtype::f32, scale_shape(problem.q_scale_granularity, 1, kHeadsQ));
    args = FMHA_SPLITK_ARGS_INIT;
    args.q = q.dl();
    args.k = k.dl();
    args.v = (problem.flags & FMHA_FLAG_V_FROM_K) ? nullptr : v.dl();
    args.o = o.dl();
    if (problem.kv_quant == FMHA_KV_QUANT_FP8) {
      args.k_scale = k_scale.dl();
      args.v_scale = args.v ? v_scale.dl() : nullptr;
    }
    if (fp8_q) args.q_scale = q_scale.dl();
  }

  // False, with the library's message in `refusal`, when the backend does
  // not implement the mode (NOT_SUPPORTED).
  bool plan() {
    fmha_splitk_plan_t raw = nullptr;
    const fmha_status status = fmha_splitk_create_plan(&problem_, &raw);
    refusal = fmha_last_error_message();
    EXPECT_TRUE(status == FMHA_STATUS_SUCCESS || status == FMHA_STATUS_NOT_SUPPORTED) << refusal;
    plan_.reset(raw);
    return status == FMHA_STATUS_SUCCESS;
  }
  fmha_status run() const { return fmha_splitk_run(plan_.get(), &args); }

  Tensor q, k, v, o, k_scale, v_scale, q_scale;
  fmha_splitk_args args;
  std::string refusal;

 private:
  static std::vector<int64_t> scale_shape(int32_t granularity, int64_t rows, int64_t heads) {
    if (granularity == FMHA_SCALE_PER_ROW) return {kBatch, rows, heads};
    if (granularity == FMHA_SCALE_PER_HEAD) return {heads};
    return {1};
  }
  fmha_splitk_problem problem_;
  std::unique_ptr<fmha_splitk_plan_s, void (*)(fmha_splitk_plan_t)> plan_{nullptr, &fmha_splitk_destroy_plan};
};

#define PLAN_OR_SKIP(run)                             \
  do {                                                \
    if (!(run).plan()) GTEST_SKIP() << (run).refusal; \
    ASSERT_FMHA_RUN_OK(run);                          \
  } while (0)
#define ASSERT_FMHA_RUN_OK(run) \
  ASSERT_EQ((run).run(), FMHA_STATUS_SUCCESS) << "the unmodified run must succeed: " << fmha_last_error_message()

TEST(QuantRunErrors, Int4PackedWidth) {
  fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_INT4);
  problem.kv_quant_groups = 2;
  QuantRun run(problem);
  PLAN_OR_SKIP(run);
  // D / 8 words without the group words, and the group words of 1 group.
  for (int64_t words : {kHeadDim / 8, 1 + kHeadDim / 8}) {
    Tensor k(Dtype::i32, {kBatch, kKeys, kHeadsKv, words});
    run.args.k = k.dl();
    EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.k has shape");
    EXPECT_NE(std::string(fmha_last_error_message()).find("kv_quant_groups + D/8"), std::string::npos)
        << fmha_last_error_message();
  }
  run.args.k = run.k.dl();
  Tensor v(Dtype::i32, {kBatch, kKeys, kHeadsKv, kHeadDim / 8});
  run.args.v = v.dl();
  EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.v has shape");
  Tensor k_half(Dtype::bf16, {kBatch, kKeys, kHeadsKv, kHeadDim});
  run.args.v = run.v.dl();
  run.args.k = k_half.dl();
  EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.k has dtype");
  run.args.k = run.k.dl();
  run.args.k_scale = run.k_scale.dl();  // int4 carries its scales in the words
  EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.k_scale must be NULL");
}

TEST(QuantRunErrors, Fp8ScalesMissing) {
  QuantRun run(quant_problem(FMHA_KV_QUANT_FP8));
  PLAN_OR_SKIP(run);
  run.args.k_scale = nullptr;
  EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.k_scale is NULL");
  run.args.k_scale = run.k_scale.dl();
  run.args.v_scale = nullptr;
  EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.v_scale is NULL");
  run.args.v_scale = run.v_scale.dl();
  run.args.q_scale = run.q_scale.dl();  // without FP8_QK
  EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.q_scale must be NULL");
}

TEST(QuantRunErrors, Fp8ScaleShapes) {
  for (int32_t granularity : {FMHA_SCALE_PER_ROW, FMHA_SCALE_PER_HEAD, FMHA_SCALE_PER_TENSOR}) {
    SCOPED_TRACE(granularity);
    fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_FP8);
    problem.kv_scale_granularity = granularity;
    QuantRun run(problem);
    PLAN_OR_SKIP(run);
    // Each granularity's neighbour shape, and one head too many.
    Tensor other(Dtype::i32, granularity == FMHA_SCALE_PER_ROW ? std::vector<int64_t>{kHeadsKv}
                                                               : std::vector<int64_t>{kBatch, kKeys, kHeadsKv});
    Tensor extra_head(Dtype::i32, granularity == FMHA_SCALE_PER_ROW ? std::vector<int64_t>{kBatch, kKeys, kHeadsKv + 1}
                                  : granularity == FMHA_SCALE_PER_HEAD ? std::vector<int64_t>{kHeadsKv + 1}
                                                                       : std::vector<int64_t>{2});
    for (const Tensor *bad : {&other, &extra_head}) {
      run.args.k_scale = bad->dl();
      EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.k_scale has shape");
      run.args.k_scale = run.k_scale.dl();
      run.args.v_scale = bad->dl();
      EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.v_scale has shape");
      run.args.v_scale = run.v_scale.dl();
    }
  }
}

TEST(QuantRunErrors, Fp8ScaleDtypes) {
  for (int32_t kind : {FMHA_KV_SCALE_F16X2_SCALE_SHIFT, FMHA_KV_SCALE_F32}) {
    SCOPED_TRACE(kind);
    fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_FP8);
    problem.kv_scale_kind = kind;
    QuantRun run(problem);
    PLAN_OR_SKIP(run);
    Tensor wrong(kind == FMHA_KV_SCALE_F32 ? Dtype::i32 : Dtype::f32, {kBatch, kKeys, kHeadsKv});
    Tensor half(Dtype::f16, {kBatch, kKeys, kHeadsKv});
    for (const Tensor *bad : {&wrong, &half}) {
      run.args.k_scale = bad->dl();
      EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.k_scale has dtype");
      run.args.k_scale = run.k_scale.dl();
      run.args.v_scale = bad->dl();
      EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.v_scale has dtype");
      run.args.v_scale = run.v_scale.dl();
    }
  }
}

TEST(QuantRunErrors, Fp8DtypeCodeMustMatchFormat) {
  for (int32_t format : {FMHA_FP8_E4M3FN, FMHA_FP8_E4M3FNUZ}) {
    SCOPED_TRACE(format);
    fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_FP8);
    problem.fp8_format = format;
    problem.q_dtype = FMHA_DTYPE_FP8;
    problem.flags = FMHA_FLAG_FP8_QK;
    QuantRun run(problem);
    PLAN_OR_SKIP(run);
    // DLPack 1.1: 10 = e4m3fn, 11 = e4m3fnuz; the other format's code.
    const uint8_t matching = static_cast<uint8_t>(10 + format), other = static_cast<uint8_t>(11 - format);
    for (Tensor *t : {&run.q, &run.k, &run.v}) t->dl_mutable()->dtype.code = matching;
    ASSERT_FMHA_RUN_OK(run);
    for (auto [t, name] : {std::make_pair(&run.q, "args.q has dtype"), std::make_pair(&run.k, "args.k has dtype"),
                           std::make_pair(&run.v, "args.v has dtype")}) {
      t->dl_mutable()->dtype.code = other;
      EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, name);
      EXPECT_NE(std::string(fmha_last_error_message()).find("problem.fp8_format"), std::string::npos)
          << fmha_last_error_message();
      t->dl_mutable()->dtype.code = matching;
    }
    // int32 words hold D / 4 of them: one word more is a shape error.
    Tensor words(Dtype::i32, {kBatch, kKeys, kHeadsKv, kHeadDim / 4 + 1});
    run.args.k = words.dl();
    EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.k has shape");
  }
}

TEST(QuantRunErrors, Fp8QueryScale) {
  for (int32_t granularity : {FMHA_SCALE_PER_ROW, FMHA_SCALE_PER_HEAD, FMHA_SCALE_PER_TENSOR}) {
    SCOPED_TRACE(granularity);
    fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_FP8);
    problem.q_dtype = FMHA_DTYPE_FP8;
    problem.flags = FMHA_FLAG_FP8_QK;
    problem.q_scale_granularity = granularity;
    QuantRun run(problem);
    PLAN_OR_SKIP(run);
    run.args.q_scale = nullptr;
    EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.q_scale is NULL");
    Tensor wrong_dtype(Dtype::i32, run.q_scale.shape());
    run.args.q_scale = wrong_dtype.dl();
    EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.q_scale has dtype");
    Tensor wrong_shape(Dtype::f32, {kHeadsQ + 1});
    run.args.q_scale = wrong_shape.dl();
    EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.q_scale has shape");
    Tensor bf16_q(Dtype::bf16, run.q.shape());
    run.args.q_scale = run.q_scale.dl();
    run.args.q = bf16_q.dl();
    EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.q has dtype");
  }
}

TEST(QuantRunErrors, VFromKTakesNoV) {
  fmha_splitk_problem problem = quant_problem(FMHA_KV_QUANT_FP8);
  problem.flags = FMHA_FLAG_V_FROM_K;
  problem.heads_q = kHeadsQ;
  problem.heads_kv = kHeadsKv;
  problem.head_dim_v = 32;
  problem.kv_scale_kind = FMHA_KV_SCALE_F32;
  problem.kv_scale_granularity = FMHA_SCALE_PER_TENSOR;
  QuantRun run(problem);
  PLAN_OR_SKIP(run);
  run.args.v = run.k.dl();
  EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.v must be NULL");
  run.args.v = nullptr;
  run.args.v_scale = run.k_scale.dl();
  EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.v_scale must be NULL");
  run.args.v_scale = nullptr;
  Tensor o_wide(Dtype::bf16, {kBatch, 1, kHeadsQ, kHeadDim});  // Dqk instead of Dv
  run.args.o = o_wide.dl();
  EXPECT_FMHA_ERROR(run.run(), FMHA_STATUS_INVALID_ARGUMENT, "args.o has shape");
}

}  // namespace
}  // namespace fmha_api_test
