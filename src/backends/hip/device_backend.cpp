// The HIP backend proper (fmha_splitk_hip_device.so, linked to the HIP
// runtime): the score and the fmha_backend_v1 table that the plugin's entry
// points (plugin.cpp) hand on to the core.
//
// Device ids are HIP ordinals. The entries every GPU backend shares (device
// scoping, merges, memory) are those of backends/gpu/entry_points.h.
//
// Everything runs the shared GPU code (backends/gpu): the split-K forward
// (kernels through the vendor layer, backends/gpu/vendor/hip_tile.cuh),
// its scheduling pass and combine, checked mode, the merges, autotuning's
// timing. None of it has run on an AMD GPU (docs/amd.md).
#include <hip/hip_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "backends/gpu/entry_points.h"
#include "backends/hip/device_entry.h"
#include "core/backend_api.h"

namespace fmha::hip {
namespace {

using fmha::gpu::visible_device_count;
using fmha::gpu::write_msg;

// The architecture of `device` without its feature suffix ("gfx90a" of
// "gfx90a:sramecc+:xnack-").
hipError_t device_arch(int device, char (&arch)[64], hipDeviceProp_t *properties) {
  const hipError_t err = hipGetDeviceProperties(properties, device);
  if (err != hipSuccess) return err;
  std::snprintf(arch, sizeof arch, "%.*s", static_cast<int>(std::strcspn(properties->gcnArchName, ":")),
                properties->gcnArchName);
  return hipSuccess;
}

// Whether this build holds code for `arch`: FMHA_SPLITK_HIP_ARCHS (the
// offload architectures, ","-separated) is set by the build.
bool arch_is_built(const char *arch) {
  const char *built = FMHA_SPLITK_HIP_ARCHS;
  const size_t length = std::strlen(arch);
  for (const char *entry = built; *entry != '\0';) {
    const size_t entry_length = std::strcspn(entry, ",");
    if (entry_length == length && std::strncmp(entry, arch, length) == 0) return true;
    entry += entry_length;
    if (*entry == ',') ++entry;
  }
  return false;
}

fmha_status read_device_props(int32_t device_id, fmha_device_props *out, fmha_msg msg) {
  int compute_units = 0, memory_clock_khz = 0, bus_width_bits = 0;
  FMHA_GPU_CHECK(hipDeviceGetAttribute(&compute_units, hipDeviceAttributeMultiprocessorCount, device_id), msg);
  FMHA_GPU_CHECK(hipDeviceGetAttribute(&memory_clock_khz, hipDeviceAttributeMemoryClockRate, device_id), msg);
  FMHA_GPU_CHECK(hipDeviceGetAttribute(&bus_width_bits, hipDeviceAttributeMemoryBusWidth, device_id), msg);
  hipDeviceProp_t properties{};
  char arch[64];
  FMHA_GPU_CHECK(device_arch(device_id, arch, &properties), msg);

  fmha_device_props props{};
  props.device_id = device_id;
  props.num_workers = compute_units;
  // HIP's major.minor: 9.0 for gfx90a, 9.4 for gfx94x, 9.5 for gfx950.
  props.compute_capability = properties.major * 10 + properties.minor;
  // 16-byte rows let every kernel use 128-bit loads without a tail path.
  props.row_alignment = 16;
  props.dl_device_type = kDLROCM;
  props.driver_version = fmha::gpu::driver_version_or_zero();
  // HBM: two transfers per memory clock over the whole bus.
  props.memory_bandwidth_gbps = 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8.0) / 1e9;
  // "AMD Instinct MI300X (gfx942)"; cut a long one to fit rather than fail.
  std::snprintf(props.name, sizeof props.name, "%.*s (%s)", static_cast<int>(sizeof props.name - 16), properties.name,
                arch);
  *out = props;
  return FMHA_STATUS_SUCCESS;
}

// hipGetDeviceProperties fills every field: read once per device.
fmha_status device_props(int32_t device_id, fmha_device_props *out, fmha_msg msg) {
  return fmha::gpu::cached_device_props<read_device_props>(device_id, out, msg);
}

fmha_status plan(fmha_plan_data *plan_data, fmha_msg msg) {
  char arch[64];
  hipDeviceProp_t properties{};
  FMHA_GPU_CHECK(device_arch(plan_data->device.device_id, arch, &properties), msg);
  if (!arch_is_built(arch)) {
    write_msg(msg, "hip: device %d (%s) is %s; this build has code for %s only (FMHA_SPLITK_HIP_ARCHS)",
              plan_data->device.device_id, plan_data->device.name, arch, FMHA_SPLITK_HIP_ARCHS);
    return FMHA_STATUS_NOT_SUPPORTED;
  }
  return fmha::gpu::plan_forward(plan_data, msg);
}

fmha_backend_v1 make_table() {
  fmha_backend_v1 table{};
  table.api_version = FMHA_BACKEND_API_VERSION;
  table.struct_size = sizeof(fmha_backend_v1);
  table.kind = FMHA_BACKEND_HIP;
  table.device_count = visible_device_count();
  table.name = "hip";
  table.device_props = device_props;
  table.plan = plan;
  table.run = fmha::gpu::run_entry;
  table.merge = fmha::gpu::merge_entry;
  table.merge_backward = fmha::gpu::merge_backward_entry;
  table.alloc = fmha::gpu::alloc_entry;
  table.free = fmha::gpu::free_entry;
  // Nothing to release: the table is static, and resetting devices would
  // destroy the application's own HIP state.
  table.shutdown = nullptr;
  table.check_status = fmha::gpu::check_status_entry;
  table.time_run = fmha::gpu::time_run_entry<fmha::gpu::run_entry>;
  table.copy_to_host = fmha::gpu::copy_to_host_entry;
  table.zero = fmha::gpu::zero_entry;
  table.order_create = fmha::gpu::order_create_entry;
  table.order_destroy = fmha::gpu::order_destroy_entry;
  return table;
}

}  // namespace
}  // namespace fmha::hip

// 0 without a device or without a device whose architecture this build has
// code for; else 100.
FMHA_HIP_DEVICE_EXPORT int32_t fmha_hip_device_score(void) {
  const int32_t count = fmha::gpu::visible_device_count();
  for (int device = 0; device < count; ++device) {
    hipDeviceProp_t properties{};
    char arch[64];
    if (fmha::hip::device_arch(device, arch, &properties) != hipSuccess) {
      (void)hipGetLastError();
      continue;
    }
    if (fmha::hip::arch_is_built(arch)) return 100;
  }
  return 0;
}

FMHA_HIP_DEVICE_EXPORT const fmha_backend_v1 *fmha_hip_device_init_v1(uint32_t core_api_version) {
  if (core_api_version != FMHA_BACKEND_API_VERSION) return nullptr;
  static const fmha_backend_v1 table = fmha::hip::make_table();
  return &table;
}
