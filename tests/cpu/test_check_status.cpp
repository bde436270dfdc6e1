// fmha_splitk_check_status on the host side: argument errors, plans that
// have nothing to report (unchecked plans, the CPU backend, which validates
// the metadata before computing, and a plugin without a check_status
// entry). The device-side checks themselves are in tests/gpu/checked_test.cpp.
#include <fmha_splitk/fmha_splitk.h>
#include <gtest/gtest.h>

#include "cpu/test_api_support.h"

namespace fmha_api_test {
namespace {

struct PlanGuard {
  explicit PlanGuard(fmha_splitk_plan_t p) : plan(p) {}
  ~PlanGuard() { fmha_splitk_destroy_plan(plan); }
  PlanGuard(const PlanGuard &) = delete;
  PlanGuard &operator=(const PlanGuard &) = delete;
  fmha_splitk_plan_t plan;
};

TEST(CheckStatus, NullPlan) {
  EXPECT_FMHA_ERROR(fmha_splitk_check_status(nullptr, nullptr, nullptr), FMHA_STATUS_INVALID_ARGUMENT,
                    "plan is NULL");
}

TEST(CheckStatus, UncheckedPlanReportsNothing) {
  const PlanGuard guard(make_plan(basic_problem()));
  ASSERT_NE(guard.plan, nullptr);
  EXPECT_FMHA_OK(fmha_splitk_check_status(guard.plan, nullptr, nullptr));
}

TEST(CheckStatus, CheckedCpuRunReportsNothing) {
  fmha_splitk_problem problem = basic_problem();
  problem.flags = FMHA_FLAG_CHECKED;
  problem.split_k = 2;  // a workspace, so that the caller's one is passed below
  const PlanGuard guard(make_plan(problem));
  ASSERT_NE(guard.plan, nullptr);
  DenseTensors tensors(problem);
  const fmha_splitk_args args = tensors.args();
  EXPECT_FMHA_OK(fmha_splitk_run(guard.plan, &args));
  EXPECT_FMHA_OK(fmha_splitk_check_status(guard.plan, nullptr, nullptr));

  size_t bytes = 0;
  ASSERT_EQ(fmha_splitk_plan_workspace_size(guard.plan, &bytes), FMHA_STATUS_SUCCESS);
  ASSERT_GT(bytes, 0u);
  Tensor workspace(Dtype::u8, {static_cast<int64_t>(bytes + 256)});
  auto *aligned = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(workspace.data()) + 255) / 256 * 256);
  fmha_splitk_args with_workspace = args;
  with_workspace.workspace = aligned;
  with_workspace.workspace_size = bytes;
  EXPECT_FMHA_OK(fmha_splitk_run(guard.plan, &with_workspace));
  // The stream is ignored on CPU; any value is fine.
  EXPECT_FMHA_OK(fmha_splitk_check_status(guard.plan, aligned, reinterpret_cast<void *>(0x1234)));
}

TEST(CheckStatus, CpuRejectsBadMetadataInTheRunItself) {
  // The CPU backend validates before computing: the run fails, and there is
  // nothing left for check_status to report.
  fmha_splitk_problem problem = basic_problem();
  problem.flags = FMHA_FLAG_CHECKED;
  problem.kv_layout = FMHA_KV_PADDED;
  const PlanGuard guard(make_plan(problem));
  ASSERT_NE(guard.plan, nullptr);
  DenseTensors tensors(problem);
  Tensor kv_seqlen(Dtype::i32, {problem.batch});
  kv_seqlen.fill_int({10, 100});
  fmha_splitk_args args = tensors.args();
  args.kv_seqlen = kv_seqlen.dl();
  EXPECT_FMHA_ERROR(fmha_splitk_run(guard.plan, &args), FMHA_STATUS_INVALID_ARGUMENT, "kv_seqlen[1] = 100");
  EXPECT_FMHA_OK(fmha_splitk_check_status(guard.plan, nullptr, nullptr));

  kv_seqlen.fill_int({10, 64});
  EXPECT_FMHA_OK(fmha_splitk_run(guard.plan, &args));
  EXPECT_FMHA_OK(fmha_splitk_check_status(guard.plan, nullptr, nullptr));
}

TEST(CheckStatus, PluginWithoutTheEntryReportsNothing) {
  SKIP_WITHOUT_FAKE_PLUGINS();
  fmha_splitk_problem problem = basic_problem();
  problem.backend = FMHA_BACKEND_HIP;  // the fake plugin: its table has no check_status
  problem.flags = FMHA_FLAG_CHECKED;
  problem.split_k = 2;
  const PlanGuard guard(make_plan(problem));
  ASSERT_NE(guard.plan, nullptr);
  EXPECT_FMHA_OK(fmha_splitk_check_status(guard.plan, nullptr, nullptr));
}

}  // namespace
}  // namespace fmha_api_test
