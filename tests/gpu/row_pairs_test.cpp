// The tile kernel's two row shapes (16 query rows per CTA; row pairs, 32
// rows as two MMA row tiles over each K/V fragment) on the same cases, each
// forced by FMHA_SPLITK_TEST_ROW_PAIRS (read at plan creation). Plans take
// pairs by themselves where a K/V head has more than 16 query rows (MQA, Mq
// 16 of GQA); forced on, pairs also meet cases whose second row tile is all
// padding, and forced off, the 16-row kernel meets the many-row cases.
#include <fmha_splitk/fmha_splitk.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "features/harness.h"
#include "gpu/cuda_util.h"

namespace fmha_test {
namespace {

// Rows per K/V head (Mq x Hq / Hkv) of 1 to 64: one pair half full, one
// pair full, a full and a partial pair, two pairs; under every K/V layout,
// the masks (causal rows see different keys within a pair), bias,
// softcap, sinks, partials, split counts from 1 to more than the keys.
std::vector<AttentionCase> row_pair_cases() {
  std::vector<AttentionCase> cases;
  const auto base = [](const char *name, int32_t heads_q, int32_t heads_kv, std::vector<int32_t> kv_len) {
    AttentionCase c;
    c.name = name;
    c.heads_q = heads_q;
    c.heads_kv = heads_kv;
    c.head_dim = 128;
    c.kv_len = std::move(kv_len);
    return c;
  };
  AttentionCase c = base("mqa32_dense_s1", 32, 1, {300, 300});
  c.split_k = 1;
  cases.push_back(c);
  c = base("mqa32_dense_s7_f32o", 32, 1, {300, 300});
  c.split_k = 7, c.o_dtype = FMHA_DTYPE_F32;
  cases.push_back(c);
  c = base("gqa4_mq16_causal_paged_ps16", 8, 2, {200, 77});
  c.kv_layout = FMHA_KV_PAGED, c.page_size = 16, c.q_len = {16}, c.mask = FMHA_MASK_CAUSAL;
  cases.push_back(c);
  c = base("gqa8_mq6_local_ragged_bias", 16, 2, {150, 90});
  c.kv_layout = FMHA_KV_RAGGED, c.page_size = 16, c.q_len = {6}, c.mask = FMHA_MASK_LOCAL, c.window_left = 40;
  c.window_right = 3, c.bias = true;
  cases.push_back(c);
  c = base("mqa20_padded_sinks_auto", 20, 1, {1000, 3, 257});
  c.kv_layout = FMHA_KV_PADDED, c.sinks = true;
  cases.push_back(c);
  c = base("mqa48_paged_ps1_f16_s2", 48, 1, {130, 65});
  c.kv_layout = FMHA_KV_PAGED, c.page_size = 1, c.dtype = Dtype::f16, c.split_k = 2;
  cases.push_back(c);
  c = base("gqa4_mq8_gappy_softcap_partials_s3", 8, 2, {180, 64});
  c.kv_layout = FMHA_KV_GAPPY, c.q_len = {8}, c.softcap = 20.0f, c.q_amplitude = 3.0, c.write_partials = true;
  c.split_k = 3;
  cases.push_back(c);
  c = base("mqa16_mq2_invariant", 16, 1, {333, 333, 333});
  c.q_len = {2}, c.batch_invariant = true, c.kv_chunk_size = 64;
  cases.push_back(c);
  c = base("mqa32_padded_nan_padding_s300", 32, 1, {64, 1, 100});
  c.kv_layout = FMHA_KV_PADDED, c.nan_padding = true, c.split_k = 300;
  cases.push_back(c);
  c = base("varlen_q_gqa4_causal_padded", 8, 2, {120, 40, 70});
  c.kv_layout = FMHA_KV_PADDED, c.q_layout = FMHA_Q_VARLEN, c.q_len = {9, 1, 5}, c.mask = FMHA_MASK_CAUSAL;
  cases.push_back(c);
  c = base("gqa4_d64_mq8_s5", 8, 2, {260, 260});
  c.head_dim = 64, c.q_len = {8}, c.split_k = 5;
  cases.push_back(c);
  c = base("mqa32_d64_f16_strided", 32, 1, {200, 200});
  c.head_dim = 64, c.dtype = Dtype::f16, c.strided_q_o = true, c.strided_kv = true;
  cases.push_back(c);
  c = base("gqa8_two_groups_bf16_bias_mask_row", 16, 2, {161, 161});
  c.groups = 2, c.q_len = {2}, c.bias = true, c.bias_masks_first_row = true;
  cases.push_back(c);
  c = base("gqa4_single_row_tile", 4, 1, {500});
  c.split_k = 4;
  cases.push_back(c);
  return cases;
}

class RowPairs : public ::testing::TestWithParam<std::tuple<AttentionCase, bool>> {};

TEST_P(RowPairs, MatchesOracle) {
  FMHA_SKIP_WITHOUT_CUDA();
  const auto &[spec, pairs] = GetParam();
  const ScopedEnv force("FMHA_SPLITK_TEST_ROW_PAIRS", pairs ? "1" : "0");
  check_attention_case(spec);
}

INSTANTIATE_TEST_SUITE_P(Native, RowPairs, ::testing::Combine(::testing::ValuesIn(row_pair_cases()), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<AttentionCase, bool>> &info) {
                           return std::get<0>(info.param).name + (std::get<1>(info.param) ? "_r32" : "_r16");
                         });

// A plan of `heads_q` / `heads_kv` heads, Mq 1, D `head_dim`, bf16: the
// kernel it names.
std::string kernel_name(int32_t heads_q, int32_t heads_kv, int32_t head_dim) {
  fmha_splitk_problem p = FMHA_SPLITK_PROBLEM_INIT;
  p.backend = FMHA_BACKEND_CUDA;
  p.batch = 4;
  p.max_q_seqlen = 1;
  p.max_kv_seqlen = 4096;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim_qk = head_dim;
  p.q_dtype = FMHA_DTYPE_BF16;
  p.o_dtype = FMHA_DTYPE_BF16;
  p.flags = FMHA_FLAG_EXTERNAL_WORKSPACE;
  fmha_splitk_plan_t plan = nullptr;
  fmha_check(fmha_splitk_create_plan(&p, &plan), "fmha_splitk_create_plan");
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  fmha_check(fmha_splitk_get_plan_info(plan, &info), "fmha_splitk_get_plan_info");
  fmha_splitk_destroy_plan(plan);
  return info.kernel_name;
}

// Plans take pairs by themselves for more than 16 rows per K/V head in the
// buckets that have them, and name them ("_r32/").
TEST(RowPairs, PlanChoosesAndNamesThem) {
  FMHA_SKIP_WITHOUT_CUDA();
  const auto pairs = [](const std::string &name) { return name.find("_r32/") != std::string::npos; };
  EXPECT_TRUE(pairs(kernel_name(32, 1, 128))) << kernel_name(32, 1, 128);  // MQA: 32 rows
  EXPECT_TRUE(pairs(kernel_name(32, 1, 64))) << kernel_name(32, 1, 64);
  EXPECT_FALSE(pairs(kernel_name(32, 8, 128))) << kernel_name(32, 8, 128);  // 4 rows
  EXPECT_FALSE(pairs(kernel_name(32, 1, 256))) << kernel_name(32, 1, 256);  // no D 256 pairs
  for (const char *forced : {"1", "0"}) {
    const ScopedEnv force("FMHA_SPLITK_TEST_ROW_PAIRS", forced);
    EXPECT_EQ(pairs(kernel_name(32, 8, 128)), forced[0] == '1') << forced;
    EXPECT_EQ(pairs(kernel_name(32, 1, 128)), forced[0] == '1') << forced;
  }
}

}  // namespace
}  // namespace fmha_test
