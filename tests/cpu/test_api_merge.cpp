// The contract of fmha_merge() and fmha_merge_backward(): the stacked and
// list forms, shapes agreeing with O / LSE, dtypes and devices; on the CPU
// backend, that each form's partials reach the backend where they are.
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "cpu/test_api_support.h"

namespace fmha_api_test {
namespace {

constexpr fmha_status kInvalid = FMHA_STATUS_INVALID_ARGUMENT;

// Two partials of B = 1, M = 2, G = 1, H = 2, D = 8: O_0 = 1, O_1 = 3 and
// LSE_0 = LSE_1 = 0.5, in the list and the stacked forms.
struct MergeSetup {
  MergeSetup() {
    for (int index = 0; index < 2; ++index) {
      o_parts.emplace_back(Dtype::f32, std::vector<int64_t>{1, 2, 1, 2, 8});
      lse_parts.emplace_back(Dtype::f32, std::vector<int64_t>{1, 1, 2, 2});
      fill(o_parts.back(), 1.0 + 2.0 * index);
      fill(lse_parts.back(), 0.5);
    }
    o_stacked.for_each_index([&](const std::vector<int64_t> &i) { o_stacked.set(i, i[0] == 0 ? 1.0 : 3.0); });
    fill(lse_stacked, 0.5);
    for (const Tensor &part : o_parts) o_list.push_back(part.dl());
    for (const Tensor &part : lse_parts) lse_list.push_back(part.dl());
    args.o = o.dl();
    args.lse = lse.dl();
  }
  static void fill(Tensor &tensor, double value) {
    tensor.for_each_index([&](const std::vector<int64_t> &i) { tensor.set(i, value); });
  }
  void use_list() {
    args.num_partials = 2;
    args.o_list = o_list.data();
    args.lse_list = lse_list.data();
  }
  void use_stacked() {
    args.o_stacked = o_stacked.dl();
    args.lse_stacked = lse_stacked.dl();
  }
  const DLTensor *keep(const Tensor &tensor) {
    kept.push_back(std::make_unique<Tensor>(tensor));
    return kept.back()->dl();
  }
  DLTensor *keep_copy(const DLTensor *tensor) {
    copies.push_back(std::make_unique<DLTensor>(*tensor));
    return copies.back().get();
  }

  std::vector<Tensor> o_parts, lse_parts;
  Tensor o_stacked{Dtype::f32, {2, 1, 2, 1, 2, 8}};
  Tensor lse_stacked{Dtype::f32, {2, 1, 1, 2, 2}};
  Tensor o{Dtype::f16, {1, 2, 1, 2, 8}};
  Tensor lse{Dtype::f32, {1, 1, 2, 2}};
  std::vector<const DLTensor *> o_list, lse_list;
  std::vector<std::unique_ptr<Tensor>> kept;
  std::vector<std::unique_ptr<DLTensor>> copies;
  fmha_merge_args args = FMHA_MERGE_ARGS_INIT;
};

struct MergeCase {
  const char *name;
  std::function<void(MergeSetup &)> change;
  fmha_status status;
  const char *message;
};

// gtest prints a case by its name.
void PrintTo(const MergeCase &c, std::ostream *out) { *out << c.name; }

class MergeError : public ::testing::TestWithParam<MergeCase> {};

TEST_P(MergeError, ReportsTheTensor) {
  MergeSetup setup;
  GetParam().change(setup);
  EXPECT_FMHA_ERROR(fmha_merge(&setup.args), GetParam().status, GetParam().message);
}

const MergeCase kMergeCases[] = {
    {"OMissing",
     [](MergeSetup &s) {
       s.use_list();
       s.args.o = nullptr;
     },
     kInvalid, "args.o is NULL"},
    {"NoPartials", [](MergeSetup &) {}, kInvalid, "no partials are given"},
    {"BothForms",
     [](MergeSetup &s) {
       s.use_list();
       s.args.o_stacked = s.o_stacked.dl();
     },
     kInvalid, "both partial forms are given"},
    {"StackedWithNumPartials",
     [](MergeSetup &s) {
       s.use_stacked();
       s.args.num_partials = 2;
     },
     kInvalid, "args.num_partials = 2 belongs to the list form"},
    {"StackedWithoutLse",
     [](MergeSetup &s) {
       s.use_stacked();
       s.args.lse_stacked = nullptr;
     },
     kInvalid, "args.lse_stacked is NULL"},
    {"StackedWithoutO",
     [](MergeSetup &s) {
       s.use_stacked();
       s.args.o_stacked = nullptr;
     },
     kInvalid, "args.o_stacked is NULL"},
    {"StackedNoPartials",
     [](MergeSetup &s) {
       s.use_stacked();
       s.args.o_stacked = s.keep(Tensor(Dtype::f32, {0, 1, 2, 1, 2, 8}));
     },
     kInvalid, "args.o_stacked holds N = 0 partials"},
    {"StackedLseCountDiffers",
     [](MergeSetup &s) {
       s.use_stacked();
       s.args.lse_stacked = s.keep(Tensor(Dtype::f32, {3, 1, 1, 2, 2}));
     },
     kInvalid, "args.lse_stacked has shape [3, 1, 1, 2, 2]"},
    {"StackedWrongHeadDim",
     [](MergeSetup &s) {
       s.use_stacked();
       s.args.o_stacked = s.keep(Tensor(Dtype::f32, {2, 1, 2, 1, 2, 16}));
     },
     kInvalid, "args.o_stacked has shape [2, 1, 2, 1, 2, 16]"},
    {"ListWithoutLseList",
     [](MergeSetup &s) {
       s.use_list();
       s.args.lse_list = nullptr;
     },
     kInvalid, "args.lse_list is NULL"},
    {"ListWithZeroPartials",
     [](MergeSetup &s) {
       s.use_list();
       s.args.num_partials = 0;
     },
     kInvalid, "args.num_partials = 0"},
    {"ListNullEntry",
     [](MergeSetup &s) {
       s.use_list();
       s.o_list[1] = nullptr;
     },
     kInvalid, "args.o_list[1] is NULL"},
    {"ListShapeDiffers",
     [](MergeSetup &s) {
       s.use_list();
       s.o_list[1] = s.keep(Tensor(Dtype::f32, {1, 3, 1, 2, 8}));
     },
     kInvalid, "args.o_list[1] has shape [1, 3, 1, 2, 8]; expected [B=1, M=2, G=1, H=2, D=8]"},
    {"ListLseShapeDiffers",
     [](MergeSetup &s) {
       s.use_list();
       s.lse_list[0] = s.keep(Tensor(Dtype::f32, {1, 2, 2}));
       s.lse_list[1] = s.keep(Tensor(Dtype::f32, {1, 2, 3}));
     },
     kInvalid, "args.lse_list[1] has shape [1, 2, 3]"},
    {"ListDtypesDiffer",
     [](MergeSetup &s) {
       s.use_list();
       s.o_list[1] = s.keep(Tensor(Dtype::bf16, {1, 2, 1, 2, 8}));
     },
     kInvalid, "args.o_list[1] has dtype bfloat16 but args.o_list[0] has float32"},
    {"ListPartialFloat64",
     [](MergeSetup &s) {
       s.use_list();
       s.o_list[0] = s.keep(Tensor(Dtype::f64, {1, 2, 1, 2, 8}));
     },
     kInvalid, "args.o_list[0] has dtype float64"},
    {"ListLseFloat16",
     [](MergeSetup &s) {
       s.use_list();
       s.lse_list[0] = s.keep(Tensor(Dtype::f16, {1, 1, 2, 2}));
     },
     kInvalid, "args.lse_list[0] has dtype float16"},
    {"OutputInt32",
     [](MergeSetup &s) {
       s.use_list();
       s.args.o = s.keep(Tensor(Dtype::i32, {1, 2, 1, 2, 8}));
     },
     kInvalid, "args.o has dtype int32"},
    {"OutputThreeDims",
     [](MergeSetup &s) {
       s.use_list();
       s.args.o = s.keep(Tensor(Dtype::f32, {2, 2, 8}));
     },
     kInvalid, "args.o has shape [2, 2, 8]"},
    {"OutputLseFloat16",
     [](MergeSetup &s) {
       s.use_list();
       s.args.lse = s.keep(Tensor(Dtype::f16, {1, 1, 2, 2}));
     },
     kInvalid, "args.lse has dtype float16"},
    {"OutputLseWrongShape",
     [](MergeSetup &s) {
       s.use_list();
       s.args.lse = s.keep(Tensor(Dtype::f32, {1, 1, 2, 3}));
     },
     kInvalid, "args.lse has shape [1, 1, 2, 3]"},
    {"PartialOnAnotherDevice",
     [](MergeSetup &s) {
       s.use_list();
       DLTensor *moved = s.keep_copy(s.o_list[0]);
       moved->device = {kDLCUDA, 0};
       s.o_list[0] = moved;
     },
     kInvalid, "args.o_list[0] is on cuda:0; expected cpu:0"},
    {"OutputOnCpu1",
     [](MergeSetup &s) {
       s.use_list();
       DLTensor *moved = s.keep_copy(s.args.o);
       moved->device = {kDLCPU, 1};
       s.args.o = moved;
     },
     kInvalid, "args.o->device.device_id = 1 must be 0 for a cpu tensor"},
    {"OutputOnVulkan",
     [](MergeSetup &s) {
       s.use_list();
       DLTensor *moved = s.keep_copy(s.args.o);
       moved->device = {kDLVulkan, 0};
       s.args.o = moved;
     },
     kInvalid, "args.o is on device type 7:0"},
    {"PartialLastDimStrided",
     [](MergeSetup &s) {
       s.use_list();
       s.o_list[0] = s.keep(Tensor(Dtype::f32, {1, 2, 1, 2, 8}, {64, 32, 32, 16, 2}));
     },
     kInvalid, "args.o_list[0] has last-dim stride 2"},
};

INSTANTIATE_TEST_SUITE_P(Args, MergeError, ::testing::ValuesIn(kMergeCases),
                         [](const auto &info) { return std::string(info.param.name); });

TEST(Merge, NullArgs) { EXPECT_FMHA_ERROR(fmha_merge(nullptr), kInvalid, "args is NULL"); }

// O = (1 + 3) / 2 and LSE = 0.5 + log 2 wherever the partials were read.
void expect_merged(const MergeSetup &setup) {
  setup.o.for_each_index([&](const std::vector<int64_t> &i) { EXPECT_NEAR(setup.o.get(i), 2.0, 1e-3); });
  setup.lse.for_each_index(
      [&](const std::vector<int64_t> &i) { EXPECT_NEAR(setup.lse.get(i), 0.5 + std::log(2.0), 1e-5); });
}

TEST(Merge, ListForm) {
  MergeSetup setup;
  setup.use_list();
  EXPECT_FMHA_OK(fmha_merge(&setup.args));
  expect_merged(setup);
}

TEST(Merge, StackedForm) {
  MergeSetup setup;
  setup.use_stacked();
  EXPECT_FMHA_OK(fmha_merge(&setup.args));
  expect_merged(setup);
}

TEST(Merge, FormsWithoutGroupsAndWithoutLse) {
  MergeSetup setup;
  std::vector<int64_t> o_shape = {1, 2, 2, 8}, lse_shape = {1, 2, 2}, stacked_shape = {2, 1, 2, 2, 8},
                       stacked_lse_shape = {2, 1, 2, 2};
  auto reshaped = [&](const DLTensor *tensor, std::vector<int64_t> &shape) {
    DLTensor *copy = setup.keep_copy(tensor);
    copy->ndim = static_cast<int32_t>(shape.size());
    copy->shape = shape.data();
    copy->strides = nullptr;  // compact
    return copy;
  };
  setup.args.o = reshaped(setup.o.dl(), o_shape);
  setup.args.lse = nullptr;
  setup.args.o_stacked = reshaped(setup.o_stacked.dl(), stacked_shape);
  setup.args.lse_stacked = reshaped(setup.lse_stacked.dl(), stacked_lse_shape);
  EXPECT_FMHA_OK(fmha_merge(&setup.args));
  setup.o.for_each_index([&](const std::vector<int64_t> &i) { EXPECT_NEAR(setup.o.get(i), 2.0, 1e-3); });
}

TEST(Merge, EmptyRowsSucceed) {
  MergeSetup setup;
  setup.args.o = setup.keep(Tensor(Dtype::f32, {0, 2, 1, 2, 8}));
  setup.args.lse = nullptr;
  setup.args.o_stacked = setup.keep(Tensor(Dtype::f32, {2, 0, 2, 1, 2, 8}));
  setup.args.lse_stacked = setup.keep(Tensor(Dtype::f32, {2, 0, 1, 2, 2}));
  EXPECT_FMHA_OK(fmha_merge(&setup.args));
}

TEST(Merge, TensorsOfAnUnloadedBackendAreUnavailable) {
  size_t count = 0;
  ASSERT_EQ(fmha_get_backends(nullptr, 0, &count), FMHA_STATUS_SUCCESS);
  fmha_backend_info init = FMHA_BACKEND_INFO_INIT;
  std::vector<fmha_backend_info> infos(count, init);
  ASSERT_EQ(fmha_get_backends(infos.data(), count, &count), FMHA_STATUS_SUCCESS);
  bool cuda = false, hip = false;
  for (const auto &info : infos) {
    cuda |= info.available && info.backend == FMHA_BACKEND_CUDA;
    hip |= info.available && info.backend == FMHA_BACKEND_HIP;
  }
  if (cuda && hip) GTEST_SKIP() << "both GPU backends are loaded";
  MergeSetup setup;
  setup.use_list();
  DLTensor *moved = setup.keep_copy(setup.args.o);
  moved->device = {cuda ? kDLROCM : kDLCUDA, 0};
  setup.args.o = moved;
  EXPECT_FMHA_ERROR(fmha_merge(&setup.args), FMHA_STATUS_BACKEND_UNAVAILABLE,
                    cuda ? "the hip backend is unavailable" : "the cuda backend is unavailable");
}

// Merge backward: partials and their gradients, each stacked or listed.
struct BackwardSetup : MergeSetup {
  BackwardSetup() {
    for (int index = 0; index < 2; ++index) {
      grad_o_parts.emplace_back(Dtype::f32, std::vector<int64_t>{1, 2, 1, 2, 8});
      grad_lse_parts.emplace_back(Dtype::f32, std::vector<int64_t>{1, 1, 2, 2});
    }
    for (const Tensor &part : grad_o_parts) grad_o_list.push_back(part.dl());
    for (const Tensor &part : grad_lse_parts) grad_lse_list.push_back(part.dl());
    fill(grad_o, 1.0);
    backward.o = o.dl();
    backward.lse = lse.dl();
    backward.grad_o = grad_o.dl();
    backward.num_partials = 2;
    backward.o_list = o_list.data();
    backward.lse_list = lse_list.data();
    backward.grad_o_list = grad_o_list.data();
    backward.grad_lse_list = grad_lse_list.data();
  }
  std::vector<Tensor> grad_o_parts, grad_lse_parts;
  std::vector<const DLTensor *> grad_o_list, grad_lse_list;
  Tensor grad_o{Dtype::f32, {1, 2, 1, 2, 8}};
  Tensor grad_o_stacked{Dtype::f32, {2, 1, 2, 1, 2, 8}};
  Tensor grad_lse_stacked{Dtype::f32, {2, 1, 1, 2, 2}};
  fmha_merge_backward_args backward = FMHA_MERGE_BACKWARD_ARGS_INIT;
};

struct BackwardCase {
  const char *name;
  std::function<void(BackwardSetup &)> change;
  const char *message;
};

// gtest prints a case by its name.
void PrintTo(const BackwardCase &c, std::ostream *out) { *out << c.name; }

class MergeBackwardError : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(MergeBackwardError, ReportsTheTensor) {
  BackwardSetup setup;
  GetParam().change(setup);
  EXPECT_FMHA_ERROR(fmha_merge_backward(&setup.backward), kInvalid, GetParam().message);
}

const BackwardCase kBackwardCases[] = {
    {"OMissing", [](BackwardSetup &s) { s.backward.o = nullptr; }, "args.o is NULL"},
    {"LseMissing", [](BackwardSetup &s) { s.backward.lse = nullptr; }, "args.lse is NULL"},
    {"GradOMissing", [](BackwardSetup &s) { s.backward.grad_o = nullptr; }, "args.grad_o is NULL"},
    {"GradOWrongShape",
     [](BackwardSetup &s) {
       s.backward.grad_o = s.keep(Tensor(Dtype::f32, {1, 2, 1, 2, 4}));
     },
     "args.grad_o has shape [1, 2, 1, 2, 4]"},
    {"GradLseWrongShape",
     [](BackwardSetup &s) {
       s.backward.grad_lse = s.keep(Tensor(Dtype::f32, {1, 1, 2, 1}));
     },
     "args.grad_lse has shape [1, 1, 2, 1]"},
    {"NoGradients",
     [](BackwardSetup &s) {
       s.backward.grad_o_list = nullptr;
       s.backward.grad_lse_list = nullptr;
     },
     "no partials are given: give one of args.grad_o_stacked"},
    {"GradientsInBothForms", [](BackwardSetup &s) { s.backward.grad_o_stacked = s.grad_o_stacked.dl(); },
     "both partial forms are given: give one of args.grad_o_stacked"},
    {"StackedGradientCountDiffers",
     [](BackwardSetup &s) {
       s.backward.grad_o_list = nullptr;
       s.backward.grad_lse_list = nullptr;
       s.backward.grad_o_stacked = s.keep(Tensor(Dtype::f32, {3, 1, 2, 1, 2, 8}));
       s.backward.grad_lse_stacked = s.keep(Tensor(Dtype::f32, {3, 1, 1, 2, 2}));
     },
     "args.grad_o_stacked has shape [3, 1, 2, 1, 2, 8]"},
    {"NumPartialsWithoutLists",
     [](BackwardSetup &s) {
       s.backward.o_list = s.backward.lse_list = s.backward.grad_o_list = s.backward.grad_lse_list = nullptr;
       s.backward.o_stacked = s.o_stacked.dl();
       s.backward.lse_stacked = s.lse_stacked.dl();
       s.backward.grad_o_stacked = s.grad_o_stacked.dl();
       s.backward.grad_lse_stacked = s.grad_lse_stacked.dl();
     },
     "args.num_partials = 2 belongs to the list form, but no list is given"},
    {"GradientListNullEntry", [](BackwardSetup &s) { s.grad_lse_list[1] = nullptr; }, "args.grad_lse_list[1] is NULL"},
    {"GradientLseFloat16",
     [](BackwardSetup &s) {
       s.grad_lse_list[0] = s.keep(Tensor(Dtype::f16, {1, 1, 2, 2}));
     },
     "args.grad_lse_list[0] has dtype float16"},
};

INSTANTIATE_TEST_SUITE_P(Args, MergeBackwardError, ::testing::ValuesIn(kBackwardCases),
                         [](const auto &info) { return std::string(info.param.name); });

TEST(MergeBackward, NullArgs) { EXPECT_FMHA_ERROR(fmha_merge_backward(nullptr), kInvalid, "args is NULL"); }

// dO_i = w_i * dO with w_i = exp(LSE_i - LSE) = 1/2 for both partials.
TEST(MergeBackward, ListedPartialsStackedGradients) {
  BackwardSetup setup;
  MergeSetup::fill(setup.o, 2.0);
  MergeSetup::fill(setup.lse, 0.5 + std::log(2.0));
  setup.backward.grad_o_list = setup.backward.grad_lse_list = nullptr;
  setup.backward.grad_o_stacked = setup.grad_o_stacked.dl();
  setup.backward.grad_lse_stacked = setup.grad_lse_stacked.dl();
  EXPECT_FMHA_OK(fmha_merge_backward(&setup.backward));
  setup.grad_o_stacked.for_each_index(
      [&](const std::vector<int64_t> &i) { EXPECT_NEAR(setup.grad_o_stacked.get(i), 0.5, 1e-5); });
}

TEST(MergeBackward, StackedPartialsListedGradients) {
  BackwardSetup setup;
  MergeSetup::fill(setup.o, 2.0);
  MergeSetup::fill(setup.lse, 0.5 + std::log(2.0));
  setup.backward.o_list = setup.backward.lse_list = nullptr;
  setup.backward.o_stacked = setup.o_stacked.dl();
  setup.backward.lse_stacked = setup.lse_stacked.dl();
  EXPECT_FMHA_OK(fmha_merge_backward(&setup.backward));
  for (const Tensor &part : setup.grad_o_parts)
    part.for_each_index([&](const std::vector<int64_t> &i) { EXPECT_NEAR(part.get(i), 0.5, 1e-5); });
}

}  // namespace
}  // namespace fmha_api_test
