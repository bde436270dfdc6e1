// The backend registry with the fake plugins of tests/plugin on
// FMHA_SPLITK_PLUGIN_PATH: what fmha_get_backends() reports for each
// candidate, which backend AUTO, FMHA_SPLITK_BACKEND and problem.backend
// pick, and what happens when the requested one is missing. Each test runs
// in its own process (ctest) and sets the path before its first call into
// the library, which loads the registry.
#include <cstdlib>

#include "cpu/test_api_support.h"

namespace fmha_api_test {
namespace {

class Registry : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_FAKE_PLUGINS();
    size_t count = 0;
    ASSERT_EQ(fmha_get_backends(nullptr, 0, &count), FMHA_STATUS_SUCCESS);
    fmha_backend_info init = FMHA_BACKEND_INFO_INIT;
    infos_.assign(count, init);
    ASSERT_EQ(fmha_get_backends(infos_.data(), count, &count), FMHA_STATUS_SUCCESS);
  }
  void TearDown() override { unsetenv("FMHA_SPLITK_BACKEND"); }

  // The candidate loaded from `variant`'s directory (the test fails if none).
  const fmha_backend_info &candidate(const char *variant) const {
    const std::string directory = fake_plugin_dir(variant) + "/";
    for (const fmha_backend_info &info : infos_)
      if (std::string(info.path).rfind(directory, 0) == 0) return info;
    ADD_FAILURE() << "no candidate from " << directory;
    static const fmha_backend_info none{};
    return none;
  }
  bool cuda_available() const {
    for (const fmha_backend_info &info : infos_)
      if (info.backend == FMHA_BACKEND_CUDA && info.available) return true;
    return false;
  }
  static fmha_splitk_plan_info info_of(const fmha_splitk_problem &problem) {
    fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
    fmha_splitk_plan_t plan = make_plan(problem);
    if (plan == nullptr) return info;
    EXPECT_EQ(fmha_splitk_get_plan_info(plan, &info), FMHA_STATUS_SUCCESS);
    fmha_splitk_destroy_plan(plan);
    return info;
  }
  static fmha_splitk_problem auto_problem() {
    fmha_splitk_problem problem = basic_problem();
    problem.backend = FMHA_BACKEND_AUTO;
    return problem;
  }

  std::vector<fmha_backend_info> infos_;
};

bool contains(const char *text, const char *part) { return std::string(text).find(part) != std::string::npos; }

TEST_F(Registry, ListsTheCpuFirst) {
  const fmha_backend_info &cpu = infos_.front();
  EXPECT_EQ(cpu.backend, FMHA_BACKEND_CPU);
  EXPECT_STREQ(cpu.name, "cpu");
  EXPECT_STREQ(cpu.path, "");
  EXPECT_EQ(cpu.available, 1);
  EXPECT_GT(cpu.score, 0);
  EXPECT_EQ(cpu.device_count, 1);
  EXPECT_TRUE(contains(cpu.reason, "taken")) << cpu.reason;
}

TEST_F(Registry, TakesTheWorkingPlugin) {
  const fmha_backend_info &good = candidate("good");
  EXPECT_EQ(good.available, 1);
  EXPECT_EQ(good.backend, FMHA_BACKEND_HIP);
  EXPECT_STREQ(good.name, "fake");
  EXPECT_EQ(good.score, 5);
  EXPECT_EQ(good.device_count, 1);
  EXPECT_STREQ(good.device_name, "fake device 0");
  EXPECT_TRUE(contains(good.reason, "taken: score 5")) << good.reason;
}

TEST_F(Registry, KeepsTheBestScorePerKind) {
  const fmha_backend_info &low = candidate("lowscore");
  EXPECT_EQ(low.available, 0);
  EXPECT_EQ(low.backend, FMHA_BACKEND_HIP);
  EXPECT_EQ(low.score, 2);
  EXPECT_TRUE(contains(low.reason, "not taken")) << low.reason;
  EXPECT_TRUE(contains(low.reason, candidate("good").path)) << low.reason;
}

TEST_F(Registry, SaysWhyEachBrokenPluginWasNotTaken) {
  const fmha_backend_info &score0 = candidate("score0");
  EXPECT_EQ(score0.available, 0);
  EXPECT_EQ(score0.score, 0);
  EXPECT_TRUE(contains(score0.reason, "score 0: no driver/device/arch")) << score0.reason;
  EXPECT_STREQ(score0.name, "fake");  // from the file name: its table was never read

  const fmha_backend_info &noinit = candidate("noinit");
  EXPECT_EQ(noinit.available, 0);
  EXPECT_TRUE(contains(noinit.reason, "missing symbol fmha_backend_init_v1")) << noinit.reason;

  const fmha_backend_info &badversion = candidate("badversion");
  EXPECT_EQ(badversion.available, 0);
  EXPECT_TRUE(contains(badversion.reason, "version mismatch")) << badversion.reason;
  EXPECT_TRUE(contains(badversion.reason, "999")) << badversion.reason;

  const fmha_backend_info &nulltable = candidate("nulltable");
  EXPECT_EQ(nulltable.available, 0);
  EXPECT_TRUE(contains(nulltable.reason, "returned NULL")) << nulltable.reason;

  const fmha_backend_info &junk = candidate("junk");
  EXPECT_EQ(junk.available, 0);
  EXPECT_EQ(junk.backend, FMHA_BACKEND_AUTO);
  EXPECT_STREQ(junk.name, "junk");
  EXPECT_TRUE(contains(junk.reason, "dlopen failed")) << junk.reason;
}

TEST_F(Registry, CountCanExceedCapacity) {
  fmha_backend_info first = FMHA_BACKEND_INFO_INIT;
  size_t count = 0;
  EXPECT_FMHA_OK(fmha_get_backends(&first, 1, &count));
  EXPECT_EQ(count, infos_.size());
  EXPECT_GE(count, 1 + fake_variants().size());
  EXPECT_EQ(first.backend, FMHA_BACKEND_CPU);
}

TEST_F(Registry, CpuAlwaysWorks) {
  const fmha_splitk_plan_info info = info_of(basic_problem());
  EXPECT_EQ(info.backend, FMHA_BACKEND_CPU);
  EXPECT_STREQ(info.backend_name, "cpu");
}

TEST_F(Registry, AutoPrefersAGpuBackend) {
  const fmha_splitk_plan_info info = info_of(auto_problem());
  if (cuda_available()) {
    EXPECT_EQ(info.backend, FMHA_BACKEND_CUDA);
    return;
  }
  EXPECT_EQ(info.backend, FMHA_BACKEND_HIP);
  EXPECT_STREQ(info.backend_name, "fake");
  EXPECT_STREQ(info.kernel_name, "fake");
  EXPECT_STREQ(info.device_name, "fake device 0");
  EXPECT_EQ(info.num_workers, 4);
}

TEST_F(Registry, EnvironmentForcesTheCpu) {
  ASSERT_EQ(setenv("FMHA_SPLITK_BACKEND", "cpu", 1), 0);
  EXPECT_EQ(info_of(auto_problem()).backend, FMHA_BACKEND_CPU);
  // An explicit problem.backend wins over the environment.
  fmha_splitk_problem problem = basic_problem();
  problem.backend = FMHA_BACKEND_HIP;
  EXPECT_EQ(info_of(problem).backend, FMHA_BACKEND_HIP);
}

TEST_F(Registry, EnvironmentIsCaseInsensitive) {
  ASSERT_EQ(setenv("FMHA_SPLITK_BACKEND", "HIP", 1), 0);
  EXPECT_EQ(info_of(auto_problem()).backend, FMHA_BACKEND_HIP);
}

TEST_F(Registry, BadEnvironmentValueIsAnError) {
  ASSERT_EQ(setenv("FMHA_SPLITK_BACKEND", "tpu", 1), 0);
  const fmha_splitk_problem problem = auto_problem();
  fmha_splitk_plan_t plan = untouched_plan();
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&problem, &plan), FMHA_STATUS_INVALID_ARGUMENT,
                    "FMHA_SPLITK_BACKEND = \"tpu\"");
  EXPECT_EQ(plan, untouched_plan());
  EXPECT_EQ(info_of(basic_problem()).backend, FMHA_BACKEND_CPU);  // explicit: the variable is not read
}

TEST_F(Registry, MissingCudaIsUnavailableWithAReason) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA backend is loaded";
  fmha_splitk_problem problem = basic_problem();
  problem.backend = FMHA_BACKEND_CUDA;
  fmha_splitk_plan_t plan = untouched_plan();
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&problem, &plan), FMHA_STATUS_BACKEND_UNAVAILABLE,
                    "problem.backend = cuda: the cuda backend is unavailable");
  // The candidates whose kind is unknown are listed with their reasons.
  EXPECT_TRUE(contains(fmha_last_error_message(), "score 0: no driver/device/arch")) << fmha_last_error_message();
  EXPECT_TRUE(contains(fmha_last_error_message(), "plugins searched for in")) << fmha_last_error_message();
  EXPECT_EQ(plan, untouched_plan());

  ASSERT_EQ(setenv("FMHA_SPLITK_BACKEND", "cuda", 1), 0);
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&problem, &plan), FMHA_STATUS_BACKEND_UNAVAILABLE, "problem.backend");
  const fmha_splitk_problem automatic = auto_problem();
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&automatic, &plan), FMHA_STATUS_BACKEND_UNAVAILABLE,
                    "FMHA_SPLITK_BACKEND = cuda");
}

TEST_F(Registry, DeviceIdBeyondTheDevices) {
  fmha_splitk_problem problem = basic_problem();
  problem.backend = FMHA_BACKEND_HIP;
  problem.device_id = 1;
  fmha_splitk_plan_t plan = untouched_plan();
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&problem, &plan), FMHA_STATUS_INVALID_ARGUMENT,
                    "problem.device_id = 1 is outside [0, 1)");
  EXPECT_EQ(plan, untouched_plan());
}

TEST_F(Registry, PluginOwnedWorkspaceIsAllocatedAndUsed) {
  fmha_splitk_problem problem = basic_problem();
  problem.backend = FMHA_BACKEND_HIP;
  problem.split_k = 4;
  fmha_splitk_plan_t plan = make_plan(problem);
  ASSERT_NE(plan, nullptr);
  size_t workspace_size = 0;
  EXPECT_FMHA_OK(fmha_splitk_plan_workspace_size(plan, &workspace_size));
  EXPECT_GT(workspace_size, 0u);

  const DenseTensors tensors(problem);
  const DLTensor q = on_device(tensors.q, kDLROCM), k = on_device(tensors.k, kDLROCM),
                 v = on_device(tensors.v, kDLROCM), o = on_device(tensors.o, kDLROCM);
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = &q;
  args.k = &k;
  args.v = &v;
  args.o = &o;
  const int32_t runs = fake_record().runs;
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &args));
  EXPECT_EQ(fake_record().runs, runs + 1);
  EXPECT_NE(fake_record().run.workspace, nullptr);
  EXPECT_EQ(fake_record().run.workspace_size, workspace_size);

  // Host tensors do not belong to a HIP plan.
  args.q = tensors.q.dl();
  EXPECT_FMHA_ERROR(fmha_splitk_run(plan, &args), FMHA_STATUS_INVALID_ARGUMENT, "args.q is on cpu:0; expected rocm:0");
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Registry, MergesGoByDeviceType) {
  const Tensor o_part(Dtype::f32, {1, 2, 1, 2, 8}), lse_part(Dtype::f32, {1, 1, 2, 2});
  const DLTensor o = on_device(o_part, kDLROCM), lse = on_device(lse_part, kDLROCM);
  const DLTensor *o_list[] = {&o, &o};
  const DLTensor *lse_list[] = {&lse, &lse};
  fmha_merge_args args = FMHA_MERGE_ARGS_INIT;
  args.num_partials = 2;
  args.o_list = o_list;
  args.lse_list = lse_list;
  args.o = &o;
  const int32_t merges = fake_record().merges;
  EXPECT_FMHA_OK(fmha_merge(&args));
  EXPECT_EQ(fake_record().merges, merges + 1);
}

}  // namespace
}  // namespace fmha_api_test
