// Concurrency on the GPU: different plans running at once on their own
// streams, and one plan run from many host threads at once (each with its
// own workspace and stream, or all on the plan's own workspace). Results
// must equal the oracle and, run to run, each other bit for bit.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "features/harness.h"
#include "gpu/cuda_util.h"
#include "oracle/oracle.h"

namespace fmha_test {
namespace {

AttentionCase dense_gqa() {
  AttentionCase c;
  c.name = "dense_gqa";
  c.kv_len = {4096, 4096};
  c.heads_q = 32;
  c.heads_kv = 8;
  c.head_dim = 128;
  return c;
}

AttentionCase paged_causal() {
  AttentionCase c;
  c.name = "paged_causal";
  c.dtype = Dtype::f16;
  c.kv_layout = FMHA_KV_PAGED;
  c.kv_len = {1000, 17, 640, 333, 1, 999, 512, 64};
  c.q_len = {4};
  c.heads_q = 8;
  c.heads_kv = 1;
  c.head_dim = 64;
  c.mask = FMHA_MASK_CAUSAL;
  return c;
}

AttentionCase gappy_d256() {
  AttentionCase c;
  c.name = "gappy_d256";
  c.kv_layout = FMHA_KV_GAPPY;
  c.kv_len = {100, 3000, 17, 900};
  c.heads_q = 4;
  c.heads_kv = 4;
  c.head_dim = 256;
  return c;
}

AttentionCase padded_f32_out() {
  AttentionCase c;
  c.name = "padded_f32_out";
  c.kv_layout = FMHA_KV_PADDED;
  c.kv_len = {2000, 50, 1234};
  c.o_dtype = FMHA_DTYPE_F32;
  c.heads_q = 16;
  c.heads_kv = 2;
  c.head_dim = 128;
  c.split_k = 3;
  return c;
}

// One case ready to run on a stream of its own.
struct StreamJob {
  std::unique_ptr<AttentionData> data;
  DeviceInputs in;
  PlanPtr plan{nullptr, &fmha_splitk_destroy_plan};
  std::unique_ptr<DeviceBuffer> workspace;
  Tensor o, lse;
  std::optional<DeviceTensor> o_dev, lse_dev;
  std::unique_ptr<Stream> stream;
};

TEST(CudaStreams, DifferentPlansRunConcurrently) {
  FMHA_SKIP_WITHOUT_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  Device &device = device_under_test();
  std::vector<StreamJob> jobs;
  uint64_t case_seed = seed;
  for (const AttentionCase &spec : {dense_gqa(), paged_causal(), gappy_d256(), padded_f32_out()}) {
    StreamJob job;
    job.data = build_attention(spec, case_seed++);
    job.in = upload_inputs(*job.data);
    job.plan = make_plan(job.data->problem);
    job.workspace = std::make_unique<DeviceBuffer>(workspace_size(job.plan.get()));
    job.o = job.data->make_o();
    job.lse = job.data->make_lse();
    job.o_dev = device.upload(job.o);
    job.lse_dev = device.upload(job.lse);
    job.stream = std::make_unique<Stream>();
    jobs.push_back(std::move(job));
  }

  // Round robin without any synchronisation between the streams: every
  // plan runs three times while the others are in flight.
  for (int round = 0; round < 3; ++round)
    for (StreamJob &job : jobs) {
      const fmha_splitk_args args = run_args(job.in, *job.o_dev, &*job.lse_dev, job.workspace->get(),
                                             job.workspace->bytes(), job.stream->get());
      fmha_check(fmha_splitk_run(job.plan.get(), &args), "fmha_splitk_run");
    }

  for (StreamJob &job : jobs) {
    SCOPED_TRACE(job.data->spec.describe());
    copy_to_host(*job.o_dev, job.o, job.stream->get());
    copy_to_host(*job.lse_dev, job.lse, job.stream->get());
    const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(job.data->oracle_inputs()).forward();
    EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(job.o), ref,
                          attention_tolerance(job.data->spec.dtype, output_dtype(job.data->spec), ref.o)));
    EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(job.lse), ref.lse));
  }
}

// What one host thread produced.
struct ThreadResult {
  std::string error;
  Tensor o, lse;
};

constexpr int kThreads = 8;
constexpr int kRunsPerThread = 4;

AttentionCase threaded_case() {
  AttentionCase c;
  c.name = "threaded_paged_gqa";
  c.kv_layout = FMHA_KV_PAGED;
  c.kv_len = {2000, 1, 777, 1500, 0, 256, 1999, 64};
  c.heads_q = 8;
  c.heads_kv = 2;
  c.head_dim = 128;
  return c;
}

// What each threaded test starts from: threaded_case() on fresh data, its
// inputs on the device, its plan and the oracle's output.
struct ThreadedSetup {
  explicit ThreadedSetup(uint64_t seed)
      : data(build_attention(spec, seed)),
        in(upload_inputs(*data)),
        plan(make_plan(data->problem)),
        ref(fmha_oracle::AttentionOracle(data->oracle_inputs()).forward()) {}
  const AttentionCase spec = threaded_case();
  const std::unique_ptr<AttentionData> data;
  const DeviceInputs in;
  const PlanPtr plan;
  const fmha_oracle::AttentionOutput ref;
};

// Runs one plan from kThreads threads, each on its own stream with its own
// outputs (and its own workspace unless `owned_workspace`), and compares
// every thread's result with a serial run of the same plan.
void run_from_threads(bool owned_workspace) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const ThreadedSetup setup(seed);
  SCOPED_TRACE(setup.spec.describe());
  Device &device = device_under_test();
  const size_t ws_bytes = workspace_size(setup.plan.get());

  // The serial reference, itself checked against the oracle.
  Tensor serial_o = setup.data->make_o(), serial_lse = setup.data->make_lse();
  {
    const DeviceTensor o_dev = device.upload(serial_o), lse_dev = device.upload(serial_lse);
    const DeviceBuffer workspace(owned_workspace ? 0 : ws_bytes);
    const Stream stream;
    const fmha_splitk_args args = run_args(setup.in, o_dev, &lse_dev, workspace.get(), ws_bytes, stream.get());
    fmha_check(fmha_splitk_run(setup.plan.get(), &args), "fmha_splitk_run (serial)");
    copy_to_host(o_dev, serial_o, stream.get());
    copy_to_host(lse_dev, serial_lse, stream.get());
  }
  ASSERT_TRUE(o_matches(fmha_oracle::to_doubles(serial_o), setup.ref,
                        attention_tolerance(setup.spec.dtype, output_dtype(setup.spec), setup.ref.o)));
  ASSERT_TRUE(lse_matches(fmha_oracle::to_doubles(serial_lse), setup.ref.lse));

  // Everything a thread uses is allocated here, so the threads make only
  // the calls under test (and their own stream-ordered copies).
  std::vector<ThreadResult> results(kThreads);
  std::vector<std::optional<DeviceTensor>> o_devs(kThreads), lse_devs(kThreads);
  std::vector<std::unique_ptr<DeviceBuffer>> workspaces;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int t = 0; t < kThreads; ++t) {
    results[t].o = setup.data->make_o();
    results[t].lse = setup.data->make_lse();
    o_devs[t] = device.upload(results[t].o);
    lse_devs[t] = device.upload(results[t].lse);
    workspaces.push_back(std::make_unique<DeviceBuffer>(owned_workspace ? 0 : ws_bytes));
    streams.push_back(std::make_unique<Stream>());
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        const cudaStream_t stream = streams[t]->get();
        const fmha_splitk_args args =
            run_args(setup.in, *o_devs[t], &*lse_devs[t], workspaces[t]->get(), ws_bytes, stream);
        for (int run = 0; run < kRunsPerThread; ++run) {
          poison_async(*o_devs[t], stream);
          poison_async(*lse_devs[t], stream);
          fmha_check(fmha_splitk_run(setup.plan.get(), &args), "fmha_splitk_run");
          copy_to_host(*o_devs[t], results[t].o, stream);
          copy_to_host(*lse_devs[t], results[t].lse, stream);
          if (!bitwise_equal(results[t].o, serial_o) || !bitwise_equal(results[t].lse, serial_lse)) {
            results[t].error = "run " + std::to_string(run) + " differs from the serial run";
            return;
          }
        }
      } catch (const std::exception &e) {
        results[t].error = e.what();
      }
    });
  for (std::thread &thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(results[t].error, "") << "thread " << t;
}

TEST(CudaThreads, OnePlanManyThreadsOwnWorkspaces) {
  FMHA_SKIP_WITHOUT_CUDA();
  run_from_threads(false);
}

TEST(CudaThreads, OnePlanManyThreadsPlanOwnedWorkspace) {
  FMHA_SKIP_WITHOUT_CUDA();
  run_from_threads(true);
}

// Holds a stream back (a host function queued on it) until released; the
// destructor releases it, so that no failing check leaves a stream stuck.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) {
    cuda_check(cudaLaunchHostFunc(stream, &StreamGate::wait, &open_), "cudaLaunchHostFunc");
  }
  ~StreamGate() { open(); }
  StreamGate(const StreamGate &) = delete;
  StreamGate &operator=(const StreamGate &) = delete;
  void open() { open_.store(true); }

 private:
  static void CUDART_CB wait(void *flag) {
    while (!static_cast<std::atomic<bool> *>(flag)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::atomic<bool> open_{false};
};

// Runs on the plan's own workspace are ordered on the device, not only
// launched in order: with stream A held back before its run, a run queued
// next on stream B (otherwise idle) must wait for A's run, whose partial
// slots and merge counters it would share. Without the order B's run would
// finish first (the race that OnePlanManyThreadsPlanOwnedWorkspace meets
// by chance). Both results equal the oracle's and each other's.
TEST(CudaThreads, OwnWorkspaceRunWaitsForThePreviousRunOnAnotherStream) {
  FMHA_SKIP_WITHOUT_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const ThreadedSetup setup(seed);
  SCOPED_TRACE(setup.spec.describe());
  Device &device = device_under_test();
  ASSERT_GT(workspace_size(setup.plan.get()), 0u) << "the case must split to share a workspace";

  Tensor o[2] = {setup.data->make_o(), setup.data->make_o()};
  Tensor lse[2] = {setup.data->make_lse(), setup.data->make_lse()};
  const DeviceTensor o_dev[2] = {device.upload(o[0]), device.upload(o[1])};
  const DeviceTensor lse_dev[2] = {device.upload(lse[0]), device.upload(lse[1])};
  const Stream streams[2];
  for (int i = 0; i < 2; ++i) {
    poison_async(o_dev[i], streams[i].get());
    poison_async(lse_dev[i], streams[i].get());
    streams[i].synchronize();
  }
  {
    StreamGate gate(streams[0].get());
    for (int i = 0; i < 2; ++i) {
      const fmha_splitk_args args = run_args(setup.in, o_dev[i], &lse_dev[i], nullptr, 0, streams[i].get());
      fmha_check(fmha_splitk_run(setup.plan.get(), &args), "fmha_splitk_run");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(cudaStreamQuery(streams[1].get()), cudaErrorNotReady)
        << "the run on stream B finished while the one before it on stream A had not started";
    (void)cudaGetLastError();
    gate.open();
  }
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("stream " + std::to_string(i));
    copy_to_host(o_dev[i], o[i], streams[i].get());
    copy_to_host(lse_dev[i], lse[i], streams[i].get());
    EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(o[i]), setup.ref,
                          attention_tolerance(setup.spec.dtype, output_dtype(setup.spec), setup.ref.o)));
    EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(lse[i]), setup.ref.lse));
  }
  EXPECT_TRUE(bitwise_equal(o[0], o[1]));
  EXPECT_TRUE(bitwise_equal(lse[0], lse[1]));
}

// A capture may not wait for an event recorded outside it: a run on the
// plan's own workspace captured on another stream than the plan's last
// eager run is captured without the order, and its replays (one after
// another on that stream) and the eager runs around them are correct.
TEST(CudaThreads, OwnWorkspaceRunCapturedOnAnotherStream) {
  FMHA_SKIP_WITHOUT_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const ThreadedSetup setup(seed);
  SCOPED_TRACE(setup.spec.describe());
  Device &device = device_under_test();
  const double tolerance = attention_tolerance(setup.spec.dtype, output_dtype(setup.spec), setup.ref.o);

  Tensor o = setup.data->make_o(), lse = setup.data->make_lse();
  const DeviceTensor o_dev = device.upload(o), lse_dev = device.upload(lse);
  const Stream eager, captured;
  const fmha_splitk_args eager_args = run_args(setup.in, o_dev, &lse_dev, nullptr, 0, eager.get());
  const fmha_splitk_args captured_args = run_args(setup.in, o_dev, &lse_dev, nullptr, 0, captured.get());
  const auto check = [&](const char *what, cudaStream_t stream) {
    SCOPED_TRACE(what);
    copy_to_host(o_dev, o, stream);
    copy_to_host(lse_dev, lse, stream);
    EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(o), setup.ref, tolerance));
    EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(lse), setup.ref.lse));
  };

  poison_async(o_dev, eager.get());
  poison_async(lse_dev, eager.get());
  fmha_check(fmha_splitk_run(setup.plan.get(), &eager_args), "fmha_splitk_run (eager)");
  check("eager run", eager.get());
  GraphExec graph;
  graph.capture(captured.get(),
                [&] { fmha_check(fmha_splitk_run(setup.plan.get(), &captured_args), "fmha_splitk_run (captured)"); });
  for (int replay = 0; replay < 3; ++replay) {
    poison_async(o_dev, captured.get());
    poison_async(lse_dev, captured.get());
    graph.launch(captured.get());
    check("replay", captured.get());
  }
  poison_async(o_dev, eager.get());
  poison_async(lse_dev, eager.get());
  fmha_check(fmha_splitk_run(setup.plan.get(), &eager_args), "fmha_splitk_run (eager, after the replays)");
  check("eager run after the replays", eager.get());
}

}  // namespace
}  // namespace fmha_test
