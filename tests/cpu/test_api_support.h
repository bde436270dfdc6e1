// Helpers of the API contract tests (test_api_*.cpp, test_registry.cpp): a
// small valid problem with host tensors for it, status/message checks, and
// access to the fake plugins of tests/plugin.
#ifndef FMHA_SPLITK_TESTS_CPU_TEST_API_SUPPORT_H_
#define FMHA_SPLITK_TESTS_CPU_TEST_API_SUPPORT_H_

#include <dlfcn.h>
#include <fmha_splitk/fmha_splitk.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "plugin/fake_record.h"

namespace fmha_api_test {

using fmha_test::Dtype;
using fmha_test::Tensor;

// Asserts the status and that the last error message names `part`.
#define EXPECT_FMHA_ERROR(call, expected_status, part)                                                         \
  do {                                                                                                         \
    const fmha_status status_ = (call);                                                                        \
    EXPECT_EQ(status_, (expected_status)) << fmha_status_string(status_) << ": " << fmha_last_error_message(); \
    EXPECT_NE(std::string(fmha_last_error_message()).find(part), std::string::npos)                            \
        << "message \"" << fmha_last_error_message() << "\" does not name \"" << (part) << "\"";               \
  } while (0)

#define EXPECT_FMHA_OK(call)                                                                                     \
  do {                                                                                                           \
    const fmha_status status_ = (call);                                                                          \
    EXPECT_EQ(status_, FMHA_STATUS_SUCCESS) << fmha_status_string(status_) << ": " << fmha_last_error_message(); \
    EXPECT_STREQ(fmha_last_error_message(), "");                                                                 \
  } while (0)

// B = 2 sequences of Mq = 1 query and Mkv = 64 keys, Hq = 4, Hkv = 2,
// D = 64, fp16, dense, CPU.
inline fmha_splitk_problem basic_problem() {
  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  problem.backend = FMHA_BACKEND_CPU;
  problem.batch = 2;
  problem.max_q_seqlen = 1;
  problem.max_kv_seqlen = 64;
  problem.heads_q = 4;
  problem.heads_kv = 2;
  problem.head_dim_qk = 64;
  problem.q_dtype = FMHA_DTYPE_F16;
  return problem;
}

inline Dtype dtype_of(int32_t fmha_dtype) {
  switch (fmha_dtype) {
    case FMHA_DTYPE_BF16:
      return Dtype::bf16;
    case FMHA_DTYPE_F32:
      return Dtype::f32;
    default:
      return Dtype::f16;
  }
}

// Host tensors of a FIXED / DENSE problem in the 5-D forms, filled with
// small values, and the args that point at them.
struct DenseTensors {
  explicit DenseTensors(const fmha_splitk_problem &problem) {
    const int64_t batch = problem.batch, mq = problem.max_q_seqlen, mkv = problem.max_kv_seqlen;
    const int64_t groups = problem.groups ? problem.groups : 1;
    const int64_t dv = problem.head_dim_v ? problem.head_dim_v : problem.head_dim_qk;
    const Dtype in = dtype_of(problem.q_dtype);
    const Dtype out = dtype_of(problem.o_dtype ? problem.o_dtype : problem.q_dtype);
    q = Tensor(in, {batch, mq, groups, problem.heads_q, problem.head_dim_qk});
    k = Tensor(in, {batch, mkv, groups, problem.heads_kv, problem.head_dim_qk});
    v = Tensor(in, {batch, mkv, groups, problem.heads_kv, dv});
    o = Tensor(out, {batch, mq, groups, problem.heads_q, dv});
    lse = Tensor(Dtype::f32, {batch, groups, problem.heads_q, mq});
    std::mt19937_64 rng(7);
    q.fill_uniform(rng, -1, 1);
    k.fill_uniform(rng, -1, 1);
    v.fill_uniform(rng, -1, 1);
  }
  fmha_splitk_args args() const {
    fmha_splitk_args made = FMHA_SPLITK_ARGS_INIT;
    made.q = q.dl();
    made.k = k.dl();
    made.v = v.dl();
    made.o = o.dl();
    made.lse = lse.dl();
    return made;
  }
  Tensor q, k, v, o, lse;
};

// Creates a plan or fails the test.
inline fmha_splitk_plan_t make_plan(const fmha_splitk_problem &problem) {
  fmha_splitk_plan_t plan = nullptr;
  const fmha_status status = fmha_splitk_create_plan(&problem, &plan);
  EXPECT_EQ(status, FMHA_STATUS_SUCCESS) << fmha_last_error_message();
  return plan;
}

// A plan handle value that is never dereferenced: out-parameters must keep it.
inline fmha_splitk_plan_t untouched_plan() { return reinterpret_cast<fmha_splitk_plan_t>(0x5eed); }

// The fake plugins: each variant of tests/plugin lives in its own directory.
inline std::string fake_plugin_dir(const char *variant) { return std::string(FMHA_TEST_PLUGIN_DIR) + "/" + variant; }

inline const std::vector<const char *> &fake_variants() {
  static const std::vector<const char *> variants = {"good",       "lowscore",  "score0", "noinit",
                                                     "badversion", "nulltable", "junk"};
  return variants;
}

// Puts every fake variant on FMHA_SPLITK_PLUGIN_PATH and loads the registry.
// False when the registry was already loaded without them (the tests that
// need them run in a process of their own under ctest).
inline bool load_fake_plugins() {
  std::string path;
  for (const char *variant : fake_variants()) path += (path.empty() ? "" : ":") + fake_plugin_dir(variant);
  if (setenv("FMHA_SPLITK_PLUGIN_PATH", path.c_str(), 1) != 0 || unsetenv("FMHA_SPLITK_BACKEND") != 0) return false;
  size_t count = 0;
  if (fmha_get_backends(nullptr, 0, &count) != FMHA_STATUS_SUCCESS) return false;
  fmha_backend_info init = FMHA_BACKEND_INFO_INIT;
  std::vector<fmha_backend_info> infos(count, init);
  if (fmha_get_backends(infos.data(), infos.size(), &count) != FMHA_STATUS_SUCCESS) return false;
  const std::string good = fake_plugin_dir("good") + "/";
  for (const fmha_backend_info &info : infos)
    if (std::string(info.path).rfind(good, 0) == 0 && info.available) return true;
  return false;
}

#define SKIP_WITHOUT_FAKE_PLUGINS()                                                                     \
  if (!fmha_api_test::load_fake_plugins())                                                              \
  GTEST_SKIP() << "the registry was loaded before FMHA_SPLITK_PLUGIN_PATH was set: run this test in a " \
                  "process of its own (ctest does)"

// What the working fake plugin last received.
inline const fmha_fake_record &fake_record() {
  const std::string path = fake_plugin_dir("good") + "/libfmha_splitk_fake.so";
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) {
    ADD_FAILURE() << "the fake plugin is not loaded: " << dlerror();
    static const fmha_fake_record none{};
    return none;
  }
  const auto record = reinterpret_cast<fmha_fake_record_fn>(dlsym(handle, FMHA_FAKE_RECORD_SYMBOL));
  EXPECT_NE(record, nullptr) << dlerror();
  // dlopen(RTLD_NOLOAD) took a reference; the registry keeps the plugin loaded.
  EXPECT_EQ(dlclose(handle), 0) << dlerror();
  return *record();
}

// A host tensor relabelled as living on `device` (never dereferenced there).
inline DLTensor on_device(const Tensor &tensor, DLDeviceType type, int32_t id = 0) {
  DLTensor relabelled = *tensor.dl();
  relabelled.device = {type, id};
  return relabelled;
}

}  // namespace fmha_api_test

#endif  // FMHA_SPLITK_TESTS_CPU_TEST_API_SUPPORT_H_
