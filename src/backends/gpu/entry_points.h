// The fmha_backend_v1 entries that are the same on every GPU backend:
// making the right device current, the forward run and its checked status,
// the merges, device memory, timing and the device count. A plugin's table
// points at these beside its own score, device_props and plan (which checks
// the device, then calls plan_forward).
//
// Every entry leaves the calling thread's current device as it found it,
// and no failed runtime call leaves an error behind for a later call to
// report (status_from clears it).
#ifndef FMHA_SPLITK_BACKENDS_GPU_ENTRY_POINTS_H_
#define FMHA_SPLITK_BACKENDS_GPU_ENTRY_POINTS_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <thread>

#include "backends/gpu/forward.h"
#include "backends/gpu/merge.h"
#include "backends/gpu/metadata_check.h"
#include "backends/gpu/status.h"
#include "core/backend_api.h"

namespace fmha::gpu {

// Makes a device current for the object's lifetime when it is not already.
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice &) = delete;
  ScopedDevice &operator=(const ScopedDevice &) = delete;
  ~ScopedDevice() {
    // Going back to the device that was current a moment ago cannot fail
    // short of a lost context, and a destructor has no one to tell; the
    // error is at least not left behind.
    if (previous_ >= 0 && set_device(previous_) != kSuccess) (void)take_last_error();
  }

  fmha_status enter(int device, fmha_msg msg) {
    int current = 0;
    FMHA_GPU_CHECK(get_device(&current), msg);
    if (current == device) return FMHA_STATUS_SUCCESS;
    FMHA_GPU_CHECK(set_device(device), msg);
    previous_ = current;
    return FMHA_STATUS_SUCCESS;
  }

  // Enters the device that owns the memory at `ptr`; memory no device owns
  // leaves the current device.
  fmha_status enter_owner_of(const void *ptr, fmha_msg msg) {
    if (ptr == nullptr) return FMHA_STATUS_SUCCESS;  // an empty tensor: nothing is launched
    int owner = -1;
    FMHA_GPU_CHECK(memory_device(ptr, &owner), msg);
    return owner < 0 ? FMHA_STATUS_SUCCESS : enter(owner, msg);
  }

 private:
  int previous_ = -1;
};

// Merge views carry no device id: the kernels run where the output lives.
inline fmha_status merge_entry(const fmha_merge_views *views, fmha_msg msg) {
  ScopedDevice device;
  const fmha_status st = device.enter_owner_of(views->o.data, msg);
  if (st != FMHA_STATUS_SUCCESS) return st;
  return merge(*views, static_cast<Stream>(views->stream), msg);
}

inline fmha_status merge_backward_entry(const fmha_merge_backward_views *views, fmha_msg msg) {
  ScopedDevice device;
  const fmha_status st = device.enter_owner_of(views->o.data, msg);
  if (st != FMHA_STATUS_SUCCESS) return st;
  return merge_backward(*views, static_cast<Stream>(views->stream), msg);
}

// Orders the runs of one plan on its own workspace on the device
// (fmha_run_views.run_order): they share its partial slots and merge
// counters, and the core's lock orders only their launches. Each such run
// first waits for the event that the previous one recorded behind its
// work, unless it is queued where that one was (the same stream handle
// from the same thread: stream order holds), then records the event
// itself. The core calls run() for them one at a time, so the fields need
// no lock.
//
// A run being captured into a graph neither waits nor records: a capture
// may not wait on an event recorded outside it, and an event recorded
// inside one may not be waited on outside it. Replays of one graph run one
// after another; a replay is not ordered against runs of the same plan on
// its own workspace outside that graph (fmha_splitk_run says so).
struct RunOrder {
  Event done = nullptr;     // recorded behind the last ordered run's work
  bool recorded = false;    // `done` has been recorded
  Stream stream = nullptr;  // where that run was queued ...
  std::thread::id thread;   // ... and from which thread
};

inline fmha_status order_create_entry(int32_t device_id, void **order, fmha_msg msg) {
  ScopedDevice device;
  const fmha_status st = device.enter(device_id, msg);
  if (st != FMHA_STATUS_SUCCESS) return st;
  auto *created = new (std::nothrow) RunOrder;
  if (created == nullptr) {
    write_msg(msg, "%s: out of host memory for a run order", kVendorName);
    return FMHA_STATUS_OUT_OF_MEMORY;
  }
  const Error err = event_create_untimed(&created->done);
  if (err != kSuccess) {
    delete created;
    FMHA_GPU_CHECK(err, msg);
  }
  *order = created;
  return FMHA_STATUS_SUCCESS;
}

inline void order_destroy_entry(int32_t device_id, void *order) {
  auto *destroyed = static_cast<RunOrder *>(order);
  // As free_entry: nothing to report to, and no error left behind. An
  // event still pending is released once it completes.
  const fmha_msg no_msg{nullptr, 0};
  ScopedDevice device;
  if (device.enter(device_id, no_msg) == FMHA_STATUS_SUCCESS && event_destroy(destroyed->done) != kSuccess)
    (void)take_last_error();
  delete destroyed;
}

// The forward pass on the plan's device, on the caller's stream (behind
// the plan's previous run on its own workspace, for a run on it).
inline fmha_status run_entry(const fmha_plan_data *plan, const fmha_run_views *views, fmha_msg msg) {
  ScopedDevice device;
  fmha_status st = device.enter(plan->device.device_id, msg);
  if (st != FMHA_STATUS_SUCCESS) return st;
  const Stream stream = static_cast<Stream>(views->stream);
  auto *order = static_cast<RunOrder *>(views->run_order);
  bool capturing = false;
  if (order != nullptr) FMHA_GPU_CHECK(stream_is_capturing(stream, &capturing), msg);
  const bool ordered = order != nullptr && !capturing;
  const std::thread::id thread = std::this_thread::get_id();
  if (ordered && order->recorded) {
    // The NULL and per-thread handles name a different stream on each thread.
    const bool shared_handle = stream == nullptr || stream == kPerThreadStream;
    const bool same_queue = stream == order->stream && (!shared_handle || thread == order->thread);
    if (!same_queue) FMHA_GPU_CHECK(stream_wait_event(stream, order->done), msg);
  }
  st = run_forward(*plan, *views, stream, msg);
  if (st != FMHA_STATUS_SUCCESS || !ordered) return st;
  FMHA_GPU_CHECK(event_record(order->done, stream), msg);
  order->recorded = true;
  order->stream = stream;
  order->thread = thread;
  return FMHA_STATUS_SUCCESS;
}

// The outcome of a checked run (FMHA_FLAG_CHECKED), read from the workspace.
inline fmha_status check_status_entry(const fmha_plan_data *plan, void *workspace, void *stream, fmha_msg msg) {
  ScopedDevice device;
  const fmha_status st = device.enter(plan->device.device_id, msg);
  if (st != FMHA_STATUS_SUCCESS) return st;
  return read_check_status(*plan, workspace, static_cast<Stream>(stream), msg);
}

// A device's properties never change, and reading them all costs about
// 100 us (CUDA's cudaGetDeviceProperties fills every field): `Read` runs
// once per device and plans take the copy (ordinals past 63 read every
// time).
template <fmha_status (*Read)(int32_t, fmha_device_props *, fmha_msg)>
fmha_status cached_device_props(int32_t device_id, fmha_device_props *out, fmha_msg msg) {
  constexpr int kCached = 64;
  static std::mutex lock;
  static fmha_device_props cached[kCached];
  static bool valid[kCached] = {};
  const bool cacheable = device_id >= 0 && device_id < kCached;
  if (cacheable) {
    std::lock_guard<std::mutex> guard(lock);
    if (valid[device_id]) {
      *out = cached[device_id];
      return FMHA_STATUS_SUCCESS;
    }
  }
  const fmha_status st = Read(device_id, out, msg);
  if (st == FMHA_STATUS_SUCCESS && cacheable) {
    std::lock_guard<std::mutex> guard(lock);
    cached[device_id] = *out;
    valid[device_id] = true;
  }
  return st;
}

inline fmha_status alloc_entry(int32_t device_id, size_t bytes, void **ptr, fmha_msg msg) {
  ScopedDevice device;
  const fmha_status st = device.enter(device_id, msg);
  if (st != FMHA_STATUS_SUCCESS) return st;
  FMHA_GPU_CHECK(malloc_device(ptr, bytes), msg);
  return FMHA_STATUS_SUCCESS;
}

// Zeroes memory from alloc_entry on the calling thread's per-thread
// stream and waits for that alone: plan creation must not wait for the
// work of the application's other streams.
inline fmha_status zero_entry(int32_t device_id, void *ptr, size_t bytes, fmha_msg msg) {
  ScopedDevice device;
  const fmha_status st = device.enter(device_id, msg);
  if (st != FMHA_STATUS_SUCCESS) return st;
  FMHA_GPU_CHECK(memset_async(ptr, 0, bytes, kPerThreadStream), msg);
  FMHA_GPU_CHECK(stream_synchronize(kPerThreadStream), msg);
  return FMHA_STATUS_SUCCESS;
}

inline void free_entry(int32_t device_id, void *ptr) {
  if (ptr == nullptr) return;
  // free() cannot report: a failure (e.g. the runtime already unloading at
  // process exit) is dropped, and cleared so that it does not resurface.
  const fmha_msg no_msg{nullptr, 0};
  ScopedDevice device;
  if (device.enter(device_id, no_msg) != FMHA_STATUS_SUCCESS) return;
  if (free_device(ptr) != kSuccess) (void)take_last_error();
}

// Autotuning's timing (fmha_backend_v1::time_run) around a plugin's `Run`
// entry: `warmup` runs, then `timed` runs between two events each, the L2
// overwritten before each (unless keep_l2) so that a problem smaller than
// the L2 is timed from memory; the median in microseconds.
template <fmha_status (*Run)(const fmha_plan_data *, const fmha_run_views *, fmha_msg)>
fmha_status time_run_entry(const fmha_plan_data *plan, const fmha_run_views *views, int32_t warmup, int32_t timed,
                           int32_t keep_l2, double *median_us, fmha_msg msg) {
  ScopedDevice device;
  fmha_status st = device.enter(plan->device.device_id, msg);
  if (st != FMHA_STATUS_SUCCESS) return st;
  const Stream stream = static_cast<Stream>(views->stream);
  // Owns what the timing allocates, on every exit.
  struct Resources {
    Event start = nullptr, stop = nullptr;
    void *flush = nullptr;
    ~Resources() {
      if (start != nullptr) (void)event_destroy(start);
      if (stop != nullptr) (void)event_destroy(stop);
      if (flush != nullptr) (void)free_device(flush);
      (void)take_last_error();
    }
  } resources;
  FMHA_GPU_CHECK(event_create(&resources.start), msg);
  FMHA_GPU_CHECK(event_create(&resources.stop), msg);
  size_t flush_bytes = 0;
  if (!keep_l2) {
    int l2 = 0;
    FMHA_GPU_CHECK(l2_cache_bytes(plan->device.device_id, &l2), msg);
    // Twice the L2, so that none of the problem's lines survive.
    flush_bytes = 2 * static_cast<size_t>(l2 > 0 ? l2 : 0);
    if (flush_bytes > 0) FMHA_GPU_CHECK(malloc_device(&resources.flush, flush_bytes), msg);
  }
  for (int32_t i = 0; i < warmup; ++i) {
    st = Run(plan, views, msg);
    if (st != FMHA_STATUS_SUCCESS) return st;
  }
  const int32_t runs = timed > 0 ? timed : 1;
  double times[256];
  const int32_t kept = runs < 256 ? runs : 256;
  for (int32_t i = 0; i < kept; ++i) {
    if (resources.flush != nullptr) FMHA_GPU_CHECK(memset_async(resources.flush, i & 0xff, flush_bytes, stream), msg);
    FMHA_GPU_CHECK(event_record(resources.start, stream), msg);
    st = Run(plan, views, msg);
    if (st != FMHA_STATUS_SUCCESS) return st;
    FMHA_GPU_CHECK(event_record(resources.stop, stream), msg);
    FMHA_GPU_CHECK(event_synchronize(resources.stop), msg);
    float ms = 0;
    FMHA_GPU_CHECK(event_elapsed_ms(&ms, resources.start, resources.stop), msg);
    times[i] = 1e3 * ms;
  }
  // Median by insertion sort (at most 256 values).
  for (int32_t i = 1; i < kept; ++i)
    for (int32_t j = i; j > 0 && times[j - 1] > times[j]; --j) {
      const double t = times[j];
      times[j] = times[j - 1];
      times[j - 1] = t;
    }
  *median_us = times[kept / 2];
  return FMHA_STATUS_SUCCESS;
}

inline fmha_status copy_to_host_entry(int32_t device_id, void *dst, const void *src, size_t bytes, void *stream,
                                      fmha_msg msg) {
  ScopedDevice device;
  const fmha_status st = device.enter(device_id, msg);
  if (st != FMHA_STATUS_SUCCESS) return st;
  if (bytes == 0) return FMHA_STATUS_SUCCESS;
  FMHA_GPU_CHECK(copy_to_host_async(dst, src, bytes, static_cast<Stream>(stream)), msg);
  FMHA_GPU_CHECK(stream_synchronize(static_cast<Stream>(stream)), msg);
  return FMHA_STATUS_SUCCESS;
}

// The driver's version, 0 when it cannot tell.
inline int32_t driver_version_or_zero() {
  int version = 0;
  if (driver_version(&version) != kSuccess) {
    (void)take_last_error();
    return 0;
  }
  return version;
}

// The devices the runtime shows; 0 when it has none to show. The count
// fails without a driver (CUDA) or without an AMD GPU (HIP:
// hipErrorNoDevice): that is no device, not an error.
inline int32_t visible_device_count() {
  int count = 0;
  if (get_device_count(&count) != kSuccess) {
    (void)take_last_error();
    return 0;
  }
  return count;
}

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_ENTRY_POINTS_H_
