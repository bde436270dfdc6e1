// Autotuning on the CUDA backend (issue 11): fmha_splitk_autotune times the
// plan's candidates with events on the caller's stream, accepts only those
// agreeing with the heuristic, and the tuned plan, its cached twin and the
// caller's O (left holding the winner's result) all match the float64
// oracle. The accuracy guard rejects a candidate made wrong by its hook.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "features/harness.h"
#include "gpu/cuda_util.h"
#include "oracle/oracle.h"

namespace fmha_test {
namespace {

struct TuneCase {
  std::string name;
  int32_t kv_layout;
  Dtype dtype;
  std::vector<int32_t> kv_len;
  int32_t q_len, heads_q, heads_kv, head_dim;
  bool length_hint = false;
};

std::string case_name(const ::testing::TestParamInfo<TuneCase> &info) { return info.param.name; }

class CudaAutotune : public ::testing::TestWithParam<TuneCase> {
 protected:
  void SetUp() override {
    fmha_tuning_cache_clear();
    unsetenv("FMHA_SPLITK_TEST_CORRUPT_CANDIDATE");
  }
  void TearDown() override {
    fmha_tuning_cache_clear();
    unsetenv("FMHA_SPLITK_TEST_CORRUPT_CANDIDATE");
  }
};

AttentionCase spec_of(const TuneCase &c) {
  AttentionCase spec;
  spec.name = c.name;
  spec.dtype = c.dtype;
  spec.kv_layout = c.kv_layout;
  spec.kv_len = c.kv_len;
  spec.q_len = {c.q_len};
  spec.heads_q = c.heads_q;
  spec.heads_kv = c.heads_kv;
  spec.head_dim = c.head_dim;
  spec.length_hint = c.length_hint;
  return spec;
}

fmha_splitk_config config_of(fmha_splitk_plan_t plan, int32_t index) {
  fmha_splitk_config config = FMHA_SPLITK_CONFIG_INIT;
  fmha_check(fmha_splitk_get_plan_config(plan, index, &config), "fmha_splitk_get_plan_config");
  return config;
}

int32_t config_count(fmha_splitk_plan_t plan) {
  int32_t count = 0;
  fmha_check(fmha_splitk_plan_config_count(plan, &count), "fmha_splitk_plan_config_count");
  return count;
}

fmha_splitk_plan_info info_of(fmha_splitk_plan_t plan) {
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  fmha_check(fmha_splitk_get_plan_info(plan, &info), "fmha_splitk_get_plan_info");
  return info;
}

TEST_P(CudaAutotune, TunedPlansMatchTheOracle) {
  FMHA_SKIP_WITHOUT_CUDA();
  const TuneCase &c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const AttentionCase spec = spec_of(c);
  SCOPED_TRACE(spec.describe());
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(data->oracle_inputs()).forward();
  const auto tolerance = attention_tolerance(c.dtype, output_dtype(spec), ref.o);

  Device &device = device_under_test();
  const DeviceInputs in = upload_inputs(*data);
  const PlanPtr plan = make_plan(data->problem);
  ASSERT_GT(config_count(plan.get()), 1) << "a balanced plan lists several partitions";
  Tensor o = data->make_o(), lse = data->make_lse();
  const DeviceTensor o_dev = device.upload(o), lse_dev = device.upload(lse);
  const Stream stream;
  const auto check_outputs = [&](const char *what) {
    SCOPED_TRACE(what);
    copy_to_host(o_dev, o, stream.get());
    copy_to_host(lse_dev, lse, stream.get());
    EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(o), ref, tolerance));
    EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(lse), ref.lse));
    EXPECT_TRUE(outside_untouched(o, "O"));
  };

  // Autotune ignores args.workspace and leaves O with the winner's result.
  poison_async(o_dev, stream.get());
  poison_async(lse_dev, stream.get());
  const fmha_splitk_args tune_args = run_args(in, o_dev, &lse_dev, nullptr, 0, stream.get());
  fmha_splitk_autotune_options options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  options.warmup_runs = 1;
  options.timed_runs = 5;
  options.max_total_ms = 1e7;  // every candidate timed, also under compute-sanitizer
  fmha_check(fmha_splitk_autotune(plan.get(), &tune_args, &options), "fmha_splitk_autotune");
  check_outputs("after autotune");

  const fmha_splitk_plan_info info = info_of(plan.get());
  EXPECT_EQ(info.config_source, FMHA_CONFIG_AUTOTUNE);
  const fmha_splitk_config chosen = config_of(plan.get(), info.config_index);
  EXPECT_NE(chosen.selected, 0);
  for (int32_t i = 0; i < config_count(plan.get()); ++i) {
    const fmha_splitk_config config = config_of(plan.get(), i);
    SCOPED_TRACE(config.name);
    EXPECT_EQ(config.tune_state, FMHA_TUNE_ACCEPTED);
    EXPECT_GT(config.time_us, 0);
    EXPECT_LE(config.error_ratio, 1.0);
    EXPECT_LE(chosen.time_us, config.time_us);
  }

  // The tuned plan with a workspace of the size it now asks for.
  const DeviceBuffer workspace(workspace_size(plan.get()));
  const fmha_splitk_args args = run_args(in, o_dev, &lse_dev, workspace.get(), workspace.bytes(), stream.get());
  poison_async(o_dev, stream.get());
  poison_async(lse_dev, stream.get());
  fmha_check(fmha_splitk_run(plan.get(), &args), "fmha_splitk_run (tuned)");
  check_outputs("tuned plan");

  // A plan created later takes the winner from the cache.
  const PlanPtr cached = make_plan(data->problem);
  EXPECT_EQ(info_of(cached.get()).config_source, FMHA_CONFIG_TUNING_CACHE);
  EXPECT_EQ(info_of(cached.get()).config_index, info.config_index);
  const DeviceBuffer cached_workspace(workspace_size(cached.get()));
  const fmha_splitk_args cached_args =
      run_args(in, o_dev, &lse_dev, cached_workspace.get(), cached_workspace.bytes(), stream.get());
  poison_async(o_dev, stream.get());
  poison_async(lse_dev, stream.get());
  fmha_check(fmha_splitk_run(cached.get(), &cached_args), "fmha_splitk_run (cached)");
  check_outputs("plan from the cache");
}

TEST_P(CudaAutotune, AccuracyGuardRejectsAWrongCandidate) {
  FMHA_SKIP_WITHOUT_CUDA();
  const TuneCase &c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const AttentionCase spec = spec_of(c);
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(data->oracle_inputs()).forward();
  Device &device = device_under_test();
  const DeviceInputs in = upload_inputs(*data);
  const PlanPtr plan = make_plan(data->problem);
  const int32_t count = config_count(plan.get());
  ASSERT_GT(count, 1);
  const std::string wrong = std::to_string(count - 1);
  ASSERT_EQ(setenv("FMHA_SPLITK_TEST_CORRUPT_CANDIDATE", wrong.c_str(), 1), 0);
  Tensor o = data->make_o(), lse = data->make_lse();
  const DeviceTensor o_dev = device.upload(o), lse_dev = device.upload(lse);
  const Stream stream;
  poison_async(o_dev, stream.get());
  const fmha_splitk_args args = run_args(in, o_dev, &lse_dev, nullptr, 0, stream.get());
  fmha_splitk_autotune_options options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  options.warmup_runs = 1;
  options.timed_runs = 3;
  options.max_total_ms = 1e7;  // the wrong candidate is reached, also under compute-sanitizer
  options.flags = FMHA_AUTOTUNE_NO_CACHE_STORE;
  fmha_check(fmha_splitk_autotune(plan.get(), &args, &options), "fmha_splitk_autotune");
  const fmha_splitk_config rejected = config_of(plan.get(), count - 1);
  EXPECT_EQ(rejected.tune_state, FMHA_TUNE_REJECTED);
  EXPECT_GT(rejected.error_ratio, 1.0);
  EXPECT_EQ(rejected.selected, 0);
  size_t entries = 1;
  fmha_check(fmha_tuning_cache_entries(&entries), "fmha_tuning_cache_entries");
  EXPECT_EQ(entries, 0u);
  copy_to_host(o_dev, o, stream.get());
  EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(o), ref, attention_tolerance(c.dtype, output_dtype(spec), ref.o)));
}

INSTANTIATE_TEST_SUITE_P(
    Problems, CudaAutotune,
    ::testing::Values(TuneCase{"dense_gqa_bf16_b2", FMHA_KV_DENSE, Dtype::bf16, {6000, 6000}, 1, 32, 8, 128},
                      TuneCase{"paged_mqa_f16_b3",
                               FMHA_KV_PAGED,
                               Dtype::f16,
                               {9000, 300, 4100},
                               1,
                               16,
                               1,
                               64,
                               true},
                      TuneCase{"padded_mq4_bf16_b1", FMHA_KV_PADDED, Dtype::bf16, {20000}, 4, 8, 2, 256}),
    case_name);

}  // namespace
}  // namespace fmha_test
