// A fake backend plugin for the registry tests, built once per variant
// (tests/plugin/CMakeLists.txt). The working variant is a HIP backend with
// one device on kDLROCM whose plan succeeds (kernel "fake") and whose runs
// and merges succeed without computing; it keeps a copy of the last plan
// and views it was given so that tests can see what the core handed over.
// The other variants break one step of loading.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "plugin/fake_record.h"

#ifndef FAKE_SCORE
#define FAKE_SCORE 5
#endif
#ifndef FAKE_HAS_INIT
#define FAKE_HAS_INIT 1
#endif
#ifndef FAKE_API_VERSION
#define FAKE_API_VERSION FMHA_BACKEND_API_VERSION
#endif
#ifndef FAKE_NULL_TABLE
#define FAKE_NULL_TABLE 0
#endif

namespace {

fmha_fake_record record;

fmha_status device_props(int32_t device_id, fmha_device_props *props, fmha_msg) {
  *props = fmha_device_props{};
  props->device_id = device_id;
  props->num_workers = 4;
  props->row_alignment = 16;
  props->dl_device_type = kDLROCM;
  props->memory_bandwidth_gbps = 1000.0;
  std::snprintf(props->name, sizeof(props->name), "fake device %d", static_cast<int>(device_id));
  return FMHA_STATUS_SUCCESS;
}

// Split plans ask for three merge counters, as a GPU plan that merges in
// its forward kernel does.
fmha_status plan(fmha_plan_data *plan_data, fmha_msg) {
  std::snprintf(plan_data->kernel_name, sizeof(plan_data->kernel_name), "fake");
  plan_data->merge_counters = plan_data->max_partials > 0 ? 3 : 0;
  return FMHA_STATUS_SUCCESS;
}

fmha_status run(const fmha_plan_data *plan_data, const fmha_run_views *views, fmha_msg) {
  ++record.runs;
  record.plan = *plan_data;
  record.run = *views;
  return FMHA_STATUS_SUCCESS;
}

fmha_status merge(const fmha_merge_views *views, fmha_msg) {
  ++record.merges;
  record.merge = *views;
  for (int64_t index = 0; index < views->num_partials && index < FMHA_FAKE_MAX_PARTS; ++index) {
    record.merge_o_parts[index] = views->o_parts[index];
    record.merge_lse_parts[index] = views->lse_parts[index];
  }
  return FMHA_STATUS_SUCCESS;
}

fmha_status merge_backward(const fmha_merge_backward_views *, fmha_msg) {
  ++record.merge_backwards;
  return FMHA_STATUS_SUCCESS;
}

// Host memory stands in for device memory: nothing ever reads it.
fmha_status alloc(int32_t, size_t bytes, void **ptr, fmha_msg msg) {
  *ptr = std::malloc(bytes);
  if (*ptr != nullptr) return FMHA_STATUS_SUCCESS;
  std::snprintf(msg.text, msg.capacity, "fake: malloc(%zu) failed", bytes);
  return FMHA_STATUS_OUT_OF_MEMORY;
}

void release(int32_t, void *ptr) { std::free(ptr); }

// FMHA_FAKE_ZERO_FAILS=1 makes it fail as a device would.
fmha_status zero(int32_t, void *ptr, size_t bytes, fmha_msg msg) {
  if (const char *fail = std::getenv("FMHA_FAKE_ZERO_FAILS"); fail != nullptr && fail[0] == '1') {
    std::snprintf(msg.text, msg.capacity, "fake: memset of %zu bytes failed", bytes);
    return FMHA_STATUS_DEVICE_ERROR;
  }
  std::memset(ptr, 0, bytes);
  ++record.zeroes;
  record.zeroed_bytes += bytes;
  return FMHA_STATUS_SUCCESS;
}

// A run order is a token of its own allocation (the fake computes nothing,
// so there is nothing to order): the record counts creations and
// destructions. FMHA_FAKE_ORDER_FAILS=1 makes creation fail as a device
// would.
fmha_status order_create(int32_t, void **order, fmha_msg msg) {
  if (const char *fail = std::getenv("FMHA_FAKE_ORDER_FAILS"); fail != nullptr && fail[0] == '1') {
    std::snprintf(msg.text, msg.capacity, "fake: event creation failed");
    return FMHA_STATUS_DEVICE_ERROR;
  }
  *order = std::calloc(1, sizeof(int32_t));
  if (*order == nullptr) return FMHA_STATUS_OUT_OF_MEMORY;
  ++record.orders_created;
  return FMHA_STATUS_SUCCESS;
}

void order_destroy(int32_t, void *order) {
  std::free(order);
  ++record.orders_destroyed;
}

const fmha_backend_v1 table = {FAKE_API_VERSION,
                               sizeof(fmha_backend_v1),
                               FMHA_BACKEND_HIP,
                               1,
                               "fake",
                               device_props,
                               plan,
                               run,
                               merge,
                               merge_backward,
                               alloc,
                               release,
                               nullptr,
                               nullptr,
                               nullptr,  // time_run: autotune answers NOT_SUPPORTED
                               nullptr,  // copy_to_host
                               zero,
                               order_create,
                               order_destroy};

}  // namespace

extern "C" FMHA_SPLITK_EXPORT int32_t fmha_backend_score(void) { return FAKE_SCORE; }

#if FAKE_HAS_INIT
extern "C" FMHA_SPLITK_EXPORT const fmha_backend_v1 *fmha_backend_init_v1(uint32_t core_api_version) {
  if (FAKE_NULL_TABLE || core_api_version != FMHA_BACKEND_API_VERSION) return nullptr;
  return &table;
}
#endif

extern "C" FMHA_SPLITK_EXPORT const fmha_fake_record *fmha_fake_last_record(void) { return &record; }
