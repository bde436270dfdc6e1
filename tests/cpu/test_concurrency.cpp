// Concurrency on the CPU backend (issue 8): 16 threads calling the library
// at once give the bits a serial run gives. Its own executable
// (fmha_cpu_concurrency_tests) with each test in its own process under
// ctest, so that the first test's calls really are the process's first:
// the registry loads its plugins (the fake ones of tests/plugin, put on
// FMHA_SPLITK_PLUGIN_PATH) and the CPU backend starts its thread pool while
// 16 threads race into fmha_get_backends() and fmha_splitk_create_plan().
// The `threads` label runs them under ThreadSanitizer (scripts/run-tsan.sh).
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu/test_api_support.h"

namespace fmha_api_test {
namespace {

constexpr int kThreads = 16;

// Releases every waiting thread at once, so that their first calls overlap.
class StartLine {
 public:
  explicit StartLine(int threads) : waiting_(threads) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (--waiting_ == 0) {
      go_.notify_all();
      return;
    }
    go_.wait(lock, [this] { return waiting_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable go_;
  int waiting_;
};

template <class Body>
void run_threads(Body body) {
  StartLine start(kThreads);
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread)
    threads.emplace_back([&, thread] {
      start.arrive_and_wait();
      body(thread);
    });
  for (std::thread &thread : threads) thread.join();
}

// A problem of its own kind per `variant`: dense with an auto split, paged
// with a forced split and a causal mask, and a batch-invariant padded one
// with sinks. ctest runs them with 16 CPU workers, so the auto split cuts
// keys across sequences too.
struct Case {
  explicit Case(int variant) : problem(basic_problem()) {
    problem.batch = 3;
    problem.max_q_seqlen = 2;
    problem.max_kv_seqlen = 160;
    kv_lengths = {160, 37, 101};
    switch (variant % 3) {
      case 0:
        break;
      case 1:
        problem.kv_layout = FMHA_KV_PAGED;
        problem.page_size = 16;
        problem.num_pages = 40;
        problem.max_pages_per_seq = 10;
        problem.split_k = 3;
        problem.mask = FMHA_MASK_CAUSAL;
        break;
      default:
        problem.kv_layout = FMHA_KV_PADDED;
        problem.flags = FMHA_FLAG_BATCH_INVARIANT;
        problem.kv_chunk_size = 32;
        problem.has_sinks = 1;
        problem.q_dtype = FMHA_DTYPE_BF16;
        break;
    }
    const int64_t B = problem.batch, Mq = problem.max_q_seqlen, H = problem.heads_q, Hkv = problem.heads_kv;
    const int64_t D = problem.head_dim_qk;
    const Dtype dtype = dtype_of(problem.q_dtype);
    const bool paged = problem.kv_layout == FMHA_KV_PAGED;
    const std::vector<int64_t> kv_shape = paged ? std::vector<int64_t>{problem.num_pages, problem.page_size, Hkv, D}
                                                : std::vector<int64_t>{B, problem.max_kv_seqlen, Hkv, D};
    q = Tensor(dtype, {B, Mq, H, D});
    k = Tensor(dtype, kv_shape);
    v = Tensor(dtype, kv_shape);
    sinks = Tensor(Dtype::f32, {H});
    kv_seqlen = Tensor(Dtype::i32, {B});
    kv_seqlen.fill_int(kv_lengths);
    // Pages of each sequence, interleaved across sequences and reversed.
    block_table = Tensor(Dtype::i32, {B, problem.max_pages_per_seq > 0 ? problem.max_pages_per_seq : 1});
    std::vector<int32_t> pages;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t column = 0; column < block_table.shape()[1]; ++column)
        pages.push_back(static_cast<int32_t>(problem.num_pages - 1 - (column * B + b)));
    if (paged) block_table.fill_int(pages);
    std::mt19937_64 rng(11 + variant);
    q.fill_uniform(rng, -1, 1);
    k.fill_uniform(rng, -1, 1);
    v.fill_uniform(rng, -1, 1);
    sinks.fill_uniform(rng, -1, 1);
  }

  // Output tensors and a workspace of one caller.
  struct Outputs {
    Outputs(const Case &c, size_t workspace_bytes)
        : o(dtype_of(c.problem.q_dtype), {c.problem.batch, c.problem.max_q_seqlen, c.problem.heads_q, c.problem.head_dim_qk}),
          lse(Dtype::f32, {c.problem.batch, c.problem.heads_q, c.problem.max_q_seqlen}),
          workspace(workspace_bytes + 256) {
      o.poison();
      lse.poison();
    }
    void *aligned_workspace() {
      const auto address = reinterpret_cast<uintptr_t>(workspace.data());
      return workspace.data() + (256 - address % 256) % 256;
    }
    Tensor o, lse;
    std::vector<uint8_t> workspace;
  };

  fmha_splitk_args args(Outputs &out, size_t workspace_bytes, bool own_workspace) const {
    fmha_splitk_args made = FMHA_SPLITK_ARGS_INIT;
    made.q = q.dl();
    made.k = k.dl();
    made.v = v.dl();
    made.o = out.o.dl();
    made.lse = out.lse.dl();
    if (problem.has_sinks) made.sinks = sinks.dl();
    if (problem.kv_layout != FMHA_KV_DENSE) made.kv_seqlen = kv_seqlen.dl();
    if (problem.kv_layout == FMHA_KV_PAGED) made.block_table = block_table.dl();
    if (own_workspace) {
      made.workspace = out.aligned_workspace();
      made.workspace_size = workspace_bytes;
    }
    return made;
  }

  fmha_splitk_problem problem;
  std::vector<int32_t> kv_lengths;
  Tensor q, k, v, sinks, kv_seqlen, block_table;
};

size_t workspace_of(fmha_splitk_plan_t plan) {
  size_t bytes = 0;
  EXPECT_EQ(fmha_splitk_plan_workspace_size(plan, &bytes), FMHA_STATUS_SUCCESS);
  return bytes;
}

bool same_bytes(const Tensor &a, const Tensor &b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes() - 32) == 0;
}

// What one serial run of `c` on a fresh plan writes.
Case::Outputs serial_result(const Case &c) {
  fmha_splitk_plan_t plan = make_plan(c.problem);
  const size_t bytes = plan != nullptr ? workspace_of(plan) : 0;
  Case::Outputs out(c, bytes);
  const fmha_splitk_args args = c.args(out, bytes, true);
  EXPECT_EQ(fmha_splitk_run(plan, &args), FMHA_STATUS_SUCCESS) << fmha_last_error_message();
  fmha_splitk_destroy_plan(plan);
  return out;
}

std::vector<fmha_backend_info> backends() {
  size_t count = 0;
  EXPECT_EQ(fmha_get_backends(nullptr, 0, &count), FMHA_STATUS_SUCCESS);
  fmha_backend_info init = FMHA_BACKEND_INFO_INIT;
  std::vector<fmha_backend_info> infos(count, init);
  EXPECT_EQ(fmha_get_backends(infos.data(), infos.size(), &count), FMHA_STATUS_SUCCESS);
  return infos;
}

bool same_backends(const std::vector<fmha_backend_info> &a, const std::vector<fmha_backend_info> &b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].backend != b[i].backend || a[i].available != b[i].available || a[i].score != b[i].score ||
        std::strcmp(a[i].path, b[i].path) != 0 || std::strcmp(a[i].reason, b[i].reason) != 0)
      return false;
  return true;
}

TEST(Concurrency, FirstCallsRacePluginLoading) {
  // Before any call into the library: the registry is not loaded yet.
  std::string path;
  for (const char *variant : fake_variants()) path += (path.empty() ? "" : ":") + fake_plugin_dir(variant);
  ASSERT_EQ(setenv("FMHA_SPLITK_PLUGIN_PATH", path.c_str(), 1), 0);
  ASSERT_EQ(unsetenv("FMHA_SPLITK_BACKEND"), 0);
  const Case c(1);

  std::vector<std::vector<fmha_backend_info>> seen(kThreads);
  std::vector<fmha_status> plan_status(kThreads, FMHA_STATUS_INTERNAL_ERROR), run_status = plan_status;
  std::vector<std::unique_ptr<Case::Outputs>> outputs(kThreads);
  run_threads([&](int thread) {
    // Half list the backends first, half create a plan first: both paths
    // load the registry.
    if (thread % 2 == 0) seen[thread] = backends();
    fmha_splitk_plan_t plan = nullptr;
    plan_status[thread] = fmha_splitk_create_plan(&c.problem, &plan);
    if (thread % 2 == 1) seen[thread] = backends();
    if (plan == nullptr) return;
    const size_t bytes = workspace_of(plan);
    outputs[thread] = std::make_unique<Case::Outputs>(c, bytes);
    const fmha_splitk_args args = c.args(*outputs[thread], bytes, true);
    run_status[thread] = fmha_splitk_run(plan, &args);
    fmha_splitk_destroy_plan(plan);
  });

  const Case::Outputs serial = serial_result(c);
  const std::vector<fmha_backend_info> after = backends();
  bool fake_loaded = false;
  for (const fmha_backend_info &info : after)
    fake_loaded |= std::string(info.path).rfind(fake_plugin_dir("good") + "/", 0) == 0 && info.available;
  EXPECT_TRUE(fake_loaded) << "the fake plugins were not loaded: the registry was loaded before this test";
  for (int thread = 0; thread < kThreads; ++thread) {
    EXPECT_TRUE(same_backends(seen[thread], after)) << "thread " << thread << " saw another list of backends";
    ASSERT_EQ(plan_status[thread], FMHA_STATUS_SUCCESS) << "thread " << thread;
    ASSERT_EQ(run_status[thread], FMHA_STATUS_SUCCESS) << "thread " << thread;
    EXPECT_TRUE(same_bytes(outputs[thread]->o, serial.o)) << "thread " << thread << ": O differs from a serial run";
    EXPECT_TRUE(same_bytes(outputs[thread]->lse, serial.lse)) << "thread " << thread << ": LSE differs";
  }
}

TEST(Concurrency, SharedAndPrivatePlansGiveSerialBits) {
  constexpr int kVariants = 3, kRepeats = 4;
  std::vector<std::unique_ptr<Case>> cases;
  std::vector<Case::Outputs> serial;
  for (int variant = 0; variant < kVariants; ++variant) {
    cases.push_back(std::make_unique<Case>(variant));
    serial.push_back(serial_result(*cases.back()));
  }
  std::vector<fmha_splitk_plan_t> shared;
  for (const auto &c : cases) shared.push_back(make_plan(c->problem));
  for (fmha_splitk_plan_t plan : shared) ASSERT_NE(plan, nullptr);

  std::atomic<int> mismatches{0}, failures{0};
  run_threads([&](int thread) {
    const Case &c = *cases[thread % kVariants];
    const Case::Outputs &expected = serial[thread % kVariants];
    // Even threads: the shared plan, own workspace. Odd threads: a plan of
    // their own, created and destroyed while the others run.
    for (int repeat = 0; repeat < kRepeats; ++repeat) {
      fmha_splitk_plan_t plan = shared[thread % kVariants];
      if (thread % 2 == 1 && fmha_splitk_create_plan(&c.problem, &plan) != FMHA_STATUS_SUCCESS) {
        ++failures;
        return;
      }
      size_t bytes = 0;
      fmha_splitk_plan_workspace_size(plan, &bytes);
      Case::Outputs out(c, bytes);
      const fmha_splitk_args args = c.args(out, bytes, true);
      if (fmha_splitk_run(plan, &args) != FMHA_STATUS_SUCCESS) ++failures;
      if (!same_bytes(out.o, expected.o) || !same_bytes(out.lse, expected.lse)) ++mismatches;
      if (thread % 2 == 1) fmha_splitk_destroy_plan(plan);
    }
  });
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0) << "runs from 16 threads differ from serial runs";
  for (fmha_splitk_plan_t plan : shared) fmha_splitk_destroy_plan(plan);
}

TEST(Concurrency, OwnedWorkspaceSerialisesSixteenThreads) {
  const Case c(1);  // a forced split: it always needs a workspace
  const Case::Outputs expected = serial_result(c);
  fmha_splitk_plan_t plan = make_plan(c.problem);
  ASSERT_NE(plan, nullptr);
  ASSERT_GT(workspace_of(plan), 0u) << "the case must split, or the owned workspace is not exercised";
  std::atomic<int> mismatches{0}, failures{0};
  run_threads([&](int) {
    for (int repeat = 0; repeat < 4; ++repeat) {
      Case::Outputs out(c, 0);
      const fmha_splitk_args args = c.args(out, 0, false);  // NULL workspace: the plan's own
      if (fmha_splitk_run(plan, &args) != FMHA_STATUS_SUCCESS) ++failures;
      if (!same_bytes(out.o, expected.o) || !same_bytes(out.lse, expected.lse)) ++mismatches;
    }
  });
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  fmha_splitk_destroy_plan(plan);
}

TEST(Concurrency, MergesAndErrorsFromSixteenThreads) {
  // fmha_merge of two partials per thread, and a failing call on every
  // other thread: each thread sees its own result and its own message.
  const int64_t B = 2, M = 3, H = 4, D = 64;
  Tensor o_parts(Dtype::f32, {2, B, M, H, D}), lse_parts(Dtype::f32, {2, B, H, M});
  std::mt19937_64 rng(5);
  o_parts.fill_uniform(rng, -1, 1);
  lse_parts.fill_uniform(rng, -4, 4);
  auto merge_into = [&](Tensor &o, Tensor &lse) {
    fmha_merge_args args = FMHA_MERGE_ARGS_INIT;
    args.o_stacked = o_parts.dl();
    args.lse_stacked = lse_parts.dl();
    args.o = o.dl();
    args.lse = lse.dl();
    return fmha_merge(&args);
  };
  Tensor expected_o(Dtype::f32, {B, M, H, D}), expected_lse(Dtype::f32, {B, H, M});
  ASSERT_EQ(merge_into(expected_o, expected_lse), FMHA_STATUS_SUCCESS) << fmha_last_error_message();
  std::atomic<int> wrong{0};
  run_threads([&](int thread) {
    for (int repeat = 0; repeat < 8; ++repeat) {
      if (thread % 2 == 1) {
        if (fmha_splitk_create_plan(nullptr, nullptr) != FMHA_STATUS_INVALID_ARGUMENT ||
            std::strstr(fmha_last_error_message(), "problem") == nullptr)
          ++wrong;
        continue;
      }
      Tensor o(Dtype::f32, {B, M, H, D}), lse(Dtype::f32, {B, H, M});
      if (merge_into(o, lse) != FMHA_STATUS_SUCCESS || fmha_last_error_message()[0] != '\0' ||
          !same_bytes(o, expected_o) || !same_bytes(lse, expected_lse))
        ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace fmha_api_test
