// The CUDA plugin as the registry sees it on a machine with a GPU: loaded,
// available, naming the device, chosen by AUTO, and leaving the caller's
// CUDA state (current device, last error) as it was.
#include <cuda_runtime.h>
#include <fmha_splitk/fmha_splitk.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/cuda_util.h"

namespace fmha_test {
namespace {

std::vector<fmha_backend_info> backends() {
  size_t count = 0;
  fmha_check(fmha_get_backends(nullptr, 0, &count), "fmha_get_backends (count)");
  const fmha_backend_info init = FMHA_BACKEND_INFO_INIT;
  std::vector<fmha_backend_info> infos(count, init);
  fmha_check(fmha_get_backends(infos.data(), infos.size(), &count), "fmha_get_backends");
  return infos;
}

TEST(CudaBackend, ListedAvailableWithTheDeviceName) {
  FMHA_SKIP_WITHOUT_CUDA();
  cudaDeviceProp props{};
  cuda_check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties");
  const std::vector<fmha_backend_info> infos = backends();
  const fmha_backend_info *cuda = nullptr;
  for (const fmha_backend_info &info : infos)
    if (info.backend == FMHA_BACKEND_CUDA) cuda = &info;
  ASSERT_NE(cuda, nullptr) << "fmha_get_backends lists no CUDA backend";
  EXPECT_NE(cuda->available, 0) << "reason: " << cuda->reason;
  EXPECT_GT(cuda->score, 0);
  EXPECT_GE(cuda->device_count, 1);
  EXPECT_STREQ(cuda->name, "cuda");
  EXPECT_EQ(std::string(cuda->device_name), std::string(props.name).substr(0, sizeof cuda->device_name - 1));
  EXPECT_NE(std::string(cuda->path).find("libfmha_splitk_cuda.so"), std::string::npos) << cuda->path;
}

fmha_splitk_problem small_problem() {
  fmha_splitk_problem p = FMHA_SPLITK_PROBLEM_INIT;
  p.batch = 2;
  p.max_q_seqlen = 1;
  p.max_kv_seqlen = 256;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim_qk = 128;
  p.q_dtype = FMHA_DTYPE_BF16;
  return p;
}

TEST(CudaBackend, AutoChoosesCuda) {
  FMHA_SKIP_WITHOUT_CUDA();
  if (std::getenv("FMHA_SPLITK_BACKEND") != nullptr) GTEST_SKIP() << "FMHA_SPLITK_BACKEND overrides AUTO";
  fmha_splitk_problem p = small_problem();
  p.backend = FMHA_BACKEND_AUTO;
  fmha_splitk_plan_t raw = nullptr;
  fmha_check(fmha_splitk_create_plan(&p, &raw), "fmha_splitk_create_plan");
  const PlanPtr plan(raw, &fmha_splitk_destroy_plan);
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  fmha_check(fmha_splitk_get_plan_info(plan.get(), &info), "fmha_splitk_get_plan_info");
  EXPECT_EQ(info.backend, FMHA_BACKEND_CUDA);
  EXPECT_STREQ(info.backend_name, "cuda");
  EXPECT_GT(info.num_workers, 0) << "the plan should target the device's SMs";
}

// An MLA decode problem (Hq 16, Hkv 1, Dqk 576, Dv 512, V from K) for the
// CUDA backend, bf16.
fmha_splitk_problem mla_problem() {
  fmha_splitk_problem p = small_problem();
  p.backend = FMHA_BACKEND_CUDA;
  p.heads_q = 16;
  p.heads_kv = 1;
  p.head_dim_qk = 576;
  p.head_dim_v = 512;
  p.flags = FMHA_FLAG_V_FROM_K;
  return p;
}

// MLA reads f16, bf16 or fp8 latents on the GPU; int4 latents are refused
// at plan time with a message that names them.
TEST(CudaBackend, RefusesInt4MlaLatents) {
  FMHA_SKIP_WITHOUT_CUDA();
  fmha_splitk_problem p = mla_problem();
  p.kv_quant = FMHA_KV_QUANT_INT4;
  p.kv_quant_groups = 1;
  fmha_splitk_plan_t raw = nullptr;
  EXPECT_EQ(fmha_splitk_create_plan(&p, &raw), FMHA_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(raw, nullptr);
  const std::string message = fmha_last_error_message();
  EXPECT_NE(message.find("not int4"), std::string::npos) << message;
}

// MLA decode runs in its own kernel (kernel name "_mla32") for bf16 / f16
// latents and E4M3FN ones with one float scale (with fp8 Q and P or not);
// what that kernel does not handle (a bias, E4M3FNUZ codes) runs in the
// tile kernel. The features suite (test_mla.cpp) checks both against the
// oracle.
TEST(CudaBackend, MlaKernelChoice) {
  FMHA_SKIP_WITHOUT_CUDA();
  const auto kernel_name = [](const fmha_splitk_problem &problem) {
    fmha_splitk_plan_t raw = nullptr;
    fmha_check(fmha_splitk_create_plan(&problem, &raw), "fmha_splitk_create_plan");
    const PlanPtr plan(raw, &fmha_splitk_destroy_plan);
    fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
    fmha_check(fmha_splitk_get_plan_info(plan.get(), &info), "fmha_splitk_get_plan_info");
    return std::string(info.kernel_name);
  };
  fmha_splitk_problem p = mla_problem();
  EXPECT_NE(kernel_name(p).find("_mla32_s2"), std::string::npos) << kernel_name(p);
  p.q_dtype = FMHA_DTYPE_F16;
  EXPECT_NE(kernel_name(p).find("_mla32_s2"), std::string::npos) << kernel_name(p);
  p.kv_quant = FMHA_KV_QUANT_FP8;
  p.fp8_format = FMHA_FP8_E4M3FN;
  p.kv_scale_kind = FMHA_KV_SCALE_F32;
  p.kv_scale_granularity = FMHA_SCALE_PER_TENSOR;
  EXPECT_NE(kernel_name(p).find("_mla32_s4"), std::string::npos) << kernel_name(p);
  p.q_dtype = FMHA_DTYPE_BF16;
  EXPECT_NE(kernel_name(p).find("_mla32_s4"), std::string::npos) << kernel_name(p);
  // fp8 compute: fp8 P, and fp8 Q with fp8 P.
  p.flags = FMHA_FLAG_V_FROM_K | FMHA_FLAG_FP8_PV;
  EXPECT_NE(kernel_name(p).find("_pv8_d576_mla32_s4"), std::string::npos) << kernel_name(p);
  p.flags = FMHA_FLAG_V_FROM_K | FMHA_FLAG_FP8_QK | FMHA_FLAG_FP8_PV;
  p.q_dtype = FMHA_DTYPE_FP8;
  p.q_scale_granularity = FMHA_SCALE_PER_TENSOR;
  EXPECT_NE(kernel_name(p).find("_pv8_d576_mla32_s4"), std::string::npos) << kernel_name(p);
  p.flags = FMHA_FLAG_V_FROM_K;
  p.q_dtype = FMHA_DTYPE_BF16;
  p.fp8_format = FMHA_FP8_E4M3FNUZ;
  EXPECT_EQ(kernel_name(p).find("_mla"), std::string::npos) << kernel_name(p);
  p.fp8_format = FMHA_FP8_E4M3FN;
  p.has_bias = 1;
  EXPECT_EQ(kernel_name(p).find("_mla"), std::string::npos) << kernel_name(p);
}

TEST(CudaBackend, CallerStateIsLeftAlone) {
  FMHA_SKIP_WITHOUT_CUDA();
  int before = -1;
  cuda_check(cudaGetDevice(&before), "cudaGetDevice");
  // A request the backend refuses (a device that does not exist) must not
  // leave an error behind in the caller's runtime.
  fmha_splitk_problem p = small_problem();
  p.backend = FMHA_BACKEND_CUDA;
  p.device_id = 1000;
  fmha_splitk_plan_t raw = nullptr;
  EXPECT_NE(fmha_splitk_create_plan(&p, &raw), FMHA_STATUS_SUCCESS);
  EXPECT_EQ(raw, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  int after = -1;
  cuda_check(cudaGetDevice(&after), "cudaGetDevice");
  EXPECT_EQ(after, before);
}

}  // namespace
}  // namespace fmha_test
