// The contract of fmha_splitk_run() on the CPU backend: every tensor is
// checked against the plan (presence, dtype, shape, strides, data,
// alignment, device), then the workspace; a bad argument names the tensor.
#include <functional>
#include <limits>
#include <memory>
#include <thread>

#include "cpu/test_api_support.h"

namespace fmha_api_test {
namespace {

constexpr fmha_status kInvalid = FMHA_STATUS_INVALID_ARGUMENT;

// A DLTensor copied from a tensor, with its own shape and strides to edit.
struct Patched {
  explicit Patched(const DLTensor &from)
      : dl(from),
        shape(from.shape, from.shape + from.ndim),
        strides(from.strides ? std::vector<int64_t>(from.strides, from.strides + from.ndim) : std::vector<int64_t>()) {
    repoint();
  }
  void set_shape(std::vector<int64_t> new_shape) {
    shape = std::move(new_shape);
    strides = Tensor::contiguous_strides(shape);
    repoint();
  }
  void set_strides(std::vector<int64_t> new_strides) {
    strides = std::move(new_strides);
    repoint();
  }
  void repoint() {
    dl.ndim = static_cast<int32_t>(shape.size());
    dl.shape = shape.data();
    dl.strides = strides.empty() ? nullptr : strides.data();
  }
  DLTensor dl;
  std::vector<int64_t> shape, strides;
};

// A plan on the basic problem (or a changed one) with tensors for it.
struct RunSetup {
  explicit RunSetup(const fmha_splitk_problem &problem_in)
      : problem(problem_in), tensors(problem), args(tensors.args()) {}

  // Puts `tensor` (kept alive here) in `slot`.
  void put(const DLTensor *&slot, const Tensor &tensor) {
    kept.push_back(std::make_unique<Tensor>(tensor));
    slot = kept.back()->dl();
  }
  // Replaces `slot` with an editable copy of what it points at.
  Patched &patch(const DLTensor *&slot) {
    patched.push_back(std::make_unique<Patched>(*slot));
    slot = &patched.back()->dl;
    return *patched.back();
  }
  int32_t groups() const { return problem.groups ? problem.groups : 1; }

  fmha_splitk_problem problem;
  DenseTensors tensors;
  fmha_splitk_args args;
  std::vector<std::unique_ptr<Tensor>> kept;
  std::vector<std::unique_ptr<Patched>> patched;
};

Tensor int32_tensor(std::vector<int64_t> shape, int32_t value) {
  Tensor tensor(Dtype::i32, std::move(shape));
  tensor.for_each_index([&](const std::vector<int64_t> &index) { tensor.set(index, value); });
  return tensor;
}

// K/V of the basic problem as [1, B * Mkv, G, Hkv, D] (GAPPY) or
// [B * Mkv, G, Hkv, D] rows (PAGED / RAGGED with 8 pages of 16).
void as_gappy(RunSetup &setup) {
  for (const DLTensor **slot : {&setup.args.k, &setup.args.v}) setup.patch(*slot).set_shape({1, 128, 1, 2, 64});
  setup.put(setup.args.kv_seqlen, int32_tensor({2}, 64));
  Tensor starts = int32_tensor({2}, 0);
  starts.set({1}, 64);
  setup.put(setup.args.kv_seqstart, starts);
}

void as_paged_rows(RunSetup &setup) {
  for (const DLTensor **slot : {&setup.args.k, &setup.args.v}) setup.patch(*slot).set_shape({128, 1, 2, 64});
}

void paged_problem(fmha_splitk_problem &p) {
  p.kv_layout = FMHA_KV_PAGED;
  p.page_size = 16;
  p.num_pages = 8;
  p.max_pages_per_seq = 4;
}

void ragged_problem(fmha_splitk_problem &p) {
  p.kv_layout = FMHA_KV_RAGGED;
  p.page_size = 16;
  p.num_pages = 8;
}

// Q and O as [1, total_q = B * Mq, G, Hq, D], LSE [1, G, Hq, total_q].
void as_varlen(RunSetup &setup) {
  setup.patch(setup.args.q).set_shape({1, 2, 1, 4, 64});
  setup.patch(setup.args.o).set_shape({1, 2, 1, 4, 64});
  setup.patch(setup.args.lse).set_shape({1, 1, 4, 2});
}

struct RunCase {
  const char *name;
  std::function<void(fmha_splitk_problem &)> change_problem;
  std::function<void(RunSetup &)> change_args;
  fmha_status status;
  const char *message;
};

// gtest prints a case by its name.
void PrintTo(const RunCase &c, std::ostream *out) { *out << c.name; }

void no_problem_change(fmha_splitk_problem &) {}

class RunError : public ::testing::TestWithParam<RunCase> {};

TEST_P(RunError, ReportsTheTensor) {
  fmha_splitk_problem problem = basic_problem();
  problem.split_k = 4;  // a workspace, and partial shapes with a known split count
  GetParam().change_problem(problem);
  RunSetup setup(problem);
  fmha_splitk_plan_t plan = make_plan(setup.problem);
  ASSERT_NE(plan, nullptr);
  GetParam().change_args(setup);
  EXPECT_FMHA_ERROR(fmha_splitk_run(plan, &setup.args), GetParam().status, GetParam().message);
  fmha_splitk_destroy_plan(plan);
}

Tensor bias_tensor() { return Tensor(Dtype::f32, {2, 1, 4, 1, 64}); }

const RunCase kRunCases[] = {
    // Presence.
    {"QMissing", no_problem_change, [](RunSetup &s) { s.args.q = nullptr; }, kInvalid, "args.q is NULL"},
    {"KMissing", no_problem_change, [](RunSetup &s) { s.args.k = nullptr; }, kInvalid, "args.k is NULL"},
    {"VMissing", no_problem_change, [](RunSetup &s) { s.args.v = nullptr; }, kInvalid, "args.v is NULL"},
    {"OMissing", no_problem_change, [](RunSetup &s) { s.args.o = nullptr; }, kInvalid, "args.o is NULL"},
    {"BiasWithoutHasBias", no_problem_change, [](RunSetup &s) { s.put(s.args.bias, bias_tensor()); }, kInvalid,
     "args.bias must be NULL"},
    {"SinksWithoutHasSinks", no_problem_change, [](RunSetup &s) { s.put(s.args.sinks, Tensor(Dtype::f32, {4})); },
     kInvalid, "args.sinks must be NULL"},
    {"KvSeqlenWithDense", no_problem_change, [](RunSetup &s) { s.put(s.args.kv_seqlen, int32_tensor({2}, 1)); },
     kInvalid, "args.kv_seqlen must be NULL: FMHA_KV_DENSE"},
    {"KvSeqstartWithDense", no_problem_change, [](RunSetup &s) { s.put(s.args.kv_seqstart, int32_tensor({2}, 0)); },
     kInvalid, "args.kv_seqstart must be NULL"},
    {"QSeqstartWithFixed", no_problem_change, [](RunSetup &s) { s.put(s.args.q_seqstart, int32_tensor({3}, 0)); },
     kInvalid, "args.q_seqstart must be NULL: FMHA_Q_FIXED"},
    {"BlockTableWithDense", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.block_table, int32_tensor({2, 4}, 0));
     },
     kInvalid, "args.block_table must be NULL"},
    {"KvIndptrWithDense", no_problem_change, [](RunSetup &s) { s.put(s.args.kv_indptr, int32_tensor({3}, 0)); },
     kInvalid, "args.kv_indptr must be NULL"},
    {"KvIndicesWithDense", no_problem_change, [](RunSetup &s) { s.put(s.args.kv_indices, int32_tensor({4}, 0)); },
     kInvalid, "args.kv_indices must be NULL"},
    {"KvLastPageLenWithDense", no_problem_change,
     [](RunSetup &s) { s.put(s.args.kv_last_page_len, int32_tensor({2}, 1)); }, kInvalid,
     "args.kv_last_page_len must be NULL"},
    {"KScaleWithoutFp8", no_problem_change, [](RunSetup &s) { s.put(s.args.k_scale, Tensor(Dtype::f32, {1})); },
     kInvalid, "args.k_scale must be NULL"},
    {"VScaleWithoutFp8", no_problem_change, [](RunSetup &s) { s.put(s.args.v_scale, Tensor(Dtype::f32, {1})); },
     kInvalid, "args.v_scale must be NULL"},
    {"QScaleWithoutFp8Qk", no_problem_change, [](RunSetup &s) { s.put(s.args.q_scale, Tensor(Dtype::f32, {1})); },
     kInvalid, "args.q_scale must be NULL"},
    {"OPartialWithoutFlag", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.o_partial, Tensor(Dtype::f32, {4, 2, 1, 1, 4, 64}));
     },
     kInvalid, "args.o_partial must be NULL"},
    {"LsePartialWithoutFlag", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.lse_partial, Tensor(Dtype::f32, {4, 2, 1, 4, 1}));
     },
     kInvalid, "args.lse_partial must be NULL"},
    {"PaddedWithoutKvSeqlen", [](auto &p) { p.kv_layout = FMHA_KV_PADDED; }, [](RunSetup &) {}, kInvalid,
     "args.kv_seqlen is NULL but FMHA_KV_PADDED needs it"},
    {"GappyWithoutKvSeqstart", [](auto &p) { p.kv_layout = FMHA_KV_GAPPY; },
     [](RunSetup &s) {
       as_gappy(s);
       s.args.kv_seqstart = nullptr;
     },
     kInvalid, "args.kv_seqstart is NULL but FMHA_KV_GAPPY needs it"},
    {"PagedWithoutKvSeqlen", paged_problem,
     [](RunSetup &s) {
       as_paged_rows(s);
       s.put(s.args.block_table, int32_tensor({2, 4}, 0));
     },
     kInvalid, "args.kv_seqlen is NULL but FMHA_KV_PAGED needs it"},
    {"PagedWithoutBlockTable", paged_problem,
     [](RunSetup &s) {
       as_paged_rows(s);
       s.put(s.args.kv_seqlen, int32_tensor({2}, 64));
     },
     kInvalid, "args.block_table is NULL but FMHA_KV_PAGED needs it"},
    {"PagedBlockTableWrongShape", paged_problem,
     [](RunSetup &s) {
       as_paged_rows(s);
       s.put(s.args.kv_seqlen, int32_tensor({2}, 64));
       s.put(s.args.block_table, int32_tensor({2, 3}, 0));
     },
     kInvalid, "args.block_table has shape [2, 3]"},
    {"RaggedWithoutKvIndices", ragged_problem,
     [](RunSetup &s) {
       as_paged_rows(s);
       s.put(s.args.kv_indptr, int32_tensor({3}, 0));
     },
     kInvalid, "args.kv_indices is NULL but FMHA_KV_RAGGED needs it"},
    {"RaggedWithKvSeqlen", ragged_problem,
     [](RunSetup &s) {
       as_paged_rows(s);
       s.put(s.args.kv_seqlen, int32_tensor({2}, 64));
     },
     kInvalid, "args.kv_seqlen must be NULL: FMHA_KV_RAGGED"},
    {"PagedRowsNotAMultipleOfPages", paged_problem,
     [](RunSetup &s) {
       for (const DLTensor **slot : {&s.args.k, &s.args.v}) s.patch(*slot).set_shape({120, 1, 2, 64});
     },
     kInvalid, "args.k has shape [120, 1, 2, 64]"},
    {"VarlenWithoutQSeqstart", [](auto &p) { p.q_layout = FMHA_Q_VARLEN; }, as_varlen, kInvalid,
     "args.q_seqstart is NULL but FMHA_Q_VARLEN needs it"},
    {"VarlenOTotalDiffers", [](auto &p) { p.q_layout = FMHA_Q_VARLEN; },
     [](RunSetup &s) {
       as_varlen(s);
       s.patch(s.args.o).set_shape({1, 1, 1, 4, 64});
     },
     kInvalid, "args.o has shape [1, 1, 1, 4, 64]"},
    {"VarlenLseFixedShape", [](auto &p) { p.q_layout = FMHA_Q_VARLEN; },
     [](RunSetup &s) {
       as_varlen(s);
       s.patch(s.args.lse).set_shape({2, 1, 4, 1});
     },
     kInvalid, "args.lse has shape [2, 1, 4, 1]"},
    {"GappyVTotalDiffers", [](auto &p) { p.kv_layout = FMHA_KV_GAPPY; },
     [](RunSetup &s) {
       as_gappy(s);
       s.patch(s.args.v).set_shape({1, 96, 1, 2, 64});
     },
     kInvalid, "args.v has shape [1, 96, 1, 2, 64]"},
    {"HasBiasWithoutBias", [](auto &p) { p.has_bias = 1; }, [](RunSetup &) {}, kInvalid,
     "args.bias is NULL but problem.has_bias needs it"},
    {"BiasWrongShape", [](auto &p) { p.has_bias = 1; },
     [](RunSetup &s) {
       s.put(s.args.bias, Tensor(Dtype::f32, {2, 1, 4, 1, 63}));
     },
     kInvalid, "args.bias has shape [2, 1, 4, 1, 63]"},
    {"BiasInt32", [](auto &p) { p.has_bias = 1; },
     [](RunSetup &s) {
       s.put(s.args.bias, Tensor(Dtype::i32, {2, 1, 4, 1, 64}));
     },
     kInvalid, "args.bias has dtype int32"},
    {"HasSinksWithoutSinks", [](auto &p) { p.has_sinks = 1; }, [](RunSetup &) {}, kInvalid,
     "args.sinks is NULL but problem.has_sinks needs it"},
    {"SinksWrongShape", [](auto &p) { p.has_sinks = 1; },
     [](RunSetup &s) {
       s.put(s.args.sinks, Tensor(Dtype::f32, {2, 4}));
     },
     kInvalid, "args.sinks has shape [2, 4]"},
    {"WritePartialsWithO", [](auto &p) { p.flags = FMHA_FLAG_WRITE_PARTIALS; }, [](RunSetup &) {}, kInvalid,
     "args.o must be NULL: FMHA_FLAG_WRITE_PARTIALS"},
    {"WritePartialsWithoutOPartial", [](auto &p) { p.flags = FMHA_FLAG_WRITE_PARTIALS; },
     [](RunSetup &s) {
       s.args.o = nullptr;
       s.args.lse = nullptr;
     },
     kInvalid, "args.o_partial is NULL but FMHA_FLAG_WRITE_PARTIALS needs it"},
    {"OPartialWrongSplitCount", [](auto &p) { p.flags = FMHA_FLAG_WRITE_PARTIALS; },
     [](RunSetup &s) {
       s.args.o = nullptr;
       s.args.lse = nullptr;
       s.put(s.args.o_partial, Tensor(Dtype::f32, {3, 2, 1, 1, 4, 64}));
       s.put(s.args.lse_partial, Tensor(Dtype::f32, {4, 2, 1, 4, 1}));
     },
     kInvalid, "args.o_partial has shape [3, 2, 1, 1, 4, 64]"},
    {"LsePartialF16", [](auto &p) { p.flags = FMHA_FLAG_WRITE_PARTIALS; },
     [](RunSetup &s) {
       s.args.o = nullptr;
       s.args.lse = nullptr;
       s.put(s.args.o_partial, Tensor(Dtype::f32, {4, 2, 1, 1, 4, 64}));
       s.put(s.args.lse_partial, Tensor(Dtype::f16, {4, 2, 1, 4, 1}));
     },
     kInvalid, "args.lse_partial has dtype float16"},
    // Dtypes.
    {"QFloat32", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.q, Tensor(Dtype::f32, {2, 1, 1, 4, 64}));
     },
     kInvalid, "args.q has dtype float32"},
    {"QUint8", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.q, Tensor(Dtype::u8, {2, 1, 1, 4, 64}));
     },
     kInvalid, "args.q has dtype uint8"},
    {"QTwoLanes", no_problem_change, [](RunSetup &s) { s.patch(s.args.q).dl.dtype.lanes = 2; }, kInvalid,
     "args.q has dtype code 2, bits 16, lanes 2"},
    {"KBfloat16", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.k, Tensor(Dtype::bf16, {2, 64, 1, 2, 64}));
     },
     kInvalid, "args.k has dtype bfloat16; expected float16"},
    {"OFloat32", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.o, Tensor(Dtype::f32, {2, 1, 1, 4, 64}));
     },
     kInvalid, "args.o has dtype float32"},
    {"LseFloat16", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.lse, Tensor(Dtype::f16, {2, 1, 4, 1}));
     },
     kInvalid, "args.lse has dtype float16"},
    {"KvSeqlenFloat32", [](auto &p) { p.kv_layout = FMHA_KV_PADDED; },
     [](RunSetup &s) { s.put(s.args.kv_seqlen, Tensor(Dtype::f32, {2})); }, kInvalid,
     "args.kv_seqlen has dtype float32"},
    // Shapes.
    {"QThreeDims", no_problem_change,
     [](RunSetup &s) {
       s.patch(s.args.q).set_shape({2, 1, 256});
     },
     kInvalid, "args.q has shape [2, 1, 256]"},
    {"QNdimTooLarge", no_problem_change, [](RunSetup &s) { s.patch(s.args.q).dl.ndim = 7; }, kInvalid,
     "args.q has ndim = 7"},
    {"QNullShape", no_problem_change, [](RunSetup &s) { s.patch(s.args.q).dl.shape = nullptr; }, kInvalid,
     "args.q->shape is NULL"},
    {"QNegativeExtent", no_problem_change, [](RunSetup &s) { s.patch(s.args.q).shape[0] = -1; }, kInvalid,
     "args.q->shape[0] = -1"},
    {"QWrongBatch", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.q, Tensor(Dtype::f16, {3, 1, 1, 4, 64}));
     },
     kInvalid, "args.q has shape [3, 1, 1, 4, 64]; expected [B=2, Mq=1, G=1, Hq=4, Dqk=64]"},
    {"QFourDimsWithTwoGroups", [](auto &p) { p.groups = 2; },
     [](RunSetup &s) {
       s.patch(s.args.q).set_shape({2, 1, 4, 64});
     },
     kInvalid, "args.q has shape [2, 1, 4, 64]"},
    {"KWrongSeqlen", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.k, Tensor(Dtype::f16, {2, 32, 1, 2, 64}));
     },
     kInvalid, "args.k has shape [2, 32, 1, 2, 64]"},
    {"KQueryHeadsWithSeveralKvHeads", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.k, Tensor(Dtype::f16, {2, 64, 1, 4, 64}, {4096, 64, 64, 0, 1}));
     },
     kInvalid, "args.k has shape [2, 64, 1, 4, 64]"},
    {"KQueryHeadsWithNonzeroStride", [](auto &p) { p.heads_kv = 1; },
     [](RunSetup &s) {
       s.put(s.args.k, Tensor(Dtype::f16, {2, 64, 1, 4, 64}));
     },
     kInvalid, "args.k has shape [2, 64, 1, 4, 64]"},
    {"VWrongHeadDim", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.v, Tensor(Dtype::f16, {2, 64, 1, 2, 32}));
     },
     kInvalid, "args.v has shape [2, 64, 1, 2, 32]"},
    {"OWrongHeadDim", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.o, Tensor(Dtype::f16, {2, 1, 1, 4, 32}));
     },
     kInvalid, "args.o has shape [2, 1, 1, 4, 32]"},
    {"LseWrongShape", no_problem_change,
     [](RunSetup &s) {
       s.put(s.args.lse, Tensor(Dtype::f32, {2, 1, 4, 2}));
     },
     kInvalid, "args.lse has shape [2, 1, 4, 2]"},
    {"KvSeqlenWrongShape", [](auto &p) { p.kv_layout = FMHA_KV_PADDED; },
     [](RunSetup &s) { s.put(s.args.kv_seqlen, int32_tensor({3}, 1)); }, kInvalid, "args.kv_seqlen has shape [3]"},
    // Strides, data, alignment, device.
    {"QLastDimStrided", no_problem_change,
     [](RunSetup &s) {
       s.patch(s.args.q).set_strides({512, 512, 512, 128, 2});
     },
     kInvalid, "args.q has last-dim stride 2"},
    {"QNegativeStride", no_problem_change,
     [](RunSetup &s) {
       s.patch(s.args.q).set_strides({256, 256, 256, -64, 1});
     },
     kInvalid, "args.q->strides[3] = -64 is negative"},
    {"QSpanOverflows", no_problem_change,
     [](RunSetup &s) {
       s.patch(s.args.q).set_strides({std::numeric_limits<int64_t>::max() / 2, 256, 256, 64, 1});
     },
     kInvalid, "the size of args.q overflows int64"},
    {"QNullData", no_problem_change, [](RunSetup &s) { s.patch(s.args.q).dl.data = nullptr; }, kInvalid,
     "args.q->data is NULL but the tensor has 512 elements"},
    {"QOddByteOffset", no_problem_change, [](RunSetup &s) { s.patch(s.args.q).dl.byte_offset = 1; }, kInvalid,
     "is not aligned to its 2-byte elements"},
    {"QByteOffsetOverflows", no_problem_change,
     [](RunSetup &s) { s.patch(s.args.q).dl.byte_offset = std::numeric_limits<uint64_t>::max(); }, kInvalid,
     "args.q->byte_offset"},
    {"QOnCuda", no_problem_change,
     [](RunSetup &s) {
       s.patch(s.args.q).dl.device = {kDLCUDA, 0};
     },
     kInvalid, "args.q is on cuda:0; expected cpu:0"},
    {"KOnCpu1", no_problem_change, [](RunSetup &s) { s.patch(s.args.k).dl.device = {kDLCPU, 1}; }, kInvalid,
     "args.k is on cpu:1"},
    {"LseOnRocm", no_problem_change, [](RunSetup &s) { s.patch(s.args.lse).dl.device = {kDLROCM, 0}; }, kInvalid,
     "args.lse is on rocm:0"},
};

INSTANTIATE_TEST_SUITE_P(Args, RunError, ::testing::ValuesIn(kRunCases),
                         [](const auto &info) { return std::string(info.param.name); });

class Run : public ::testing::Test {
 protected:
  void SetUp() override {
    problem_ = basic_problem();
    problem_.split_k = 4;
  }
  fmha_splitk_problem problem_;
};

TEST_F(Run, NullPlan) {
  const RunSetup setup(problem_);
  EXPECT_FMHA_ERROR(fmha_splitk_run(nullptr, &setup.args), kInvalid, "plan is NULL");
}

TEST_F(Run, NullArgs) {
  fmha_splitk_plan_t plan = make_plan(problem_);
  EXPECT_FMHA_ERROR(fmha_splitk_run(plan, nullptr), kInvalid, "args is NULL");
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Run, FiveDimFormsWithOwnedWorkspace) {
  const RunSetup setup(problem_);
  fmha_splitk_plan_t plan = make_plan(problem_);
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &setup.args));
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Run, FourDimFormsWithoutLse) {
  RunSetup setup(problem_);
  setup.patch(setup.args.q).set_shape({2, 1, 4, 64});
  setup.patch(setup.args.k).set_shape({2, 64, 2, 64});
  setup.patch(setup.args.v).set_shape({2, 64, 2, 64});
  setup.patch(setup.args.o).set_shape({2, 1, 4, 64});
  setup.args.lse = nullptr;
  fmha_splitk_plan_t plan = make_plan(problem_);
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &setup.args));
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Run, LseMayHaveAnyStrides) {
  RunSetup setup(problem_);
  // [B, G, Hq, Mq] stored as [Mq, Hq, G, B]: no dim is contiguous.
  Patched &lse = setup.patch(setup.args.lse);
  lse.set_strides({1, 1, 2, 8});
  fmha_splitk_plan_t plan = make_plan(problem_);
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &setup.args));
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Run, QueryHeadsWithStrideZeroStandForOneKvHead) {
  problem_.heads_kv = 1;
  RunSetup setup(problem_);
  // K's one head [2, 64, 1, 1, 64] seen as 4 heads with head stride 0.
  Patched &k = setup.patch(setup.args.k);
  k.set_shape({2, 64, 1, 4, 64});
  k.set_strides({64 * 64, 64, 64, 0, 1});
  fmha_splitk_plan_t plan = make_plan(problem_);
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &setup.args));
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Run, CallerWorkspace) {
  const RunSetup setup(problem_);
  fmha_splitk_plan_t plan = make_plan(problem_);
  size_t size = 0;
  EXPECT_FMHA_OK(fmha_splitk_plan_workspace_size(plan, &size));
  ASSERT_GT(size, 0u);
  std::vector<std::max_align_t> storage(size / sizeof(std::max_align_t) + 64);
  auto base = reinterpret_cast<uintptr_t>(storage.data());
  void *aligned = reinterpret_cast<void *>((base + 255) / 256 * 256);

  fmha_splitk_args args = setup.args;
  args.workspace = aligned;
  args.workspace_size = size;
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &args));

  args.workspace_size = size - 1;
  EXPECT_FMHA_ERROR(fmha_splitk_run(plan, &args), FMHA_STATUS_INSUFFICIENT_WORKSPACE,
                    "args.workspace_size = " + std::to_string(size - 1));
  EXPECT_NE(std::string(fmha_last_error_message()).find(std::to_string(size)), std::string::npos);

  args.workspace = static_cast<char *>(aligned) + 16;
  args.workspace_size = size;
  EXPECT_FMHA_ERROR(fmha_splitk_run(plan, &args), kInvalid, "is not 256-byte aligned");
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Run, ExternalWorkspaceMustBePassed) {
  problem_.flags = FMHA_FLAG_EXTERNAL_WORKSPACE;
  const RunSetup setup(problem_);
  fmha_splitk_plan_t plan = make_plan(problem_);
  size_t size = 0;
  EXPECT_FMHA_OK(fmha_splitk_plan_workspace_size(plan, &size));
  ASSERT_GT(size, 0u);
  EXPECT_FMHA_ERROR(fmha_splitk_run(plan, &setup.args), FMHA_STATUS_INSUFFICIENT_WORKSPACE,
                    "FMHA_FLAG_EXTERNAL_WORKSPACE");
  std::vector<std::max_align_t> storage(size / sizeof(std::max_align_t) + 64);
  auto base = reinterpret_cast<uintptr_t>(storage.data());
  fmha_splitk_args args = setup.args;
  args.workspace = reinterpret_cast<void *>((base + 255) / 256 * 256);
  args.workspace_size = size;
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &args));
  fmha_splitk_destroy_plan(plan);
  // Unsplit, the plan needs no workspace and runs without one.
  problem_.split_k = 1;
  const RunSetup unsplit(problem_);
  plan = make_plan(problem_);
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &unsplit.args));
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Run, EmptyBatchValidatesThenSucceeds) {
  problem_.batch = 0;
  RunSetup setup(problem_);
  fmha_splitk_plan_t plan = make_plan(problem_);
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &setup.args));
  setup.put(setup.args.q, Tensor(Dtype::f32, {0, 1, 1, 4, 64}));
  EXPECT_FMHA_ERROR(fmha_splitk_run(plan, &setup.args), kInvalid, "args.q has dtype float32");
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Run, NoQueriesSucceedsWithNullData) {
  problem_.max_q_seqlen = 0;
  RunSetup setup(problem_);
  setup.patch(setup.args.q).dl.data = nullptr;  // no elements: no data needed
  fmha_splitk_plan_t plan = make_plan(problem_);
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &setup.args));
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Run, ConcurrentRunsShareTheOwnedWorkspaceSafely) {
  const RunSetup first(problem_), second(problem_);
  fmha_splitk_plan_t plan = make_plan(problem_);
  fmha_status statuses[2] = {FMHA_STATUS_INTERNAL_ERROR, FMHA_STATUS_INTERNAL_ERROR};
  std::thread other([&] {
    for (int repeat = 0; repeat < 20; ++repeat) statuses[1] = fmha_splitk_run(plan, &second.args);
  });
  for (int repeat = 0; repeat < 20; ++repeat) statuses[0] = fmha_splitk_run(plan, &first.args);
  other.join();
  EXPECT_EQ(statuses[0], FMHA_STATUS_SUCCESS);
  EXPECT_EQ(statuses[1], FMHA_STATUS_SUCCESS);
  fmha_splitk_destroy_plan(plan);
}

}  // namespace
}  // namespace fmha_api_test
