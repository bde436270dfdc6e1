// Concurrency on the GPU: different plans running at once on their own
// streams, and one plan run from many host threads at once (each with its
// own workspace and stream, or all on the plan's own workspace). Results
// must equal the oracle and, run to run, each other bit for bit.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

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

// Runs one plan from kThreads threads, each on its own stream with its own
// outputs (and its own workspace unless `owned_workspace`), and compares
// every thread's result with a serial run of the same plan.
void run_from_threads(bool owned_workspace) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const AttentionCase spec = threaded_case();
  SCOPED_TRACE(spec.describe());
  Device &device = device_under_test();
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  const DeviceInputs in = upload_inputs(*data);
  const PlanPtr plan = make_plan(data->problem);
  const size_t ws_bytes = workspace_size(plan.get());

  // The serial reference, itself checked against the oracle.
  Tensor serial_o = data->make_o(), serial_lse = data->make_lse();
  {
    const DeviceTensor o_dev = device.upload(serial_o), lse_dev = device.upload(serial_lse);
    const DeviceBuffer workspace(owned_workspace ? 0 : ws_bytes);
    const Stream stream;
    const fmha_splitk_args args = run_args(in, o_dev, &lse_dev, workspace.get(), ws_bytes, stream.get());
    fmha_check(fmha_splitk_run(plan.get(), &args), "fmha_splitk_run (serial)");
    copy_to_host(o_dev, serial_o, stream.get());
    copy_to_host(lse_dev, serial_lse, stream.get());
  }
  const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(data->oracle_inputs()).forward();
  ASSERT_TRUE(o_matches(fmha_oracle::to_doubles(serial_o), ref,
                        attention_tolerance(spec.dtype, output_dtype(spec), ref.o)));
  ASSERT_TRUE(lse_matches(fmha_oracle::to_doubles(serial_lse), ref.lse));

  // Everything a thread uses is allocated here, so the threads make only
  // the calls under test (and their own stream-ordered copies).
  std::vector<ThreadResult> results(kThreads);
  std::vector<std::optional<DeviceTensor>> o_devs(kThreads), lse_devs(kThreads);
  std::vector<std::unique_ptr<DeviceBuffer>> workspaces;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int t = 0; t < kThreads; ++t) {
    results[t].o = data->make_o();
    results[t].lse = data->make_lse();
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
            run_args(in, *o_devs[t], &*lse_devs[t], workspaces[t]->get(), ws_bytes, stream);
        for (int run = 0; run < kRunsPerThread; ++run) {
          poison_async(*o_devs[t], stream);
          poison_async(*lse_devs[t], stream);
          fmha_check(fmha_splitk_run(plan.get(), &args), "fmha_splitk_run");
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

}  // namespace
}  // namespace fmha_test
