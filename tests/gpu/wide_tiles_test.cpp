// The tile kernel's two variants at native D 128 (4 warps in 2 stages; 8
// warps in 3 stages, which plans take for grids of at most two CTAs per
// SM) on the same cases, each forced by FMHA_SPLITK_TEST_WIDE_TILES (read
// at plan creation): most feature cases are small grids, so without it the
// 4-warp kernel would meet few of them.
#include <fmha_splitk/fmha_splitk.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "features/harness.h"
#include "gpu/cuda_util.h"

namespace fmha_test {
namespace {

std::vector<AttentionCase> d128_cases() {
  std::vector<AttentionCase> cases;
  const auto base = [](const char *name, std::vector<int32_t> kv_len) {
    AttentionCase c;
    c.name = name;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.head_dim = 128;
    c.kv_len = std::move(kv_len);
    return c;
  };
  AttentionCase c = base("dense_s7", {300, 300});
  c.split_k = 7;
  cases.push_back(c);
  c = base("padded_auto_sinks_f32o", {1000, 3, 257});
  c.kv_layout = FMHA_KV_PADDED, c.sinks = true, c.o_dtype = FMHA_DTYPE_F32;
  cases.push_back(c);
  c = base("paged_ps1_f16_s2", {130, 65});
  c.kv_layout = FMHA_KV_PAGED, c.page_size = 1, c.dtype = Dtype::f16, c.split_k = 2;
  cases.push_back(c);
  c = base("paged_ps16_causal_mq4", {200, 77});
  c.kv_layout = FMHA_KV_PAGED, c.page_size = 16, c.q_len = {4}, c.mask = FMHA_MASK_CAUSAL;
  cases.push_back(c);
  c = base("ragged_local_bias", {150, 90});
  c.kv_layout = FMHA_KV_RAGGED, c.page_size = 16, c.mask = FMHA_MASK_LOCAL, c.window_left = 40;
  c.window_right = 3, c.bias = true;
  cases.push_back(c);
  c = base("gappy_softcap_partials_s3", {180, 64});
  c.kv_layout = FMHA_KV_GAPPY, c.softcap = 20.0f, c.q_amplitude = 3.0, c.write_partials = true, c.split_k = 3;
  cases.push_back(c);
  c = base("dense_mqa_mq2_invariant", {333, 333, 333});
  c.heads_q = 16, c.heads_kv = 1, c.q_len = {2}, c.batch_invariant = true, c.kv_chunk_size = 64;
  cases.push_back(c);
  c = base("padded_nan_padding_s300", {64, 1, 100});
  c.kv_layout = FMHA_KV_PADDED, c.nan_padding = true, c.split_k = 300;
  cases.push_back(c);
  return cases;
}

class WideTiles : public ::testing::TestWithParam<std::tuple<AttentionCase, bool>> {};

TEST_P(WideTiles, MatchesOracle) {
  FMHA_SKIP_WITHOUT_CUDA();
  const auto &[spec, wide] = GetParam();
  const ScopedEnv force("FMHA_SPLITK_TEST_WIDE_TILES", wide ? "1" : "0");
  check_attention_case(spec);
}

INSTANTIATE_TEST_SUITE_P(D128, WideTiles, ::testing::Combine(::testing::ValuesIn(d128_cases()), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<AttentionCase, bool>> &info) {
                           return std::get<0>(info.param).name + (std::get<1>(info.param) ? "_w8" : "_w4");
                         });

// The plan names the variant it runs: "_s3_w8/" for the wide one.
TEST(WideTiles, PlanNamesTheVariant) {
  FMHA_SKIP_WITHOUT_CUDA();
  fmha_splitk_problem p = FMHA_SPLITK_PROBLEM_INIT;
  p.backend = FMHA_BACKEND_CUDA;
  p.batch = 1;
  p.max_q_seqlen = 1;
  p.max_kv_seqlen = 4096;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_dim_qk = 128;
  p.q_dtype = FMHA_DTYPE_BF16;
  p.o_dtype = FMHA_DTYPE_BF16;
  p.flags = FMHA_FLAG_EXTERNAL_WORKSPACE;
  for (const char *forced : {"1", "0"}) {
    const ScopedEnv force("FMHA_SPLITK_TEST_WIDE_TILES", forced);
    fmha_splitk_plan_t plan = nullptr;
    fmha_check(fmha_splitk_create_plan(&p, &plan), "fmha_splitk_create_plan");
    fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
    fmha_check(fmha_splitk_get_plan_info(plan, &info), "fmha_splitk_get_plan_info");
    fmha_splitk_destroy_plan(plan);
    const bool wide = std::string(info.kernel_name).find("_s3_w8/") != std::string::npos;
    EXPECT_EQ(wide, forced[0] == '1') << info.kernel_name;
  }
}

}  // namespace
}  // namespace fmha_test
