// What the core hands a backend: the working fake plugin (tests/plugin)
// records the plan and the canonical views of each call, so these tests see
// the resolved problem, the canonical shapes and strides of the short and
// quantised tensor forms, and the checks that only a GPU device's
// properties trigger (row alignment). Each test runs in its own process.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>

#include "cpu/test_api_support.h"

namespace fmha_api_test {
namespace {

// Tensors relabelled onto the fake's kDLROCM device; patched copies keep
// their own shape and strides.
class Views : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_FAKE_PLUGINS();
    problem_ = basic_problem();
    problem_.backend = FMHA_BACKEND_HIP;
  }
  void TearDown() override { fmha_splitk_destroy_plan(plan_); }

  // A device copy of `tensor` with `shape` / `strides` (empty: its own).
  const DLTensor *device(const Tensor &tensor, std::vector<int64_t> shape = {}, std::vector<int64_t> strides = {}) {
    auto entry = std::make_unique<Entry>();
    entry->dl = on_device(tensor, kDLROCM);
    entry->shape = shape.empty() ? tensor.shape() : shape;
    entry->strides = !strides.empty() ? strides
                     : shape.empty()  ? tensor.strides()
                                      : Tensor::contiguous_strides(entry->shape);
    entry->dl.ndim = static_cast<int32_t>(entry->shape.size());
    entry->dl.shape = entry->shape.data();
    entry->dl.strides = entry->strides.data();
    entries_.push_back(std::move(entry));
    return &entries_.back()->dl;
  }
  DLTensor *last() { return &entries_.back()->dl; }
  const Tensor &keep(Tensor tensor) {
    tensors_.push_back(std::make_unique<Tensor>(std::move(tensor)));
    return *tensors_.back();
  }
  // Dense args on the device for the current problem.
  fmha_splitk_args dense_args() {
    dense_ = std::make_unique<DenseTensors>(problem_);
    fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
    args.q = device(dense_->q);
    args.k = device(dense_->k);
    args.v = device(dense_->v);
    args.o = device(dense_->o);
    args.lse = device(dense_->lse);
    return args;
  }
  // Runs on a plan of the current problem; the fake's record of it.
  const fmha_fake_record &run(const fmha_splitk_args &args) {
    if (plan_ == nullptr) plan_ = make_plan(problem_);
    EXPECT_FMHA_OK(fmha_splitk_run(plan_, &args));
    return fake_record();
  }
  // Gives `args` a caller's workspace of at least `bytes` (kept until the
  // test ends), so that its runs leave the plan's own workspace alone.
  void give_caller_workspace(fmha_splitk_args &args, size_t bytes) {
    const size_t rounded = (bytes + 255) / 256 * 256;
    workspaces_.emplace_back(std::aligned_alloc(256, rounded), std::free);
    args.workspace = workspaces_.back().get();
    args.workspace_size = rounded;
  }
  void expect_run_error(const fmha_splitk_args &args, const char *message) {
    if (plan_ == nullptr) plan_ = make_plan(problem_);
    EXPECT_FMHA_ERROR(fmha_splitk_run(plan_, &args), FMHA_STATUS_INVALID_ARGUMENT, message);
  }
  // Plan creation of the current problem with a backend whose memset fails
  // (FMHA_FAKE_ZERO_FAILS): the backend's status, a message naming `what`
  // was being zeroed and holding the backend's own (`backend_message`),
  // and no plan.
  void expect_zeroing_fails_the_plan(const char *what, const char *backend_message) {
    ASSERT_EQ(setenv("FMHA_FAKE_ZERO_FAILS", "1", 1), 0);
    fmha_splitk_plan_t plan = nullptr;
    EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&problem_, &plan), FMHA_STATUS_DEVICE_ERROR, what);
    EXPECT_NE(std::string(fmha_last_error_message()).find(backend_message), std::string::npos)
        << fmha_last_error_message();
    EXPECT_EQ(plan, nullptr);
    ASSERT_EQ(unsetenv("FMHA_FAKE_ZERO_FAILS"), 0);
  }

  struct Entry {
    DLTensor dl;
    std::vector<int64_t> shape, strides;
  };
  fmha_splitk_problem problem_;
  fmha_splitk_plan_t plan_ = nullptr;
  std::unique_ptr<DenseTensors> dense_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::vector<std::unique_ptr<Tensor>> tensors_;
  std::vector<std::unique_ptr<void, void (*)(void *)>> workspaces_;
};

void expect_view(const fmha_view &view, int32_t elem, std::vector<int64_t> shape, std::vector<int64_t> stride) {
  EXPECT_EQ(view.elem, elem);
  ASSERT_EQ(view.ndim, static_cast<int32_t>(shape.size()));
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    EXPECT_EQ(view.shape[axis], shape[axis]) << "axis " << axis;
    EXPECT_EQ(view.stride[axis], stride[axis]) << "axis " << axis;
  }
}

TEST_F(Views, ProblemDefaultsAreResolved) {
  problem_.flags = FMHA_FLAG_BATCH_INVARIANT;
  const fmha_fake_record &record = run(dense_args());
  const fmha_splitk_problem &p = record.plan.problem;
  EXPECT_EQ(p.struct_size, sizeof(fmha_splitk_problem));
  EXPECT_EQ(p.backend, FMHA_BACKEND_HIP);
  EXPECT_EQ(p.groups, 1);
  EXPECT_EQ(p.head_dim_v, 64);
  EXPECT_EQ(p.kv_dtype, FMHA_DTYPE_F16);
  EXPECT_EQ(p.o_dtype, FMHA_DTYPE_F16);
  EXPECT_FLOAT_EQ(p.softmax_scale, 0.125f);
  EXPECT_EQ(p.kv_quant_groups, 1);
  EXPECT_EQ(p.kv_chunk_size, 256);
  EXPECT_EQ(p.kv_seqlen_hint, nullptr);
  EXPECT_EQ(record.plan.device.dl_device_type, kDLROCM);
  EXPECT_STREQ(record.plan.kernel_name, "fake");
}

// A plan that asks for merge counters (split: the fake asks for three)
// gets them zeroed at creation, and only runs on its own workspace (NULL
// args.workspace) see them: one run at a time uses that workspace, while
// runs on callers' workspaces may overlap.
TEST_F(Views, MergeCountersGoOnlyToRunsOnThePlansWorkspace) {
  problem_.split_k = 2;
  const int32_t zeroes_before = fake_record().zeroes;
  fmha_splitk_args args = dense_args();
  const fmha_fake_record &own = run(args);
  ASSERT_EQ(own.plan.merge_counters, 3);
  EXPECT_EQ(own.zeroes, zeroes_before + 1);
  ASSERT_NE(own.run.merge_counters, nullptr);
  const auto *counters = static_cast<const uint32_t *>(own.run.merge_counters);
  EXPECT_EQ(counters[0] | counters[1] | counters[2], 0u);
  EXPECT_EQ(own.run.workspace_size, own.plan.workspace_size);

  give_caller_workspace(args, own.plan.workspace_size);
  EXPECT_EQ(run(args).run.merge_counters, nullptr);

  // Without a workspace of its own a plan has no counters either.
  fmha_splitk_destroy_plan(plan_);
  plan_ = nullptr;
  problem_.flags = FMHA_FLAG_EXTERNAL_WORKSPACE;
  EXPECT_EQ(run(args).run.merge_counters, nullptr);
  EXPECT_EQ(fake_record().zeroes, zeroes_before + 1);

  // An unsplit plan asks for none.
  fmha_splitk_destroy_plan(plan_);
  plan_ = nullptr;
  problem_.flags = 0;
  problem_.split_k = 1;
  args.workspace = nullptr;
  args.workspace_size = 0;
  const fmha_fake_record &unsplit = run(args);
  EXPECT_EQ(unsplit.plan.merge_counters, 0);
  EXPECT_EQ(unsplit.run.merge_counters, nullptr);
}

// A plan that owns a workspace gets a run order from its backend, given
// only to runs on that workspace (so that the backend orders them on the
// device) and destroyed with the plan; a plan without a workspace of its
// own gets none.
TEST_F(Views, RunOrderGoesOnlyToRunsOnThePlansWorkspace) {
  problem_.split_k = 2;
  const int32_t created_before = fake_record().orders_created;
  const int32_t destroyed_before = fake_record().orders_destroyed;
  fmha_splitk_args args = dense_args();
  const fmha_fake_record &own = run(args);
  EXPECT_EQ(own.orders_created, created_before + 1);
  EXPECT_NE(own.run.run_order, nullptr);
  const void *order = own.run.run_order;
  EXPECT_EQ(run(args).run.run_order, order);  // the same order for every run

  give_caller_workspace(args, own.plan.workspace_size);
  EXPECT_EQ(run(args).run.run_order, nullptr);
  fmha_splitk_destroy_plan(plan_);
  plan_ = nullptr;
  EXPECT_EQ(fake_record().orders_destroyed, destroyed_before + 1);

  problem_.flags = FMHA_FLAG_EXTERNAL_WORKSPACE;
  EXPECT_EQ(run(args).run.run_order, nullptr);
  EXPECT_EQ(fake_record().orders_created, created_before + 1);
}

// A backend that cannot create the order fails plan creation with its
// status and message, and no plan is created.
TEST_F(Views, RunOrderThatCannotBeCreatedFailsThePlan) {
  problem_.split_k = 2;
  ASSERT_EQ(setenv("FMHA_FAKE_ORDER_FAILS", "1", 1), 0);
  fmha_splitk_plan_t plan = nullptr;
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&problem_, &plan), FMHA_STATUS_DEVICE_ERROR,
                    "creating the order of the runs on the plan's own workspace");
  EXPECT_NE(std::string(fmha_last_error_message()).find("fake: event creation failed"), std::string::npos)
      << fmha_last_error_message();
  EXPECT_EQ(plan, nullptr);
  ASSERT_EQ(unsetenv("FMHA_FAKE_ORDER_FAILS"), 0);
}

// A backend that cannot zero the counters fails plan creation with its
// status and message, and the plan (with its workspace) is not created.
TEST_F(Views, MergeCountersThatCannotBeZeroedFailThePlan) {
  problem_.split_k = 2;
  expect_zeroing_fails_the_plan("zeroing the plan's merge counters", "fake: memset of 12 bytes failed");
}

// A checked plan's own workspace is zeroed at creation (its status may be
// read before any run: a clean record, not uninitialised memory); an
// unchecked plan's is not (the test above: one zeroing, the counters).
TEST_F(Views, CheckedPlansOwnWorkspaceIsZeroed) {
  problem_.split_k = 2;
  problem_.flags = FMHA_FLAG_CHECKED;
  const int32_t zeroes_before = fake_record().zeroes;
  const size_t bytes_before = fake_record().zeroed_bytes;
  const fmha_fake_record &own = run(dense_args());
  ASSERT_GT(own.plan.workspace_size, 0u);
  EXPECT_EQ(own.zeroes, zeroes_before + 2);  // the workspace, then the merge counters
  EXPECT_EQ(own.zeroed_bytes, bytes_before + own.plan.workspace_size + 3 * sizeof(uint32_t));
  const auto *workspace = static_cast<const uint8_t *>(own.run.workspace);
  ASSERT_NE(workspace, nullptr);
  size_t nonzero = 0;
  for (size_t i = 0; i < own.plan.workspace_size; ++i) nonzero += workspace[i] != 0;
  EXPECT_EQ(nonzero, 0u);
}

// ... and a backend that cannot zero it fails plan creation with its status
// and message.
TEST_F(Views, CheckedWorkspaceThatCannotBeZeroedFailsThePlan) {
  problem_.split_k = 2;
  problem_.flags = FMHA_FLAG_CHECKED;
  expect_zeroing_fails_the_plan("zeroing the checked plan's workspace", "fake: memset of");
}

TEST_F(Views, FourDimFormsGetAGroupDimAndByteOffsetIsApplied) {
  fmha_splitk_args args = dense_args();
  args.q = device(dense_->q, {2, 1, 4, 64});
  args.o = device(dense_->o, {2, 1, 4, 64});
  args.lse = device(dense_->lse, {2, 4, 1});
  args.k = device(dense_->k, {2, 64, 2, 64});
  last()->byte_offset = 256;
  const fmha_fake_record &record = run(args);
  expect_view(record.run.q, FMHA_ELEM_F16, {2, 1, 1, 4, 64}, {256, 256, 0, 64, 1});
  expect_view(record.run.lse, FMHA_ELEM_F32, {2, 1, 4, 1}, {4, 0, 1, 1});
  expect_view(record.run.k, FMHA_ELEM_F16, {2, 64, 1, 2, 64}, {8192, 128, 0, 64, 1});
  EXPECT_EQ(record.run.k.data, static_cast<const char *>(dense_->k.data()) + 256);
  EXPECT_EQ(record.run.kv_seqlen.data, nullptr);
}

TEST_F(Views, PagedRowsBecomePagesAndSlots) {
  problem_.kv_layout = FMHA_KV_PAGED;
  problem_.page_size = 16;
  problem_.num_pages = 8;
  problem_.max_pages_per_seq = 4;
  fmha_splitk_args args = dense_args();
  args.k = device(dense_->k, {128, 1, 2, 64});
  args.v = device(dense_->v, {128, 2, 64});  // without G
  const Tensor &seqlen = keep(Tensor(Dtype::i32, {2}));
  const Tensor &table = keep(Tensor(Dtype::i32, {2, 4}));
  args.kv_seqlen = device(seqlen);
  args.block_table = device(table);
  const fmha_fake_record &record = run(args);
  expect_view(record.run.k, FMHA_ELEM_F16, {8, 16, 1, 2, 64}, {16 * 128, 128, 128, 64, 1});
  expect_view(record.run.v, FMHA_ELEM_F16, {8, 16, 1, 2, 64}, {16 * 128, 128, 0, 64, 1});
  expect_view(record.run.block_table, FMHA_ELEM_I32, {2, 4}, {4, 1});
  EXPECT_EQ(record.run.kv_seqstart.data, nullptr);
}

TEST_F(Views, QueryHeadsOfStrideZeroBecomeOneKvHead) {
  problem_.heads_kv = 1;
  fmha_splitk_args args = dense_args();
  args.k = device(dense_->k, {2, 64, 1, 4, 64}, {4096, 64, 64, 0, 1});
  const fmha_fake_record &record = run(args);
  expect_view(record.run.k, FMHA_ELEM_F16, {2, 64, 1, 1, 64}, {4096, 64, 64, 0, 1});
}

TEST_F(Views, Fp8KvAsInt32WordsBecomesBytes) {
  problem_.kv_quant = FMHA_KV_QUANT_FP8;
  problem_.kv_scale_kind = FMHA_KV_SCALE_F32;
  problem_.fp8_format = FMHA_FP8_E4M3FNUZ;
  fmha_splitk_args args = dense_args();
  const Tensor &k_words = keep(Tensor(Dtype::i32, {2, 64, 1, 2, 16}));
  const Tensor &v_bytes = keep(Tensor(Dtype::u8, {2, 64, 1, 2, 64}));
  const Tensor &scales = keep(Tensor(Dtype::f32, {2, 64, 1, 2}));
  args.k = device(k_words);
  args.v = device(v_bytes);
  last()->dtype = {11, 8, 1};  // DLPack 1.1 float8_e4m3fnuz
  args.k_scale = device(scales, {2, 64, 2});
  args.v_scale = device(scales);
  const fmha_fake_record &record = run(args);
  expect_view(record.run.k, FMHA_ELEM_FP8, {2, 64, 1, 2, 64}, {8192, 128, 128, 64, 1});
  expect_view(record.run.v, FMHA_ELEM_FP8, {2, 64, 1, 2, 64}, {8192, 128, 128, 64, 1});
  expect_view(record.run.k_scale, FMHA_ELEM_F32, {2, 64, 1, 2}, {128, 2, 0, 1});
  EXPECT_EQ(record.plan.problem.fp8_format, FMHA_FP8_E4M3FNUZ);
}

TEST_F(Views, Fp8CodeMustMatchTheFormat) {
  problem_.kv_quant = FMHA_KV_QUANT_FP8;
  fmha_splitk_args args = dense_args();
  const Tensor &bytes = keep(Tensor(Dtype::u8, {2, 64, 1, 2, 64}));
  args.k = device(bytes);
  last()->dtype = {11, 8, 1};
  expect_run_error(args, "problem.fp8_format = 0");
}

// Rows of kv_quant_groups + D / 8 words are rarely 16-byte multiples: int4
// K/V is held to its 4-byte words only.
TEST_F(Views, Int4KvIsWordsWithoutRowAlignment) {
  problem_.kv_quant = FMHA_KV_QUANT_INT4;
  problem_.kv_quant_groups = 2;
  fmha_splitk_args args = dense_args();
  const Tensor &words = keep(Tensor(Dtype::i32, {2, 64, 1, 2, 2 + 8}));
  args.k = device(words);
  args.v = device(words);
  const fmha_fake_record &record = run(args);
  expect_view(record.run.k, FMHA_ELEM_I32, {2, 64, 1, 2, 10}, {1280, 20, 20, 10, 1});
  EXPECT_EQ(record.plan.problem.kv_quant_groups, 2);

  args.k = device(keep(Tensor(Dtype::i32, {2, 64, 1, 2, 8})));
  expect_run_error(args, "args.k has shape [2, 64, 1, 2, 8]");
}

TEST_F(Views, MlaWithFp8AndPerTensorScales) {
  problem_.heads_q = 16;
  problem_.heads_kv = 1;
  problem_.head_dim_qk = 576;
  problem_.head_dim_v = 512;
  problem_.q_dtype = FMHA_DTYPE_FP8;
  problem_.kv_quant = FMHA_KV_QUANT_FP8;
  problem_.kv_scale_kind = FMHA_KV_SCALE_F32;
  problem_.kv_scale_granularity = FMHA_SCALE_PER_TENSOR;
  problem_.q_scale_granularity = FMHA_SCALE_PER_TENSOR;
  problem_.flags = FMHA_FLAG_V_FROM_K | FMHA_FLAG_FP8_QK;
  problem_.kv_layout = FMHA_KV_PAGED;
  problem_.page_size = 1;
  problem_.num_pages = 128;
  problem_.max_pages_per_seq = 64;
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = device(keep(Tensor(Dtype::u8, {2, 16, 576})), {2, 1, 16, 576});
  args.k = device(keep(Tensor(Dtype::u8, {128, 576})), {128, 1, 576});
  args.o = device(keep(Tensor(Dtype::bf16, {2, 1, 16, 512})));
  args.kv_seqlen = device(keep(Tensor(Dtype::i32, {2})));
  args.block_table = device(keep(Tensor(Dtype::i32, {2, 64})));
  args.q_scale = device(keep(Tensor(Dtype::f32, {1})), {1});
  last()->ndim = 0;  // 0-d scalar
  args.k_scale = device(keep(Tensor(Dtype::f32, {1})));
  const fmha_fake_record &record = run(args);
  EXPECT_EQ(record.plan.problem.o_dtype, FMHA_DTYPE_BF16);
  EXPECT_EQ(record.plan.problem.kv_dtype, FMHA_DTYPE_BF16);
  expect_view(record.run.q, FMHA_ELEM_FP8, {2, 1, 1, 16, 576}, {16 * 576, 16 * 576, 0, 576, 1});
  expect_view(record.run.k, FMHA_ELEM_FP8, {128, 1, 1, 1, 576}, {576, 576, 0, 576, 1});
  expect_view(record.run.q_scale, FMHA_ELEM_F32, {1}, {1});
  EXPECT_EQ(record.run.v.data, nullptr);
  EXPECT_EQ(record.run.v_scale.data, nullptr);

  args.v = args.k;
  expect_run_error(args, "args.v must be NULL: FMHA_FLAG_V_FROM_K");
}

TEST_F(Views, RowsMustMeetTheDeviceAlignment) {
  fmha_splitk_args args = dense_args();
  args.q = device(dense_->q);
  last()->byte_offset = 8;  // element-aligned, but the fake wants 16-byte rows
  expect_run_error(args, "16-byte row alignment");
  args.q = device(keep(Tensor(Dtype::f16, {2, 1, 1, 4, 64}, {272, 272, 272, 68, 1})));
  expect_run_error(args, "args.q has stride 68 (136 bytes) along Hq");
}

// fp8 K/V rows need 4-byte alignment only: the GPU kernels copy them in
// 4-byte pieces where the rows are not 16-byte aligned (MLA latents with a
// padded 580-byte pitch, say).
TEST_F(Views, Fp8RowsNeedFourByteAlignmentOnly) {
  problem_.heads_q = 16;
  problem_.heads_kv = 1;
  problem_.head_dim_qk = 576;
  problem_.head_dim_v = 512;
  problem_.kv_quant = FMHA_KV_QUANT_FP8;
  problem_.kv_scale_kind = FMHA_KV_SCALE_F32;
  problem_.kv_scale_granularity = FMHA_SCALE_PER_TENSOR;
  problem_.flags = FMHA_FLAG_V_FROM_K;
  problem_.kv_layout = FMHA_KV_PAGED;
  problem_.page_size = 1;
  problem_.num_pages = 128;
  problem_.max_pages_per_seq = 64;
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = device(keep(Tensor(Dtype::f16, {2, 1, 16, 576})));
  args.k = device(keep(Tensor(Dtype::u8, {128, 580})), {128, 1, 576}, {580, 580, 1});
  args.o = device(keep(Tensor(Dtype::f16, {2, 1, 16, 512})));
  args.kv_seqlen = device(keep(Tensor(Dtype::i32, {2})));
  args.block_table = device(keep(Tensor(Dtype::i32, {2, 64})));
  args.k_scale = device(keep(Tensor(Dtype::f32, {1})));
  const fmha_fake_record &record = run(args);
  expect_view(record.run.k, FMHA_ELEM_FP8, {128, 1, 1, 1, 576}, {580, 580, 0, 580, 1});

  args.k = device(keep(Tensor(Dtype::u8, {128, 578})), {128, 1, 576}, {578, 578, 1});
  expect_run_error(args, "args.k has stride 578 (578 bytes) along num_pages, not a multiple of the 4-byte row alignment");
}

TEST_F(Views, EmptyBatchIsNotForwarded) {
  problem_.batch = 0;
  const fmha_splitk_args args = dense_args();
  plan_ = make_plan(problem_);
  const int32_t runs = fake_record().runs;
  EXPECT_FMHA_OK(fmha_splitk_run(plan_, &args));
  EXPECT_EQ(fake_record().runs, runs);
}

TEST_F(Views, StackedMergePartialsAreSlices) {
  const Tensor &o_stacked = keep(Tensor(Dtype::f32, {3, 1, 2, 1, 2, 8}));
  const Tensor &lse_stacked = keep(Tensor(Dtype::f32, {3, 1, 1, 2, 2}));
  const Tensor &o = keep(Tensor(Dtype::bf16, {1, 2, 2, 8}));
  fmha_merge_args args = FMHA_MERGE_ARGS_INIT;
  args.o_stacked = device(o_stacked, {3, 1, 2, 2, 8});  // without G
  args.lse_stacked = device(lse_stacked);
  args.o = device(o);
  EXPECT_FMHA_OK(fmha_merge(&args));
  const fmha_fake_record &record = fake_record();
  EXPECT_EQ(record.merge.num_partials, 3);
  EXPECT_EQ(record.merge.stacked, 1);
  EXPECT_EQ(record.merge.stacked_o_stride, 32);
  EXPECT_EQ(record.merge.stacked_lse_stride, 4);
  expect_view(record.merge.o, FMHA_ELEM_BF16, {1, 2, 1, 2, 8}, {32, 16, 0, 8, 1});
  EXPECT_EQ(record.merge.lse.data, nullptr);
  expect_view(record.merge_o_parts[2], FMHA_ELEM_F32, {1, 2, 1, 2, 8}, {32, 16, 0, 8, 1});
  EXPECT_EQ(record.merge_o_parts[2].data, static_cast<const char *>(o_stacked.data()) + 2 * 32 * 4);
  EXPECT_EQ(record.merge_lse_parts[1].data, static_cast<const char *>(lse_stacked.data()) + 4 * 4);
}

}  // namespace
}  // namespace fmha_api_test
