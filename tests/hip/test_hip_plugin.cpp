// The HIP plugin on a machine without an AMD GPU (CI, this project's
// machines): the core loads it and reports it with score 0, AUTO falls back
// to the CPU, a HIP plan is refused as unavailable; the device library
// loads with the HIP runtime, finds no device, and refuses forward plans
// as not yet ported; the plugin without its device library (a machine
// without ROCm) scores 0 instead of failing to load. Nothing here needs a
// GPU; on a machine that has one, the checks that assume none skip.
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/backend_api.h"
#include "cpu/test_api_support.h"

namespace fmha_hip_test {
namespace {

using fmha_api_test::basic_problem;
using fmha_api_test::DenseTensors;
using fmha_api_test::make_plan;

bool contains(const std::string &text, const char *part) { return text.find(part) != std::string::npos; }

std::vector<fmha_backend_info> backends() {
  size_t count = 0;
  EXPECT_EQ(fmha_get_backends(nullptr, 0, &count), FMHA_STATUS_SUCCESS);
  fmha_backend_info init = FMHA_BACKEND_INFO_INIT;
  std::vector<fmha_backend_info> infos(count, init);
  EXPECT_EQ(fmha_get_backends(infos.data(), count, &count), FMHA_STATUS_SUCCESS);
  return infos;
}

// The candidate loaded from this build's libfmha_splitk_hip.so, or NULL.
const fmha_backend_info *hip_candidate(const std::vector<fmha_backend_info> &infos) {
  const std::string plugin = std::filesystem::canonical(FMHA_TEST_HIP_PLUGIN).string();
  for (const fmha_backend_info &info : infos)
    if (info.path[0] != '\0' && std::filesystem::canonical(info.path).string() == plugin) return &info;
  return nullptr;
}

// The device library's view of the machine: the number of AMD GPUs it sees.
class DeviceLibrary : public ::testing::Test {
 protected:
  void SetUp() override {
    handle_ = dlopen(FMHA_TEST_HIP_DEVICE_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << dlerror();
    score_ = reinterpret_cast<fmha_backend_score_fn>(dlsym(handle_, "fmha_hip_device_score"));
    init_ = reinterpret_cast<fmha_backend_init_v1_fn>(dlsym(handle_, "fmha_hip_device_init_v1"));
    ASSERT_NE(score_, nullptr);
    ASSERT_NE(init_, nullptr);
  }
  // Stays mapped once its init ran (as the core keeps plugins): the HIP
  // runtime it pulled in is not made to unload under a live table.
  void *handle_ = nullptr;
  fmha_backend_score_fn score_ = nullptr;
  fmha_backend_init_v1_fn init_ = nullptr;
};

TEST(HipPlugin, IsListedWithScoreZeroWithoutADevice) {
  const std::vector<fmha_backend_info> infos = backends();
  const fmha_backend_info *hip = hip_candidate(infos);
  ASSERT_NE(hip, nullptr) << "the core did not find " << FMHA_TEST_HIP_PLUGIN;
  EXPECT_STREQ(hip->name, "hip");
  if (hip->available) GTEST_SKIP() << "an AMD GPU is present: " << hip->reason;
  EXPECT_EQ(hip->score, 0);
  EXPECT_EQ(hip->device_count, 0);
  EXPECT_TRUE(contains(hip->reason, "score 0: no driver/device/arch")) << hip->reason;
}

TEST(HipPlugin, AutoFallsBackToTheCpu) {
  const fmha_backend_info *hip = hip_candidate(backends());
  ASSERT_NE(hip, nullptr);
  if (hip->available) GTEST_SKIP() << "an AMD GPU is present";
  fmha_splitk_problem problem = basic_problem();
  problem.backend = FMHA_BACKEND_AUTO;
  fmha_splitk_plan_t plan = make_plan(problem);
  ASSERT_NE(plan, nullptr);
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  EXPECT_FMHA_OK(fmha_splitk_get_plan_info(plan, &info));
  // No CUDA plugin in a HIP build: AUTO lands on the CPU, and runs there.
  EXPECT_EQ(info.backend, FMHA_BACKEND_CPU);
  DenseTensors tensors(problem);
  const fmha_splitk_args args = tensors.args();
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &args));
  fmha_splitk_destroy_plan(plan);
}

TEST(HipPlugin, AHipPlanIsUnavailableAndSaysWhy) {
  const fmha_backend_info *hip = hip_candidate(backends());
  ASSERT_NE(hip, nullptr);
  if (hip->available) GTEST_SKIP() << "an AMD GPU is present";
  fmha_splitk_problem problem = basic_problem();
  problem.backend = FMHA_BACKEND_HIP;
  fmha_splitk_plan_t plan = nullptr;
  EXPECT_FMHA_ERROR(fmha_splitk_create_plan(&problem, &plan), FMHA_STATUS_BACKEND_UNAVAILABLE,
                    "libfmha_splitk_hip.so: score 0");
  EXPECT_EQ(plan, nullptr);
}

TEST_F(DeviceLibrary, FindsNoDeviceAsScoreZero) {
  const fmha_backend_v1 *table = init_(FMHA_BACKEND_API_VERSION);
  ASSERT_NE(table, nullptr);
  if (table->device_count > 0) GTEST_SKIP() << "an AMD GPU is present";
  EXPECT_EQ(score_(), 0);
  EXPECT_EQ(table->api_version, FMHA_BACKEND_API_VERSION);
  EXPECT_EQ(table->struct_size, sizeof(fmha_backend_v1));
  EXPECT_EQ(table->kind, FMHA_BACKEND_HIP);
  EXPECT_STREQ(table->name, "hip");
  // Every entry the core may call is there.
  EXPECT_NE(table->device_props, nullptr);
  EXPECT_NE(table->run, nullptr);
  EXPECT_NE(table->merge, nullptr);
  EXPECT_NE(table->merge_backward, nullptr);
  EXPECT_NE(table->alloc, nullptr);
  EXPECT_NE(table->free, nullptr);
}

TEST_F(DeviceLibrary, RefusesAnotherApiVersion) { EXPECT_EQ(init_(FMHA_BACKEND_API_VERSION + 1), nullptr); }

// The forward pass is the shared GPU code: every entry a forward backend
// has is in the table.
TEST_F(DeviceLibrary, HasTheForwardEntries) {
  const fmha_backend_v1 *table = init_(FMHA_BACKEND_API_VERSION);
  ASSERT_NE(table, nullptr);
  EXPECT_NE(table->plan, nullptr);
  EXPECT_NE(table->run, nullptr);
  EXPECT_NE(table->check_status, nullptr);
  EXPECT_NE(table->time_run, nullptr);
  EXPECT_NE(table->copy_to_host, nullptr);
}

// Without an AMD GPU a forward plan cannot even read the device: the HIP
// runtime's error, reported, not a crash.
TEST_F(DeviceLibrary, PlansReportTheRuntimeErrorWithoutADevice) {
  const fmha_backend_v1 *table = init_(FMHA_BACKEND_API_VERSION);
  ASSERT_NE(table, nullptr);
  if (table->device_count > 0) GTEST_SKIP() << "an AMD GPU is present";
  fmha_plan_data plan{};
  plan.problem = basic_problem();
  plan.device.device_id = 0;
  std::snprintf(plan.device.name, sizeof plan.device.name, "AMD Instinct MI300X (gfx942)");
  char text[512] = "";
  EXPECT_EQ(table->plan(&plan, fmha_msg{text, sizeof text}), FMHA_STATUS_DEVICE_ERROR);
  EXPECT_TRUE(contains(text, "failed: hipError")) << text;
}

TEST_F(DeviceLibrary, ReportsTheRuntimeErrorOfADeviceItDoesNotHave) {
  const fmha_backend_v1 *table = init_(FMHA_BACKEND_API_VERSION);
  ASSERT_NE(table, nullptr);
  if (table->device_count > 0) GTEST_SKIP() << "an AMD GPU is present";
  fmha_device_props props{};
  char text[512] = "";
  const fmha_status status = table->device_props(0, &props, fmha_msg{text, sizeof text});
  EXPECT_EQ(status, FMHA_STATUS_DEVICE_ERROR);
  EXPECT_TRUE(contains(text, "failed: hipError")) << text;
  void *memory = nullptr;
  text[0] = '\0';
  EXPECT_NE(table->alloc(0, 256, &memory, fmha_msg{text, sizeof text}), FMHA_STATUS_SUCCESS);
  EXPECT_EQ(memory, nullptr);
  EXPECT_TRUE(contains(text, "failed: hipError")) << text;
}

// The plugin copied into a fresh folder, with `device_library` (a path, or
// "" for none) beside it as its device library; dlopens the copy.
class LonePlugin : public ::testing::Test {
 protected:
  void load(const char *device_library) {
    ASSERT_NE(mkdtemp(folder_), nullptr);
    const std::string copy = std::string(folder_) + "/libfmha_splitk_hip.so";
    std::filesystem::copy_file(FMHA_TEST_HIP_PLUGIN, copy);
    if (device_library[0] != '\0')
      std::filesystem::copy_file(device_library, std::string(folder_) + "/fmha_splitk_hip_device.so");
    handle_ = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << dlerror();
    score_ = reinterpret_cast<fmha_backend_score_fn>(dlsym(handle_, "fmha_backend_score"));
    init_ = reinterpret_cast<fmha_backend_init_v1_fn>(dlsym(handle_, "fmha_backend_init_v1"));
    ASSERT_NE(score_, nullptr);
    ASSERT_NE(init_, nullptr);
  }
  void TearDown() override {
    if (handle_ != nullptr) {
      EXPECT_EQ(dlclose(handle_), 0);
    }
    std::filesystem::remove_all(folder_);
  }
  char folder_[32] = "/tmp/fmha_hip_plugin_XXXXXX";
  void *handle_ = nullptr;
  fmha_backend_score_fn score_ = nullptr;
  fmha_backend_init_v1_fn init_ = nullptr;
};

// A machine without ROCm: the device library cannot be loaded (here: it is
// absent, which dlopen reports the same way as a missing libamdhip64).
TEST_F(LonePlugin, ScoresZeroWithoutItsDeviceLibrary) {
  load("");
  EXPECT_EQ(score_(), 0);
  EXPECT_EQ(init_(FMHA_BACKEND_API_VERSION), nullptr);
}

// A file of that name that is not a device library (the plugin itself,
// which lacks the device entry points) is closed again and scores 0.
TEST_F(LonePlugin, ScoresZeroWithAForeignDeviceLibrary) {
  load(FMHA_TEST_HIP_PLUGIN);
  EXPECT_EQ(score_(), 0);
  EXPECT_EQ(init_(FMHA_BACKEND_API_VERSION), nullptr);
}

// With its own device library beside it the copy answers as the original.
TEST_F(LonePlugin, HandsOnTheDeviceLibrarysTable) {
  load(FMHA_TEST_HIP_DEVICE_LIBRARY);
  const fmha_backend_v1 *table = init_(FMHA_BACKEND_API_VERSION);
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->kind, FMHA_BACKEND_HIP);
  if (table->device_count == 0) {
    EXPECT_EQ(score_(), 0);
  }
}

}  // namespace
}  // namespace fmha_hip_test
