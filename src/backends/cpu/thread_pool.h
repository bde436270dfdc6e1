// The CPU backend's persistent thread pool: created once per process, a
// fixed static split of work, no allocation per call, and scratch memory
// owned by each worker.
#ifndef FMHA_SPLITK_BACKENDS_CPU_THREAD_POOL_H_
#define FMHA_SPLITK_BACKENDS_CPU_THREAD_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace fmha::cpu {

// Bytes of scratch memory each worker owns (the forward's per-worker tiles).
constexpr size_t kWorkerScratchBytes = size_t{512} << 10;

class ThreadPool {
 public:
  // The process-wide pool, created on first use with FMHA_SPLITK_NUM_THREADS
  // workers (else std::thread::hardware_concurrency(), at least 1). Throws
  // std::bad_alloc when its scratch memory cannot be allocated. It is never
  // destroyed, so it still works from static destructors; its threads end
  // with the process.
  static ThreadPool &instance();

  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  // Number of workers, the calling thread included.
  int32_t size() const { return static_cast<int32_t>(workers_.size()) + 1; }

  // Runs body(worker, item) for every item in [0, count). Worker w runs
  // items w, w + size(), w + 2 size(), ... (a static split: which worker runs
  // an item never depends on timing); the caller is worker 0 and returns
  // when every item is done. Calls from several threads are serialised;
  // `body` must not throw and must not call parallel_for.
  template <class Body>
  void parallel_for(int64_t count, Body &&body) {
    using BodyType = std::remove_reference_t<Body>;
    run(
        count, [](void *context, int32_t worker, int64_t item) { (*static_cast<BodyType *>(context))(worker, item); },
        &body);
  }

  // Scratch memory of `worker` (kWorkerScratchBytes, 256-byte aligned),
  // exclusively its own while a parallel_for body runs on it.
  void *scratch(int32_t worker) const { return scratch_.get() + static_cast<size_t>(worker) * kWorkerScratchBytes; }

 private:
  using Invoke = void (*)(void *context, int32_t worker, int64_t item);
  struct AlignedFree {
    void operator()(uint8_t *memory) const;
  };

  explicit ThreadPool(int32_t requested_workers);
  void run(int64_t count, Invoke invoke, void *context);
  void serve(int32_t worker);
  static void run_share(int32_t worker, int32_t active, int64_t count, Invoke invoke, void *context);

  std::unique_ptr<uint8_t, AlignedFree> scratch_;
  std::vector<std::thread> workers_;  // workers 1 .. size() - 1
  const long owner_pid_;              // a forked child has none of the threads
  std::mutex submit_mutex_;           // one parallel_for at a time
  std::mutex forked_mutex_;           // serialises a forked child's inline runs
  std::mutex mutex_;                  // guards the fields below
  std::condition_variable start_;
  std::condition_variable done_;
  uint64_t generation_ = 0;  // one per job
  int32_t pending_ = 0;      // active workers (besides the caller) still running the job
  int64_t job_count_ = 0;
  int32_t job_active_ = 0;
  Invoke job_invoke_ = nullptr;
  void *job_context_ = nullptr;
};

}  // namespace fmha::cpu

#endif  // FMHA_SPLITK_BACKENDS_CPU_THREAD_POOL_H_
