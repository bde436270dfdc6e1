// Allocation failure injected into plan creation, runs and merges (issue 8):
// every host allocation of the process goes through the malloc family
// defined here (a link-time interposer: operator new reaches it through
// libstdc++'s malloc call), which, when armed, fails the Nth allocation.
// For N = 1, 2, ... until a call makes fewer than N allocations, the call
// must return SUCCESS (a failure the library tolerates) or
// OUT_OF_MEMORY with a message, leave its out-parameter untouched, and
// leak nothing (the live allocation count returns to where it was).
// Cold starts (the registry and the thread pool created by the first call)
// are injected in forked children, one per N.
//
// Its own executable (fmha_cpu_fault_tests), not built under the sanitizer
// presets: ASan owns malloc there.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cpu/test_api_support.h"

extern "C" {
void *__libc_malloc(size_t size);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *pointer, size_t size);
void *__libc_memalign(size_t alignment, size_t size);
void __libc_free(void *pointer);
}

namespace {

std::atomic<bool> armed{false};
std::atomic<long> allocations_while_armed{0};
std::atomic<long> fail_at{0};
std::atomic<long> injected{0};
std::atomic<long> live{0};

// True when `caller` (the return address of a malloc-family call) lies in
// a GPU plugin's own code: the vendor runtime linked statically into it
// (libcudart_static) calls malloc directly from its static initialisers
// and dereferences the result unchecked, so a failure injected there
// crashes inside NVIDIA's code, not ours. The plugin's C++ code allocates
// through operator new, whose malloc call comes from libstdc++ and is
// still injected.
bool in_vendor_runtime(const void *caller) {
  Dl_info info;
  if (dladdr(caller, &info) == 0 || info.dli_fname == nullptr) return false;
  return std::strstr(info.dli_fname, "libfmha_splitk_cuda") != nullptr ||
         std::strstr(info.dli_fname, "libfmha_splitk_hip") != nullptr;
}

// True when this allocation is the one to fail.
bool should_fail(const void *caller) {
  if (!armed.load(std::memory_order_relaxed)) return false;
  if (in_vendor_runtime(caller)) return false;
  const long index = ++allocations_while_armed;
  if (index != fail_at.load(std::memory_order_relaxed)) return false;
  ++injected;
  return true;
}

void *counted(void *pointer) {
  if (pointer != nullptr) ++live;
  return pointer;
}

}  // namespace

extern "C" {

void *malloc(size_t size) {
  if (should_fail(__builtin_return_address(0))) {
    errno = ENOMEM;
    return nullptr;
  }
  return counted(__libc_malloc(size));
}

void *calloc(size_t count, size_t size) {
  if (should_fail(__builtin_return_address(0))) {
    errno = ENOMEM;
    return nullptr;
  }
  return counted(__libc_calloc(count, size));
}

void *realloc(void *pointer, size_t size) {
  if (pointer == nullptr) return malloc(size);
  if (size == 0) {
    --live;
    return __libc_realloc(pointer, 0);
  }
  if (should_fail(__builtin_return_address(0))) {
    errno = ENOMEM;
    return nullptr;
  }
  return __libc_realloc(pointer, size);
}

void free(void *pointer) {
  if (pointer == nullptr) return;
  --live;
  __libc_free(pointer);
}

void *memalign(size_t alignment, size_t size) {
  if (should_fail(__builtin_return_address(0))) {
    errno = ENOMEM;
    return nullptr;
  }
  return counted(__libc_memalign(alignment, size));
}

void *aligned_alloc(size_t alignment, size_t size) { return memalign(alignment, size); }

int posix_memalign(void **out, size_t alignment, size_t size) {
  void *pointer = memalign(alignment, size);
  if (pointer == nullptr) return ENOMEM;
  *out = pointer;
  return 0;
}

}  // extern "C"

namespace fmha_api_test {
namespace {

// Runs `call` with the Nth allocation failing, for N = 1, 2, ... until the
// call completes without reaching N; returns how many N were tried.
template <class Call>
long inject_each(Call call) {
  long n = 1;
  for (; n < 100000; ++n) {
    allocations_while_armed = 0;
    injected = 0;
    fail_at = n;
    armed = true;
    const bool finished = call(n);
    armed = false;
    if (!finished) return n;
    if (injected.load() == 0) return n;  // the call made fewer than n allocations: every one was failed once
  }
  ADD_FAILURE() << "more than 100000 allocations in one call";
  return n;
}

// A failing status must be OUT_OF_MEMORY with a message.
::testing::AssertionResult clean(fmha_status status, long n) {
  if (status == FMHA_STATUS_SUCCESS) return ::testing::AssertionSuccess();
  if (status == FMHA_STATUS_OUT_OF_MEMORY && fmha_last_error_message()[0] != '\0')
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "allocation " << n << " failed: " << fmha_status_string(status) << " ("
                                       << fmha_last_error_message() << ")";
}

fmha_splitk_problem split_problem() {
  fmha_splitk_problem problem = basic_problem();
  problem.split_k = 4;  // a workspace, owned by the plan
  problem.kv_layout = FMHA_KV_PADDED;
  static const int32_t hint[2] = {64, 17};
  problem.kv_seqlen_hint = hint;  // copied during the call
  return problem;
}

// Loads the registry and the thread pool, and puts this thread's last-error
// string on the heap, so that the warm tests count only what a call keeps.
void warm_up() {
  fmha_splitk_plan_t plan = make_plan(split_problem());
  fmha_splitk_destroy_plan(plan);
  // A long message (past the short-string buffer): the thread-local
  // string's heap buffer stays, so later messages need no allocation.
  fmha_splitk_problem tiny = FMHA_SPLITK_PROBLEM_INIT;
  tiny.struct_size = 1;
  fmha_splitk_plan_t unused = nullptr;
  fmha_splitk_create_plan(&tiny, &unused);
  size_t count = 0;
  fmha_get_backends(nullptr, 0, &count);
}

TEST(AllocationFaults, CreatePlanFailsCleanlyAndLeaksNothing) {
  warm_up();
  const fmha_splitk_problem problem = split_problem();
  long successes = 0, failures = 0;
  const long tried = inject_each([&](long n) {
    const long before = live.load();
    fmha_splitk_plan_t plan = untouched_plan();
    const fmha_status status = fmha_splitk_create_plan(&problem, &plan);
    armed = false;
    EXPECT_TRUE(clean(status, n));
    if (status == FMHA_STATUS_SUCCESS) {
      ++successes;
      fmha_splitk_destroy_plan(plan);
    } else {
      ++failures;
      EXPECT_EQ(plan, untouched_plan()) << "allocation " << n;
    }
    EXPECT_EQ(live.load(), before) << "allocation " << n << ": " << live.load() - before << " allocations leaked";
    return !::testing::Test::HasFailure();
  });
  EXPECT_GT(failures, 0) << "no allocation was failed: is the interposer linked?";
  std::printf("create_plan: %ld allocations injected, %ld failed cleanly, %ld tolerated\n", tried - 1, failures,
              successes - 1);
}

TEST(AllocationFaults, RunMergeAndQuantizeAllocateNothingOrFailCleanly) {
  warm_up();
  const fmha_splitk_problem problem = split_problem();
  fmha_splitk_plan_t plan = make_plan(problem);
  ASSERT_NE(plan, nullptr);
  DenseTensors tensors(problem);
  Tensor kv_seqlen(Dtype::i32, {2});
  kv_seqlen.fill_int({64, 17});
  fmha_splitk_args args = tensors.args();
  args.kv_seqlen = kv_seqlen.dl();
  // Runs allocate no memory of the device's, but validation builds host
  // strings (the names of tensors in messages): each may fail, cleanly.
  const long run_tried = inject_each([&](long n) {
    const long before = live.load();
    EXPECT_TRUE(clean(fmha_splitk_run(plan, &args), n));
    EXPECT_EQ(live.load(), before) << "run, allocation " << n;
    return !::testing::Test::HasFailure();
  });
  std::printf("run: %ld host allocations, each failed once, cleanly\n", run_tried - 1);

  Tensor o_parts(Dtype::f32, {2, 2, 1, 4, 64}), lse_parts(Dtype::f32, {2, 2, 4, 1});
  Tensor o(Dtype::f16, {2, 1, 4, 64}), lse(Dtype::f32, {2, 4, 1});
  fmha_merge_args merge = FMHA_MERGE_ARGS_INIT;
  merge.o_stacked = o_parts.dl();
  merge.lse_stacked = lse_parts.dl();
  merge.o = o.dl();
  merge.lse = lse.dl();
  inject_each([&](long n) {
    const long before = live.load();
    EXPECT_TRUE(clean(fmha_merge(&merge), n));
    EXPECT_EQ(live.load(), before) << "merge, allocation " << n;
    return !::testing::Test::HasFailure();
  });

  Tensor src(Dtype::f32, {2, 8, 2, 64}), dst(Dtype::i32, {2, 8, 2, 1 + 8});
  fmha_quantize_kv_args quantize = FMHA_QUANTIZE_KV_ARGS_INIT;
  quantize.src = src.dl();
  quantize.dst = dst.dl();
  quantize.kv_quant = FMHA_KV_QUANT_INT4;
  inject_each([&](long n) {
    const long before = live.load();
    EXPECT_TRUE(clean(fmha_quantize_kv(&quantize), n));
    EXPECT_EQ(live.load(), before) << "quantize, allocation " << n;
    return !::testing::Test::HasFailure();
  });
  fmha_splitk_destroy_plan(plan);
}

// The first call of a process, with allocation N failing, in a child per N:
// the registry's plugin scan and the thread pool's start must fail cleanly
// too, and a second call (nothing failing) must then succeed: a failed
// first use leaves no half-built state behind.
TEST(AllocationFaults, FirstCallOfAProcessFailsCleanly) {
  // The fake plugins make the registry's scan do real work (dlopen, reasons).
  std::string path;
  for (const char *variant : fake_variants()) path += (path.empty() ? "" : ":") + fake_plugin_dir(variant);
  ASSERT_EQ(setenv("FMHA_SPLITK_PLUGIN_PATH", path.c_str(), 1), 0);
  ASSERT_EQ(setenv("FMHA_SPLITK_NUM_THREADS", "4", 1), 0);
  const fmha_splitk_problem problem = split_problem();
  long n = 1, tolerated = 0;
  for (; n < 20000; ++n) {
    std::fflush(nullptr);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // glibc aborts ("failed to register TLS destructor") when it cannot
      // allocate the record of a thread_local's destructor, which the
      // thread's first use of the last-error message makes; that first use
      // happens before the injection, as fmha_last_error_message() costs no
      // plan and loads no registry.
      fmha_last_error_message();
      allocations_while_armed = 0;
      fail_at = n;
      armed = true;
      fmha_splitk_plan_t plan = untouched_plan();
      const fmha_status first = fmha_splitk_create_plan(&problem, &plan);
      armed = false;
      // 10: the Nth allocation was never reached (the loop is done).
      if (injected.load() == 0) _exit(first == FMHA_STATUS_SUCCESS ? 10 : 11);
      if (first != FMHA_STATUS_SUCCESS && first != FMHA_STATUS_OUT_OF_MEMORY) {
        std::fprintf(stderr, "allocation %ld: %s: %s\n", n, fmha_status_string(first), fmha_last_error_message());
        _exit(20 + first);
      }
      if (first != FMHA_STATUS_SUCCESS && plan != untouched_plan()) _exit(30);
      if (first == FMHA_STATUS_SUCCESS) fmha_splitk_destroy_plan(plan);
      fmha_splitk_plan_t second = nullptr;
      if (fmha_splitk_create_plan(&problem, &second) != FMHA_STATUS_SUCCESS) _exit(40);
      fmha_splitk_destroy_plan(second);
      _exit(first == FMHA_STATUS_SUCCESS ? 1 : 0);
    }
    int wait_status = 0;
    ASSERT_EQ(waitpid(child, &wait_status, 0), child);
    ASSERT_TRUE(WIFEXITED(wait_status)) << "allocation " << n << ": the child died of signal "
                                        << (WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0);
    const int code = WEXITSTATUS(wait_status);
    if (code == 10) break;
    ASSERT_TRUE(code == 0 || code == 1) << "allocation " << n << ": child exit code " << code
                                        << " (11: the uninjected call failed; 2x: status x; 30: plan written; "
                                           "40: the next call failed)";
    tolerated += code;
  }
  EXPECT_GT(n, 1);
  std::printf("first call: %ld allocations injected, %ld tolerated\n", n - 1, tolerated);
}

}  // namespace
}  // namespace fmha_api_test
