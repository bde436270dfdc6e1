// The API contract outside runs and merges: status strings, version, the
// last-error message, struct_size rules, every error path of
// fmha_splitk_create_plan, plan queries and fmha_get_backends.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>

#include "cpu/test_api_support.h"

namespace fmha_api_test {
namespace {

TEST(StatusString, NamesEveryStatus) {
  EXPECT_STREQ(fmha_status_string(FMHA_STATUS_SUCCESS), "success");
  EXPECT_STREQ(fmha_status_string(FMHA_STATUS_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(fmha_status_string(FMHA_STATUS_NOT_SUPPORTED), "not supported");
  EXPECT_STREQ(fmha_status_string(FMHA_STATUS_BACKEND_UNAVAILABLE), "backend unavailable");
  EXPECT_STREQ(fmha_status_string(FMHA_STATUS_INSUFFICIENT_WORKSPACE), "insufficient workspace");
  EXPECT_STREQ(fmha_status_string(FMHA_STATUS_OUT_OF_MEMORY), "out of memory");
  EXPECT_STREQ(fmha_status_string(FMHA_STATUS_DEVICE_ERROR), "device error");
  EXPECT_STREQ(fmha_status_string(FMHA_STATUS_INTERNAL_ERROR), "internal error");
  EXPECT_STREQ(fmha_status_string(static_cast<fmha_status>(8)), "unknown status");
  EXPECT_STREQ(fmha_status_string(static_cast<fmha_status>(-1)), "unknown status");
}

TEST(Version, MatchesTheHeader) {
  EXPECT_EQ(fmha_version_code(), FMHA_SPLITK_VERSION_CODE);
  const std::string expected = std::to_string(FMHA_SPLITK_VERSION_MAJOR) + "." +
                               std::to_string(FMHA_SPLITK_VERSION_MINOR) + "." +
                               std::to_string(FMHA_SPLITK_VERSION_PATCH);
  EXPECT_EQ(expected, fmha_version());
}

TEST(LastError, SetByFailureClearedBySuccess) {
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(nullptr, nullptr), FMHA_STATUS_INVALID_ARGUMENT, "problem");
  // Queries leave the message alone so it can be printed beside the status.
  fmha_status_string(FMHA_STATUS_INVALID_ARGUMENT);
  fmha_version();
  EXPECT_STRNE(fmha_last_error_message(), "");
  size_t count = 0;
  EXPECT_FMHA_OK(fmha_get_backends(nullptr, 0, &count));
}

TEST(LastError, IsPerThread) {
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(nullptr, nullptr), FMHA_STATUS_INVALID_ARGUMENT, "problem");
  std::string other_thread_message = "unset";
  std::thread([&] { other_thread_message = fmha_last_error_message(); }).join();
  EXPECT_EQ(other_thread_message, "");
  EXPECT_STRNE(fmha_last_error_message(), "");
}

// One error path of fmha_splitk_create_plan: a change to the basic problem,
// the status it must give and a part of the message (the field's name).
struct ProblemCase {
  const char *name;
  std::function<void(fmha_splitk_problem &)> change;
  fmha_status status;
  const char *message;
};

// gtest prints a case by its name.
void PrintTo(const ProblemCase &c, std::ostream *out) { *out << c.name; }

class CreatePlanError : public ::testing::TestWithParam<ProblemCase> {};

TEST_P(CreatePlanError, ReportsTheField) {
  fmha_splitk_problem problem = basic_problem();
  GetParam().change(problem);
  fmha_splitk_plan_t plan = untouched_plan();
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&problem, &plan), GetParam().status, GetParam().message);
  EXPECT_EQ(plan, untouched_plan());
}

constexpr fmha_status kInvalid = FMHA_STATUS_INVALID_ARGUMENT;

void paged(fmha_splitk_problem &p) {
  p.kv_layout = FMHA_KV_PAGED;
  p.page_size = 16;
  p.num_pages = 8;
  p.max_pages_per_seq = 4;
}

const int32_t kHintTooLong[2] = {65, 3};

const ProblemCase kProblemCases[] = {
    {"BackendOutOfRange", [](auto &p) { p.backend = 7; }, kInvalid, "problem.backend = 7"},
    {"NegativeDeviceId", [](auto &p) { p.device_id = -1; }, kInvalid, "problem.device_id = -1"},
    {"UnknownFlag", [](auto &p) { p.flags = 1u << 20; }, kInvalid, "problem.flags"},
    {"Reserved0", [](auto &p) { p.reserved0 = 1; }, kInvalid, "problem.reserved0 = 1"},
    {"NegativeBatch", [](auto &p) { p.batch = -1; }, kInvalid, "problem.batch = -1"},
    {"BatchBeyondInt32", [](auto &p) { p.batch = int64_t{1} << 31; }, kInvalid, "problem.batch = 2147483648"},
    {"NegativeMaxQSeqlen", [](auto &p) { p.max_q_seqlen = -2; }, kInvalid, "problem.max_q_seqlen = -2"},
    {"NegativeMaxKvSeqlen", [](auto &p) { p.max_kv_seqlen = -3; }, kInvalid, "problem.max_kv_seqlen = -3"},
    {"NegativeGroups", [](auto &p) { p.groups = -1; }, kInvalid, "problem.groups = -1"},
    {"ZeroHeadsQ", [](auto &p) { p.heads_q = 0; }, kInvalid, "problem.heads_q = 0"},
    {"ZeroHeadsKv", [](auto &p) { p.heads_kv = 0; }, kInvalid, "problem.heads_kv = 0"},
    {"HeadsKvNotDividing",
     [](auto &p) {
       p.heads_q = 32;
       p.heads_kv = 3;
     },
     kInvalid, "problem.heads_kv = 3 does not divide problem.heads_q = 32"},
    {"HeadDimNotMultipleOf8", [](auto &p) { p.head_dim_qk = 60; }, kInvalid, "problem.head_dim_qk = 60"},
    {"HeadDimTooSmall", [](auto &p) { p.head_dim_qk = 8; }, kInvalid, "problem.head_dim_qk = 8"},
    {"HeadDimTooLarge", [](auto &p) { p.head_dim_qk = 264; }, kInvalid, "problem.head_dim_qk = 264"},
    {"HeadDimVDiffers", [](auto &p) { p.head_dim_v = 32; }, kInvalid, "problem.head_dim_v = 32"},
    {"HeadDimVFromKTooLarge",
     [](auto &p) {
       p.flags = FMHA_FLAG_V_FROM_K;
       p.head_dim_v = 72;
     },
     kInvalid, "problem.head_dim_v = 72"},
    {"HeadDimVFromKNotMultipleOf8",
     [](auto &p) {
       p.flags = FMHA_FLAG_V_FROM_K;
       p.head_dim_v = 36;
     },
     kInvalid, "problem.head_dim_v = 36"},
    {"QLayoutOutOfRange", [](auto &p) { p.q_layout = 2; }, kInvalid, "problem.q_layout = 2"},
    {"KvLayoutOutOfRange", [](auto &p) { p.kv_layout = 5; }, kInvalid, "problem.kv_layout = 5"},
    {"MaskOutOfRange", [](auto &p) { p.mask = 4; }, kInvalid, "problem.mask = 4"},
    {"QDtypeDefault", [](auto &p) { p.q_dtype = FMHA_DTYPE_DEFAULT; }, kInvalid, "problem.q_dtype = 0"},
    {"QDtypeF32", [](auto &p) { p.q_dtype = FMHA_DTYPE_F32; }, kInvalid, "problem.q_dtype = 3"},
    {"QDtypeOutOfRange", [](auto &p) { p.q_dtype = 9; }, kInvalid, "problem.q_dtype = 9"},
    {"QFp8WithoutFlag", [](auto &p) { p.q_dtype = FMHA_DTYPE_FP8; }, kInvalid, "FMHA_FLAG_FP8_QK"},
    {"Fp8QkFlagWithF16Q", [](auto &p) { p.flags = FMHA_FLAG_FP8_QK; }, kInvalid, "FMHA_FLAG_FP8_QK"},
    {"Fp8QkWithoutFp8Kv",
     [](auto &p) {
       p.q_dtype = FMHA_DTYPE_FP8;
       p.flags = FMHA_FLAG_FP8_QK;
     },
     kInvalid, "problem.kv_quant"},
    {"Fp8PvWithoutFp8Kv", [](auto &p) { p.flags = FMHA_FLAG_FP8_PV; }, kInvalid, "FMHA_FLAG_FP8_PV"},
    {"KvDtypeF32", [](auto &p) { p.kv_dtype = FMHA_DTYPE_F32; }, kInvalid, "problem.kv_dtype = 3"},
    {"KvDtypeFp8", [](auto &p) { p.kv_dtype = FMHA_DTYPE_FP8; }, kInvalid, "problem.kv_quant"},
    {"KvDtypeOutOfRange", [](auto &p) { p.kv_dtype = -1; }, kInvalid, "problem.kv_dtype = -1"},
    {"ODtypeFp8", [](auto &p) { p.o_dtype = FMHA_DTYPE_FP8; }, kInvalid, "problem.o_dtype"},
    {"ODtypeOutOfRange", [](auto &p) { p.o_dtype = 5; }, kInvalid, "problem.o_dtype = 5"},
    {"KvQuantOutOfRange", [](auto &p) { p.kv_quant = 3; }, kInvalid, "problem.kv_quant = 3"},
    {"Fp8FormatOutOfRange", [](auto &p) { p.fp8_format = 2; }, kInvalid, "problem.fp8_format = 2"},
    {"KvScaleKindOutOfRange", [](auto &p) { p.kv_scale_kind = 2; }, kInvalid, "problem.kv_scale_kind = 2"},
    {"KvScaleGranularityOutOfRange", [](auto &p) { p.kv_scale_granularity = 3; }, kInvalid,
     "problem.kv_scale_granularity = 3"},
    {"QScaleGranularityOutOfRange", [](auto &p) { p.q_scale_granularity = -1; }, kInvalid,
     "problem.q_scale_granularity = -1"},
    {"Int4GroupsNotPowerOfTwo",
     [](auto &p) {
       p.kv_quant = FMHA_KV_QUANT_INT4;
       p.kv_quant_groups = 3;
     },
     kInvalid, "problem.kv_quant_groups = 3"},
    {"Int4GroupsNotDividingTheRow",
     [](auto &p) {
       p.head_dim_qk = 16;
       p.kv_quant = FMHA_KV_QUANT_INT4;
       p.kv_quant_groups = 4;
     },
     kInvalid, "problem.kv_quant_groups = 4"},
    {"PagedPageSizeZero",
     [](auto &p) {
       paged(p);
       p.page_size = 0;
     },
     kInvalid, "problem.page_size = 0"},
    {"PagedPageSizeNotPowerOfTwo",
     [](auto &p) {
       paged(p);
       p.page_size = 24;
     },
     kInvalid, "problem.page_size = 24"},
    {"PagedPageSizeTooLarge",
     [](auto &p) {
       paged(p);
       p.page_size = 512;
     },
     kInvalid, "problem.page_size = 512"},
    {"RaggedPageSizeZero", [](auto &p) { p.kv_layout = FMHA_KV_RAGGED; }, kInvalid, "problem.page_size = 0"},
    {"PagedNoPages",
     [](auto &p) {
       paged(p);
       p.num_pages = 0;
     },
     kInvalid, "problem.num_pages = 0"},
    {"PagedBlockTableTooNarrow",
     [](auto &p) {
       paged(p);
       p.max_pages_per_seq = 3;
     },
     kInvalid, "problem.max_pages_per_seq = 3"},
    {"LocalWindowLeftNegative",
     [](auto &p) {
       p.mask = FMHA_MASK_LOCAL;
       p.window_left = -1;
     },
     kInvalid, "problem.window_left = -1"},
    {"LocalWindowRightNegative",
     [](auto &p) {
       p.mask = FMHA_MASK_LOCAL;
       p.window_right = -4;
     },
     kInvalid, "problem.window_right = -4"},
    {"SoftcapNegative", [](auto &p) { p.softcap = -1.0f; }, kInvalid, "problem.softcap"},
    {"SoftcapNan", [](auto &p) { p.softcap = std::nanf(""); }, kInvalid, "problem.softcap"},
    {"SoftmaxScaleInfinite", [](auto &p) { p.softmax_scale = std::numeric_limits<float>::infinity(); }, kInvalid,
     "problem.softmax_scale"},
    {"SplitKNegative", [](auto &p) { p.split_k = -1; }, kInvalid, "problem.split_k = -1"},
    {"SplitKTooLarge", [](auto &p) { p.split_k = 4097; }, kInvalid, "problem.split_k = 4097"},
    {"KvChunkSizeNegative", [](auto &p) { p.kv_chunk_size = -256; }, kInvalid, "problem.kv_chunk_size = -256"},
    {"WritePartialsWithoutSplitK", [](auto &p) { p.flags = FMHA_FLAG_WRITE_PARTIALS; }, kInvalid,
     "FMHA_FLAG_WRITE_PARTIALS needs a forced problem.split_k"},
    {"WritePartialsWithBatchInvariant",
     [](auto &p) {
       p.split_k = 2;
       p.flags = FMHA_FLAG_WRITE_PARTIALS | FMHA_FLAG_BATCH_INVARIANT;
     },
     kInvalid, "exclusive"},
    {"SizeOverflowsInt64",
     [](auto &p) {
       p.batch = std::numeric_limits<int32_t>::max();
       p.max_q_seqlen = std::numeric_limits<int32_t>::max();
       p.heads_q = 1 << 20;
       p.heads_kv = 1;
     },
     kInvalid, "overflows int64"},
    {"KvSeqlenHintTooLong", [](auto &p) { p.kv_seqlen_hint = kHintTooLong; }, kInvalid,
     "problem.kv_seqlen_hint[0] = 65"},
    {"StructSizeTooSmall", [](auto &p) { p.struct_size = 8; }, kInvalid, "problem.struct_size = 8"},
    {"StructSizeZero", [](auto &p) { p.struct_size = 0; }, kInvalid, "problem.struct_size = 0"},
};

INSTANTIATE_TEST_SUITE_P(Problem, CreatePlanError, ::testing::ValuesIn(kProblemCases),
                         [](const auto &info) { return std::string(info.param.name); });

TEST(CreatePlan, NullProblem) {
  fmha_splitk_plan_t plan = untouched_plan();
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(nullptr, &plan), kInvalid, "problem is NULL");
  EXPECT_EQ(plan, untouched_plan());
}

TEST(CreatePlan, NullPlan) {
  const fmha_splitk_problem problem = basic_problem();
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&problem, nullptr), kInvalid, "plan is NULL");
}

TEST(CreatePlan, BasicProblemSucceeds) {
  const fmha_splitk_problem problem = basic_problem();
  fmha_splitk_plan_t plan = nullptr;
  EXPECT_FMHA_OK(fmha_splitk_create_plan(&problem, &plan));
  ASSERT_NE(plan, nullptr);
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  EXPECT_FMHA_OK(fmha_splitk_get_plan_info(plan, &info));
  EXPECT_EQ(info.backend, FMHA_BACKEND_CPU);
  EXPECT_EQ(info.device_id, 0);
  EXPECT_STREQ(info.backend_name, "cpu");
  EXPECT_GE(info.split_k, 1);
  EXPECT_GE(info.num_workers, 1);
  EXPECT_STRNE(info.kernel_name, "");
  size_t workspace = 1;
  EXPECT_FMHA_OK(fmha_splitk_plan_workspace_size(plan, &workspace));
  EXPECT_EQ(workspace, info.workspace_size);
  fmha_splitk_destroy_plan(plan);
}

TEST(CreatePlan, CpuIgnoresDeviceId) {
  fmha_splitk_problem problem = basic_problem();
  problem.device_id = 3;
  fmha_splitk_plan_t plan = make_plan(problem);
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  EXPECT_FMHA_OK(fmha_splitk_get_plan_info(plan, &info));
  EXPECT_EQ(info.device_id, 0);
  fmha_splitk_destroy_plan(plan);
}

TEST(CreatePlan, ForcedSplitKIsReported) {
  fmha_splitk_problem problem = basic_problem();
  problem.split_k = 4;
  fmha_splitk_plan_t plan = make_plan(problem);
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  EXPECT_FMHA_OK(fmha_splitk_get_plan_info(plan, &info));
  EXPECT_EQ(info.split_k, 4);
  EXPECT_GT(info.workspace_size, 0u);
  fmha_splitk_destroy_plan(plan);
}

TEST(CreatePlan, KvSeqlenHintIsReadDuringCreateOnly) {
  fmha_splitk_problem problem = basic_problem();
  std::vector<int32_t> hint = {64, 3};
  problem.kv_seqlen_hint = hint.data();
  fmha_splitk_plan_t plan = make_plan(problem);
  // The plan keeps no pointer to the hint: it may go away at once.
  hint = {};
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  EXPECT_FMHA_OK(fmha_splitk_get_plan_info(plan, &info));
  fmha_splitk_destroy_plan(plan);
}

TEST(CreatePlan, EmptyBatchIsValid) {
  fmha_splitk_problem problem = basic_problem();
  problem.batch = 0;
  fmha_splitk_destroy_plan(make_plan(problem));
}

TEST(CreatePlan, FieldsOfUnusedFeaturesAreIgnored) {
  fmha_splitk_problem problem = basic_problem();
  problem.page_size = 3;  // only PAGED / RAGGED read the page geometry
  problem.num_pages = -1;
  problem.window_left = -5;     // only local masks read the windows
  problem.kv_quant_groups = 3;  // only int4 K/V reads the groups
  fmha_splitk_destroy_plan(make_plan(problem));
}

// The CPU backend computes every problem the core accepts, quantised K/V
// and FMHA_FLAG_CHECKED included (the feature suites check the results).
TEST(CreatePlan, CpuPlansQuantisedKvAndChecked) {
  fmha_splitk_problem problem = basic_problem();
  problem.kv_quant = FMHA_KV_QUANT_INT4;
  problem.flags = FMHA_FLAG_CHECKED;
  fmha_splitk_plan_t plan = nullptr;
  EXPECT_FMHA_OK(fmha_splitk_create_plan(&problem, &plan));
  fmha_splitk_destroy_plan(plan);
}

TEST(DestroyPlan, NullIsANoOp) { fmha_splitk_destroy_plan(nullptr); }

// A caller compiled against a newer header: its struct is larger.
template <class T>
struct Grown {
  T known;
  unsigned char future[24];
};

TEST(StructSize, LargerWithZeroTailIsAccepted) {
  Grown<fmha_splitk_problem> grown{};
  grown.known = basic_problem();
  grown.known.struct_size = sizeof(grown);
  fmha_splitk_plan_t plan = nullptr;
  EXPECT_FMHA_OK(fmha_splitk_create_plan(&grown.known, &plan));
  fmha_splitk_destroy_plan(plan);
}

TEST(StructSize, LargerWithNonzeroTailIsRejected) {
  Grown<fmha_splitk_problem> grown{};
  grown.known = basic_problem();
  grown.known.struct_size = sizeof(grown);
  grown.future[5] = 1;
  fmha_splitk_plan_t plan = untouched_plan();
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&grown.known, &plan), kInvalid, "unknown nonzero fields");
  EXPECT_EQ(plan, untouched_plan());
}

TEST(StructSize, ArgsTooSmall) {
  fmha_splitk_plan_t plan = make_plan(basic_problem());
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.struct_size = sizeof(args) - 8;
  EXPECT_FMHA_ERROR(fmha_splitk_run(plan, &args), kInvalid, "args.struct_size");
  fmha_splitk_destroy_plan(plan);
}

TEST(StructSize, MergeArgsNonzeroTail) {
  Grown<fmha_merge_args> grown{};
  grown.known.struct_size = sizeof(grown);
  grown.future[0] = 0xff;
  EXPECT_FMHA_ERROR(fmha_merge(&grown.known), kInvalid, "unknown nonzero fields");
}

TEST(StructSize, MergeBackwardArgsTooSmall) {
  fmha_merge_backward_args args = FMHA_MERGE_BACKWARD_ARGS_INIT;
  args.struct_size = 16;
  EXPECT_FMHA_ERROR(fmha_merge_backward(&args), kInvalid, "args.struct_size = 16");
}

TEST(PlanInfo, NullPlan) {
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  EXPECT_FMHA_ERROR(fmha_splitk_get_plan_info(nullptr, &info), kInvalid, "plan is NULL");
}

TEST(PlanInfo, NullInfo) {
  fmha_splitk_plan_t plan = make_plan(basic_problem());
  EXPECT_FMHA_ERROR(fmha_splitk_get_plan_info(plan, nullptr), kInvalid, "info is NULL");
  fmha_splitk_destroy_plan(plan);
}

TEST(PlanInfo, StructSizeTooSmallLeavesInfoUntouched) {
  fmha_splitk_plan_t plan = make_plan(basic_problem());
  fmha_splitk_plan_info info;
  std::memset(&info, 0xab, sizeof(info));
  info.struct_size = 12;
  EXPECT_FMHA_ERROR(fmha_splitk_get_plan_info(plan, &info), kInvalid, "info.struct_size = 12");
  EXPECT_EQ(info.struct_size, 12u);
  EXPECT_EQ(static_cast<unsigned char>(info.backend_name[0]), 0xab);
  fmha_splitk_destroy_plan(plan);
}

TEST(PlanInfo, LargerStructKeepsItsTail) {
  fmha_splitk_plan_t plan = make_plan(basic_problem());
  Grown<fmha_splitk_plan_info> grown;
  std::memset(&grown, 0xab, sizeof(grown));
  grown.known.struct_size = sizeof(grown);
  EXPECT_FMHA_OK(fmha_splitk_get_plan_info(plan, &grown.known));
  EXPECT_EQ(grown.known.struct_size, sizeof(grown));
  EXPECT_STREQ(grown.known.backend_name, "cpu");
  for (unsigned char byte : grown.future) EXPECT_EQ(byte, 0xab);
  fmha_splitk_destroy_plan(plan);
}

TEST(WorkspaceSize, NullArguments) {
  size_t size = 77;
  EXPECT_FMHA_ERROR(fmha_splitk_plan_workspace_size(nullptr, &size), kInvalid, "plan is NULL");
  EXPECT_EQ(size, 77u);
  fmha_splitk_plan_t plan = make_plan(basic_problem());
  EXPECT_FMHA_ERROR(fmha_splitk_plan_workspace_size(plan, nullptr), kInvalid, "size is NULL");
  fmha_splitk_destroy_plan(plan);
}

TEST(GetBackends, NullCount) {
  fmha_backend_info info = FMHA_BACKEND_INFO_INIT;
  EXPECT_FMHA_ERROR(fmha_get_backends(&info, 1, nullptr), kInvalid, "count is NULL");
}

TEST(GetBackends, NullInfosWithCapacity) {
  size_t count = 99;
  EXPECT_FMHA_ERROR(fmha_get_backends(nullptr, 2, &count), kInvalid, "infos is NULL but capacity = 2");
  EXPECT_EQ(count, 99u);
}

TEST(GetBackends, StructSizeTooSmall) {
  fmha_backend_info info = FMHA_BACKEND_INFO_INIT;
  info.struct_size = 4;
  size_t count = 99;
  EXPECT_FMHA_ERROR(fmha_get_backends(&info, 1, &count), kInvalid, "infos[0].struct_size = 4");
  EXPECT_EQ(count, 99u);
}

TEST(GetBackends, StructSizesDisagree) {
  fmha_backend_info init = FMHA_BACKEND_INFO_INIT;
  std::vector<fmha_backend_info> infos(2, init);
  infos[1].struct_size = 100;
  std::memset(infos[0].name, 0x5a, sizeof(infos[0].name));
  size_t count = 99;
  EXPECT_FMHA_ERROR(fmha_get_backends(infos.data(), 2, &count), kInvalid, "infos[1].struct_size = 100");
  EXPECT_EQ(count, 99u);
  EXPECT_EQ(static_cast<unsigned char>(infos[0].name[0]), 0x5a);
}

TEST(GetBackends, CpuIsListedFirstAndAvailable) {
  size_t count = 0;
  EXPECT_FMHA_OK(fmha_get_backends(nullptr, 0, &count));
  ASSERT_GE(count, 1u);
  fmha_backend_info info = FMHA_BACKEND_INFO_INIT;
  EXPECT_FMHA_OK(fmha_get_backends(&info, 1, &count));
  EXPECT_EQ(info.backend, FMHA_BACKEND_CPU);
  EXPECT_STREQ(info.name, "cpu");
  EXPECT_STREQ(info.path, "");
  EXPECT_EQ(info.available, 1);
  EXPECT_EQ(info.device_count, 1);
  EXPECT_STRNE(info.reason, "");
}

TEST(GetBackends, LargerElementsAreStridedByTheirSize) {
  size_t count = 0;
  EXPECT_FMHA_OK(fmha_get_backends(nullptr, 0, &count));
  std::vector<Grown<fmha_backend_info>> grown(count + 1);
  for (auto &element : grown) {
    std::memset(&element, 0xcd, sizeof(element));
    element.known.struct_size = sizeof(element);
  }
  size_t written = 0;
  EXPECT_FMHA_OK(fmha_get_backends(&grown[0].known, grown.size(), &written));
  EXPECT_EQ(written, count);
  EXPECT_STREQ(grown[0].known.name, "cpu");
  for (unsigned char byte : grown[0].future) EXPECT_EQ(byte, 0xcd);
  EXPECT_EQ(static_cast<unsigned char>(grown[count].known.name[0]), 0xcd);  // past count: untouched
}

}  // namespace
}  // namespace fmha_api_test
