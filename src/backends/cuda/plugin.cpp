// Entry points of the CUDA plugin (libfmha_splitk_cuda.so): the score the
// core ranks backends by and the fmha_backend_v1 table.
//
// Device ids are CUDA ordinals. Every entry point leaves the calling
// thread's current device as it found it, and no failed CUDA call leaves an
// error behind for a later call to report (status_from clears it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "backends/gpu/entry_points.h"
#include "backends/gpu/forward.h"
#include "backends/gpu/status.h"
#include "core/backend_api.h"

namespace fmha::cuda {
namespace {

// Oldest architecture the plugin is built and tested for (bf16 arithmetic
// needs it); FMHA_SPLITK_CUDA_ARCHS does not go below it.
constexpr int kMinComputeCapability = 80;

using gpu::write_msg;

cudaError_t compute_capability(int device, int *capability) {
  int major = 0, minor = 0;
  cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  *capability = major * 10 + minor;
  return err;
}

fmha_status read_device_props(int32_t device_id, fmha_device_props *out, fmha_msg msg) {
  int sms = 0, capability = 0, memory_clock_khz = 0, bus_width_bits = 0;
  FMHA_GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_id), msg);
  FMHA_GPU_CHECK(compute_capability(device_id, &capability), msg);
  FMHA_GPU_CHECK(cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, device_id), msg);
  FMHA_GPU_CHECK(cudaDeviceGetAttribute(&bus_width_bits, cudaDevAttrGlobalMemoryBusWidth, device_id), msg);
  cudaDeviceProp properties{};
  FMHA_GPU_CHECK(cudaGetDeviceProperties(&properties, device_id), msg);

  fmha_device_props props{};
  props.device_id = device_id;
  props.num_workers = sms;
  props.compute_capability = capability;
  // 16-byte rows let every kernel use 128-bit loads without a tail path.
  props.row_alignment = 16;
  props.dl_device_type = kDLCUDA;
  props.driver_version = gpu::driver_version_or_zero();
  // Double data rate: two transfers per memory clock over the whole bus.
  props.memory_bandwidth_gbps = 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8.0) / 1e9;
  // Names are short; cut a long one to fit rather than fail.
  std::snprintf(props.name, sizeof props.name, "%.*s", static_cast<int>(sizeof props.name - 1), properties.name);
  *out = props;
  return FMHA_STATUS_SUCCESS;
}

// Every plan asks for its device's properties, and cudaGetDeviceProperties
// alone costs about 100 us (it fills every field): read once per device.
fmha_status device_props(int32_t device_id, fmha_device_props *out, fmha_msg msg) {
  return gpu::cached_device_props<read_device_props>(device_id, out, msg);
}

fmha_status plan(fmha_plan_data *plan_data, fmha_msg msg) {
  if (plan_data->device.compute_capability < kMinComputeCapability) {
    write_msg(msg, "cuda: device %d (%s) has compute capability %d.%d; the CUDA backend needs 8.0 or newer",
              plan_data->device.device_id, plan_data->device.name, plan_data->device.compute_capability / 10,
              plan_data->device.compute_capability % 10);
    return FMHA_STATUS_NOT_SUPPORTED;
  }
  return gpu::plan_forward(plan_data, msg);
}

fmha_backend_v1 make_table() {
  fmha_backend_v1 table{};
  table.api_version = FMHA_BACKEND_API_VERSION;
  table.struct_size = sizeof(fmha_backend_v1);
  table.kind = FMHA_BACKEND_CUDA;
  table.device_count = gpu::visible_device_count();
  table.name = "cuda";
  table.device_props = device_props;
  table.plan = plan;
  table.run = gpu::run_entry;
  table.merge = gpu::merge_entry;
  table.merge_backward = gpu::merge_backward_entry;
  table.alloc = gpu::alloc_entry;
  table.free = gpu::free_entry;
  // Nothing to release: the table is static, and resetting devices would
  // destroy the application's own CUDA state.
  table.shutdown = nullptr;
  table.check_status = gpu::check_status_entry;
  table.time_run = gpu::time_run_entry<gpu::run_entry>;
  table.copy_to_host = gpu::copy_to_host_entry;
  table.zero = gpu::zero_entry;
  table.order_create = gpu::order_create_entry;
  table.order_destroy = gpu::order_destroy_entry;
  return table;
}

}  // namespace
}  // namespace fmha::cuda

#define FMHA_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

// 0 when there is no driver (or too old a one), no device, or no device of
// compute capability 8.0 or newer; else 100 + the best compute capability,
// so that newer hardware ranks higher.
FMHA_PLUGIN_EXPORT int32_t fmha_backend_score(void) {
  const int32_t count = fmha::gpu::visible_device_count();
  int best = 0;
  for (int device = 0; device < count; ++device) {
    int capability = 0;
    if (fmha::cuda::compute_capability(device, &capability) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    best = std::max(best, capability);
  }
  return best < fmha::cuda::kMinComputeCapability ? 0 : 100 + best;
}

FMHA_PLUGIN_EXPORT const fmha_backend_v1 *fmha_backend_init_v1(uint32_t core_api_version) {
  if (core_api_version != FMHA_BACKEND_API_VERSION) return nullptr;
  static const fmha_backend_v1 table = fmha::cuda::make_table();
  return &table;
}
