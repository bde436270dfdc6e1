// The CPU backend's table (see cpu_backend.h): device properties, the
// forward and merge entry points, and host memory for plan-owned workspaces.
#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "backends/cpu/forward.h"
#include "backends/cpu/merge.h"
#include "backends/cpu/message.h"
#include "backends/cpu/thread_pool.h"

namespace fmha::cpu {
namespace {

constexpr size_t kAllocationAlignment = 256;

// Runs body() and turns any exception into a status with a message: nothing
// may cross the C table.
template <class Body>
fmha_status guarded(fmha_msg msg, Body &&body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(msg, FMHA_STATUS_OUT_OF_MEMORY, "the CPU backend ran out of host memory");
  } catch (const std::exception &error) {
    return fail(msg, FMHA_STATUS_INTERNAL_ERROR, "CPU backend: %s", error.what());
  } catch (...) {
    return fail(msg, FMHA_STATUS_INTERNAL_ERROR, "CPU backend: unknown exception");
  }
}

// The "model name" line of /proc/cpuinfo, or "cpu" where there is none.
std::string read_cpu_model_name() {
  std::FILE *cpuinfo = std::fopen("/proc/cpuinfo", "r");
  if (cpuinfo == nullptr) return "cpu";
  std::string name = "cpu";
  char line[512];
  while (std::fgets(line, sizeof line, cpuinfo) != nullptr) {
    if (std::strncmp(line, "model name", 10) != 0) continue;
    const char *value = std::strchr(line, ':');
    if (value == nullptr) continue;
    ++value;
    while (*value == ' ' || *value == '\t') ++value;
    std::string text(value);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (!text.empty()) name = text;
    break;
  }
  // Read-only stream: a failing close loses nothing we have not read.
  (void)std::fclose(cpuinfo);
  return name;
}

const std::string &cpu_model_name() {
  static const std::string name = read_cpu_model_name();
  return name;
}

fmha_status device_props(int32_t device_id, fmha_device_props *out, fmha_msg msg) {
  return guarded(msg, [&] {
    if (device_id != 0)
      return fail(msg, FMHA_STATUS_INVALID_ARGUMENT, "device_id = %d: the CPU backend has one device, 0", device_id);
    fmha_device_props props{};
    props.device_id = 0;
    props.num_workers = ThreadPool::instance().size();
    props.compute_capability = 0;
    props.row_alignment = 1;
    props.dl_device_type = kDLCPU;
    props.memory_bandwidth_gbps = 0.0;
    std::snprintf(props.name, sizeof props.name, "%s", cpu_model_name().c_str());
    *out = props;
    return FMHA_STATUS_SUCCESS;
  });
}

fmha_status plan(fmha_plan_data *plan, fmha_msg msg) {
  return guarded(msg, [&] { return plan_forward(plan, msg); });
}

fmha_status run(const fmha_plan_data *plan, const fmha_run_views *views, fmha_msg msg) {
  return guarded(msg, [&] { return run_forward(*plan, *views, msg); });
}

fmha_status merge_entry(const fmha_merge_views *views, fmha_msg msg) {
  return guarded(msg, [&] { return merge(*views, msg); });
}

fmha_status merge_backward_entry(const fmha_merge_backward_views *views, fmha_msg msg) {
  return guarded(msg, [&] { return merge_backward(*views, msg); });
}

fmha_status alloc(int32_t, size_t bytes, void **ptr, fmha_msg msg) {
  // aligned_alloc wants a multiple of the alignment (and a size of 0 may
  // return NULL), so round up from at least one byte.
  if (bytes > SIZE_MAX - kAllocationAlignment)
    return fail(msg, FMHA_STATUS_OUT_OF_MEMORY, "cannot allocate %zu bytes of host memory", bytes);
  const size_t rounded =
      (std::max<size_t>(bytes, 1) + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment;
  void *memory = std::aligned_alloc(kAllocationAlignment, rounded);
  if (memory == nullptr)
    return fail(msg, FMHA_STATUS_OUT_OF_MEMORY, "could not allocate %zu bytes of host memory", bytes);
  *ptr = memory;
  return FMHA_STATUS_SUCCESS;
}

void release(int32_t, void *ptr) { std::free(ptr); }

// Runs are synchronous: a steady clock around each one times it.
fmha_status time_run(const fmha_plan_data *plan, const fmha_run_views *views, int32_t warmup, int32_t timed,
                     int32_t, double *median_us, fmha_msg msg) {
  return guarded(msg, [&] {
    for (int32_t i = 0; i < warmup; ++i) {
      const fmha_status st = run_forward(*plan, *views, msg);
      if (st != FMHA_STATUS_SUCCESS) return st;
    }
    std::vector<double> times;
    times.reserve(static_cast<size_t>(std::max(timed, 1)));
    for (int32_t i = 0; i < std::max(timed, 1); ++i) {
      const auto start = std::chrono::steady_clock::now();
      const fmha_status st = run_forward(*plan, *views, msg);
      if (st != FMHA_STATUS_SUCCESS) return st;
      times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    *median_us = times[times.size() / 2];
    return FMHA_STATUS_SUCCESS;
  });
}

fmha_status copy_to_host(int32_t, void *dst, const void *src, size_t bytes, void *, fmha_msg) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return FMHA_STATUS_SUCCESS;
}

}  // namespace

const fmha_backend_v1 *backend_table() {
  static const fmha_backend_v1 table = {
      FMHA_BACKEND_API_VERSION,
      static_cast<uint32_t>(sizeof(fmha_backend_v1)),
      FMHA_BACKEND_CPU,
      1,
      "cpu",
      device_props,
      plan,
      run,
      merge_entry,
      merge_backward_entry,
      alloc,
      release,
      nullptr,  // nothing to shut down: the thread pool lives as long as the process
      nullptr,  // nothing to check: every run validates the metadata before computing
      time_run,
      copy_to_host,
      nullptr,  // no merge counters: CPU plans merge in their own pass
      nullptr,  // no run order: a run computes before it returns
      nullptr,
  };
  return &table;
}

}  // namespace fmha::cpu
