// The merge inside the tile kernel (forward.cu, plan_forward): runs on the
// plan's own workspace (NULL args.workspace) of a split plan (arithmetic
// pieces or the scheduling pass's) merge each
// sequence's slots in the last CTA of each row tile, counting with
// counters that every run must leave zero. So one plan is run several
// times, each against the oracle with NaN-poisoned outputs and each with
// the same bits as the first; between them a run on a caller's workspace
// (the combine pass) must neither disturb the counters nor be disturbed.
#include <fmha_splitk/fmha_splitk.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "features/harness.h"
#include "gpu/cuda_util.h"
#include "oracle/oracle.h"

namespace fmha_test {
namespace {

std::vector<AttentionCase> split_cases() {
  std::vector<AttentionCase> cases;
  const auto base = [](const char *name, std::vector<int32_t> kv_len) {
    AttentionCase c;
    c.name = name;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.head_dim = 128;
    c.kv_len = std::move(kv_len);
    c.null_workspace = true;
    return c;
  };
  // BALANCED over one sequence (its pieces arithmetic on its length).
  cases.push_back(base("b1_balanced", {6000}));
  // BALANCED over a dense batch, sinks, f32 O.
  AttentionCase c = base("dense_balanced_sinks_f32o", {3000, 3000, 3000});
  c.sinks = true, c.o_dtype = FMHA_DTYPE_F32;
  cases.push_back(c);
  // UNIFORM (forced split), causal Mq 4: 16 rows of 4 queries, f16.
  c = base("padded_split7_causal_mq4_f16", {700, 64, 333});
  c.kv_layout = FMHA_KV_PADDED, c.split_k = 7, c.q_len = {4}, c.mask = FMHA_MASK_CAUSAL, c.dtype = Dtype::f16;
  cases.push_back(c);
  // More splits than keys: empty slots (LSE -inf) in the merge.
  c = base("padded_split40_d64", {64, 1, 100});
  c.kv_layout = FMHA_KV_PADDED, c.split_k = 40, c.head_dim = 64;
  cases.push_back(c);
  // Paged, a bias, a sequence shorter than its chunks.
  c = base("paged_split4_bias", {300, 17, 129});
  c.kv_layout = FMHA_KV_PAGED, c.split_k = 4, c.bias = true;
  cases.push_back(c);
  // Two row tiles per K/V head (Mq 16 x 2 heads = 32 rows), ragged.
  c = base("ragged_mq16_split3", {500, 260});
  c.kv_layout = FMHA_KV_RAGGED, c.heads_q = 4, c.q_len = {16}, c.split_k = 3;
  cases.push_back(c);
  // MQA, 32 query rows per K/V head (row pairs where the plan takes them).
  c = base("dense_mqa_mq2_split5", {900, 900});
  c.heads_q = 16, c.heads_kv = 1, c.q_len = {2}, c.split_k = 5;
  cases.push_back(c);
  // D 256 and MLA-sized D 512 tiles, grouped heads.
  c = base("dense_d256_groups2_split4", {400, 400});
  c.head_dim = 256, c.groups = 2, c.split_k = 4;
  cases.push_back(c);
  c = base("padded_d512_split3_no_lse", {260, 90});
  c.kv_layout = FMHA_KV_PADDED, c.head_dim = 512, c.heads_q = 4, c.heads_kv = 4, c.split_k = 3, c.lse = false;
  cases.push_back(c);
  // BALANCED over uneven lengths (the scheduling pass's pieces): a long
  // sequence cut at several ranges, an empty one, one of a single key.
  c = base("paged_balanced_uneven", {5000, 17, 0, 2600, 1, 700});
  c.kv_layout = FMHA_KV_PAGED;
  cases.push_back(c);
  // ... with queries of varying counts, causal, sinks, f16.
  c = base("ragged_balanced_varlen_q_causal_sinks", {3000, 40, 1200});
  c.kv_layout = FMHA_KV_RAGGED, c.q_layout = FMHA_Q_VARLEN, c.q_len = {1, 3, 2}, c.heads_q = 4;
  c.mask = FMHA_MASK_CAUSAL, c.sinks = true, c.dtype = Dtype::f16;
  cases.push_back(c);
  // int4 K/V at D 256 (the quantised tile kernel).
  c = base("padded_int4_d256_split3", {400, 129});
  c.kv_layout = FMHA_KV_PADDED, c.head_dim = 256, c.split_k = 3, c.kv_quant = FMHA_KV_QUANT_INT4;
  cases.push_back(c);
  // int4 and fp8 K/V at D 128 (the streaming kernel, which merges inside
  // only the scheduling pass's pieces): one-group int4 rows over a paged
  // uneven batch; fp8 with fp32 scales per row, likewise; fp8 with fp16x2
  // scale + shift over a padded uneven batch, Mq 4 (two query n-tiles).
  c = base("paged_int4_row_balanced_uneven", {3000, 1, 1000, 2500});
  c.kv_layout = FMHA_KV_PAGED, c.kv_quant = FMHA_KV_QUANT_INT4;
  cases.push_back(c);
  c = base("paged_fp8_f32_balanced_uneven", {4000, 33, 1500, 0});
  c.kv_layout = FMHA_KV_PAGED, c.kv_quant = FMHA_KV_QUANT_FP8, c.kv_scale_kind = FMHA_KV_SCALE_F32;
  cases.push_back(c);
  c = base("padded_fp8_scale_shift_mq4_balanced_uneven", {2700, 260, 1900});
  c.kv_layout = FMHA_KV_PADDED, c.kv_quant = FMHA_KV_QUANT_FP8, c.q_len = {4};
  cases.push_back(c);
  // A batch of 300 uneven sequences (BALANCED, split: up to 9000 keys,
  // about 400 ranges on 132 SMs): each thread of a CTA that cuts its own
  // range walks several sequences (kInline), and ranges hold whole
  // sequences between their two cut ends. (Up to 900 keys the plan did
  // not split: run 80.)
  std::vector<int32_t> many(300);
  for (size_t b = 0; b < many.size(); ++b) many[b] = b % 11 == 3 ? 0 : static_cast<int32_t>((b * 7919) % 9000 + 1);
  c = base("paged_balanced_b300_uneven", many);
  c.kv_layout = FMHA_KV_PAGED, c.heads_q = 4, c.heads_kv = 1;
  cases.push_back(c);
  return cases;
}

bool names_fused_merge(const fmha_splitk_plan_info &info) {
  return std::string(info.kernel_name).find("+fused_merge") != std::string::npos;
}

bool names_inline_ranges(const fmha_splitk_plan_info &info) {
  return std::string(info.kernel_name).find("+inline_ranges") != std::string::npos;
}

// One plan of `spec` run on its own workspace, its own, a caller's and its
// own again, each against the oracle, the own-workspace runs with the
// first run's bits. `pass`: the plan must not cut its ranges in the kernel.
void check_repeated_runs(const AttentionCase &spec, bool pass) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  SCOPED_TRACE(spec.describe());
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(data->oracle_inputs()).forward();
  const DeviceInputs inputs = upload_inputs(*data);
  fmha_splitk_problem problem = data->problem;
  problem.backend = device_under_test().backend();
  const PlanPtr plan = make_plan(problem);
  const double tolerance = case_tolerance(data->spec, output_dtype(data->spec), ref.o);

  // Own workspace, own workspace, a caller's workspace, own workspace.
  const bool own[] = {true, true, false, true};
  Tensor first_o;
  Tensor first_lse;
  for (size_t run = 0; run < std::size(own); ++run) {
    SCOPED_TRACE("run " + std::to_string(run) + (own[run] ? " (own workspace)" : " (caller's workspace)"));
    data->spec.null_workspace = own[run];
    const RunResult result = run_planned(*data, inputs, problem, plan.get());
    ASSERT_EQ(result.status, FMHA_STATUS_SUCCESS) << result.error;
    SCOPED_TRACE(plan_note(result.info));
    EXPECT_TRUE(names_fused_merge(result.info)) << result.info.kernel_name;
    if (pass) {
      EXPECT_FALSE(names_inline_ranges(result.info)) << result.info.kernel_name;
    }
    EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(result.o), ref, tolerance));
    EXPECT_TRUE(outside_untouched(result.o, "O"));
    if (data->spec.lse) {
      EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(result.lse), ref.lse));
      EXPECT_TRUE(outside_untouched(result.lse, "LSE"));
    }
    if (run == 0) {
      first_o = result.o;
      first_lse = result.lse;
    } else if (own[run]) {
      EXPECT_TRUE(bitwise_equal(result.o, first_o)) << "O differs from the first run's";
      if (data->spec.lse) {
        EXPECT_TRUE(bitwise_equal(result.lse, first_lse)) << "LSE differs from the first run's";
      }
    }
  }
}

class FusedMerge : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(FusedMerge, RepeatedRunsOfOnePlan) {
  FMHA_SKIP_WITHOUT_CUDA();
  check_repeated_runs(GetParam(), false);
}

// The same with FMHA_SPLITK_TEST_INLINE_RANGES=0 (read at plan creation):
// BALANCED batches of uneven lengths take the scheduling pass's pieces
// (which the kernels otherwise cut themselves); the others are unchanged.
TEST_P(FusedMerge, RepeatedRunsWithTheSchedulingPass) {
  FMHA_SKIP_WITHOUT_CUDA();
  const ScopedEnv pass("FMHA_SPLITK_TEST_INLINE_RANGES", "0");
  check_repeated_runs(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(Splits, FusedMerge, ::testing::ValuesIn(split_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

// FMHA_SPLITK_TEST_FUSED_MERGE=0 (read at plan creation) keeps the combine
// pass, as do a merge too long for one CTA (300 slots of 4 rows: 300
// float4 loads per thread) and batch-invariant plans (whether to fuse
// would depend on the batch); an unsplit plan has neither.
TEST(FusedMerge, PlanNamesTheMerge) {
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
  const auto kernel_name = [](const fmha_splitk_problem &problem) {
    const PlanPtr plan = make_plan(problem);
    fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
    fmha_check(fmha_splitk_get_plan_info(plan.get(), &info), "fmha_splitk_get_plan_info");
    return std::string(info.kernel_name);
  };
  EXPECT_NE(kernel_name(p).find("+fused_merge"), std::string::npos) << kernel_name(p);
  {
    const ScopedEnv off("FMHA_SPLITK_TEST_FUSED_MERGE", "0");
    EXPECT_NE(kernel_name(p).find("+combine"), std::string::npos) << kernel_name(p);
  }
  p.split_k = 300;
  EXPECT_NE(kernel_name(p).find("+combine"), std::string::npos) << kernel_name(p);
  // The streaming (int4) kernel over a dense batch: the combine pass.
  p.split_k = 4;
  p.kv_quant = FMHA_KV_QUANT_INT4;
  EXPECT_NE(kernel_name(p).find("stream"), std::string::npos) << kernel_name(p);
  EXPECT_NE(kernel_name(p).find("+combine"), std::string::npos) << kernel_name(p);
  p.kv_quant = FMHA_KV_QUANT_NONE;
  p.split_k = 0;
  p.flags = FMHA_FLAG_BATCH_INVARIANT;
  p.kv_chunk_size = 256;
  EXPECT_NE(kernel_name(p).find("+combine"), std::string::npos) << kernel_name(p);
  p.flags = 0;
  p.kv_chunk_size = 0;
  // A paged batch: lengths only on the device, so each CTA cuts its own
  // range from them and the last CTA of each sequence merges; with
  // FMHA_SPLITK_TEST_INLINE_RANGES=0 the scheduling pass partitions.
  p.batch = 4;
  p.kv_layout = FMHA_KV_PAGED;
  p.page_size = 16;
  p.num_pages = 4 * 4096 / 16;
  p.max_pages_per_seq = 4096 / 16;
  EXPECT_NE(kernel_name(p).find("+inline_ranges+fused_merge"), std::string::npos) << kernel_name(p);
  {
    const ScopedEnv pass("FMHA_SPLITK_TEST_INLINE_RANGES", "0");
    EXPECT_NE(kernel_name(p).find("+fused_merge"), std::string::npos) << kernel_name(p);
    EXPECT_EQ(kernel_name(p).find("+inline_ranges"), std::string::npos) << kernel_name(p);
  }
  p.batch = 1;
  p.kv_layout = FMHA_KV_DENSE;
  p.page_size = 0;
  p.num_pages = 0;
  p.max_pages_per_seq = 0;
  p.split_k = 1;
  EXPECT_EQ(kernel_name(p).find('+'), std::string::npos) << kernel_name(p);
}

}  // namespace
}  // namespace fmha_test
