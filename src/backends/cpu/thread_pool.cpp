// The CPU backend's thread pool (see thread_pool.h).
#include "backends/cpu/thread_pool.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <new>
#include <system_error>

namespace fmha::cpu {
namespace {

// More threads than this is a typo in FMHA_SPLITK_NUM_THREADS, not a machine.
constexpr long kMaxThreads = 4096;

int32_t configured_workers() {
  if (const char *text = std::getenv("FMHA_SPLITK_NUM_THREADS"); text != nullptr && *text != '\0') {
    char *end = nullptr;
    errno = 0;
    const long value = std::strtol(text, &end, 10);
    if (errno == 0 && *end == '\0' && value >= 1 && value <= kMaxThreads) return static_cast<int32_t>(value);
    // A malformed value falls back to the hardware count rather than failing
    // every call; the chosen count is visible as the plan's num_workers.
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  return static_cast<int32_t>(std::clamp<unsigned>(hardware, 1u, static_cast<unsigned>(kMaxThreads)));
}

}  // namespace

void ThreadPool::AlignedFree::operator()(uint8_t *memory) const { std::free(memory); }

ThreadPool &ThreadPool::instance() {
  // Deliberately leaked (see the header).
  static ThreadPool *const pool = new ThreadPool(configured_workers());
  return *pool;
}

ThreadPool::ThreadPool(int32_t requested_workers) : owner_pid_(static_cast<long>(getpid())) {
  void *memory = std::aligned_alloc(256, static_cast<size_t>(requested_workers) * kWorkerScratchBytes);
  if (memory == nullptr) throw std::bad_alloc();
  scratch_.reset(static_cast<uint8_t *>(memory));
  workers_.reserve(static_cast<size_t>(requested_workers - 1));
  for (int32_t worker = 1; worker < requested_workers; ++worker) {
    try {
      workers_.emplace_back([this, worker] { serve(worker); });
    } catch (const std::exception &) {
      // The system gave fewer threads (system_error), or no memory for one's
      // state (bad_alloc): fewer workers, same results. Letting it escape
      // would destroy the joinable threads already started: std::terminate.
      break;
    }
  }
}

void ThreadPool::run_share(int32_t worker, int32_t active, int64_t count, Invoke invoke, void *context) {
  for (int64_t item = worker; item < count; item += active) invoke(context, worker, item);
}

void ThreadPool::run(int64_t count, Invoke invoke, void *context) {
  if (count <= 0) return;
  if (static_cast<long>(getpid()) != owner_pid_) {
    // A forked child inherited the pool but not its threads: run inline.
    std::lock_guard<std::mutex> forked(forked_mutex_);
    run_share(0, 1, count, invoke, context);
    return;
  }
  std::lock_guard<std::mutex> submit(submit_mutex_);
  const auto active = static_cast<int32_t>(std::min<int64_t>(size(), count));
  if (active == 1) {
    run_share(0, 1, count, invoke, context);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_count_ = count;
    job_active_ = active;
    job_invoke_ = invoke;
    job_context_ = context;
    pending_ = active - 1;
    ++generation_;
  }
  start_.notify_all();
  run_share(0, active, count, invoke, context);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
}

void ThreadPool::serve(int32_t worker) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_.wait(lock, [&] { return generation_ != seen; });
    seen = generation_;
    if (worker >= job_active_) continue;  // not needed for this job
    const int64_t count = job_count_;
    const int32_t active = job_active_;
    const Invoke invoke = job_invoke_;
    void *const context = job_context_;
    lock.unlock();
    run_share(worker, active, count, invoke, context);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace fmha::cpu
