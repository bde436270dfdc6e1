// `fmha-splitk bench`: the named benchmark grid (bench/problems.txt) on one
// backend, timed as bench/peers.py times the peers (rotated input sets, one
// CUDA graph, the median of its replays), against bandwidth ceilings measured
// in the same run, each problem checked against the CPU backend.
#include <fmha_splitk/fmha_splitk.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_inputs.h"
#include "bench_report.h"
#include "decode_problem.h"
#include "device.h"
#include "half.h"
#include "plan.h"
#include "problem_grid.h"
#include "problem_selection.h"
#include "random_bf16.h"
#include "status.h"
#include "subcommand.h"

namespace fmha_cli {
namespace {

constexpr uint64_t kSeed = kBenchSeed;
constexpr int64_t kDefaultReplays = 60;
// Medians of fewer graph replays move from run to run on a GPU.
constexpr int64_t kMinGpuReplays = 50;
constexpr int kWarmupPasses = 2;  // as peers.py
constexpr int kPlanRepeats = 200;
constexpr int64_t kHostCalls = 500;
// Host-cost calls between synchronisations: few enough that the launch
// queue never fills, which would make a call wait for the GPU.
constexpr int64_t kHostCallsPerSync = 50;
constexpr int kCeilingRepeats = 10;
// Ceiling buffers: on a GPU far beyond its L2 (60 MB on an H100/H200), so
// the numbers are the memory's; on the host small, as that run is a test.
constexpr size_t kGpuCopyBytes = size_t{2} << 30;
constexpr size_t kGpuReadBytes = size_t{4} << 30;
constexpr size_t kHostCeilingBytes = size_t{64} << 20;
// As peers.py: enough input sets that one replay cycles through eight times
// the 60 MiB L2, so K and V come from memory and not from the cache.
constexpr double kRotationBytes = 8.0 * 60.0 * 1024.0 * 1024.0;
constexpr int64_t kMaxRotations = 64;

using Clock = std::chrono::steady_clock;

double elapsed_us(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::micro>(end - start).count();
}

int64_t rotated_sets(double bytes_per_set) {
  const auto wanted = static_cast<int64_t>(std::ceil(kRotationBytes / bytes_per_set));
  return std::max<int64_t>(1, std::min(kMaxRotations, wanted));
}

char *byte_offset(void *base, int64_t bytes) { return static_cast<char *>(base) + bytes; }

// Median milliseconds of `repeats` runs of `enqueue`, after one warm-up.
double median_ms(Device &device, const std::function<void()> &enqueue, int repeats) {
  device.time_ms(enqueue);
  std::vector<double> times(static_cast<size_t>(repeats));
  for (double &time : times) time = device.time_ms(enqueue);
  return median(times);
}

struct Ceilings {
  double copy_gbps = NAN;  // bytes read plus bytes written, over time
  double read_gbps = NAN;
  size_t copy_bytes = 0;
  size_t read_bytes = 0;
};

Ceilings measure_ceilings(Device &device, bool on_gpu) {
  Ceilings ceilings;
  ceilings.copy_bytes = on_gpu ? kGpuCopyBytes : kHostCeilingBytes;
  ceilings.read_bytes = on_gpu ? kGpuReadBytes : kHostCeilingBytes;
  {
    DeviceBuffer source(device, ceilings.copy_bytes);
    DeviceBuffer destination(device, ceilings.copy_bytes);
    device.fill_random_bf16(source.data(), ceilings.copy_bytes / 2, random_bits(kSeed, 0));
    const double ms = median_ms(
        device, [&] { device.copy_within(destination.data(), source.data(), ceilings.copy_bytes); }, kCeilingRepeats);
    ceilings.copy_gbps = 2.0 * static_cast<double>(ceilings.copy_bytes) / (ms * 1e6);
  }
  {
    DeviceBuffer words(device, ceilings.read_bytes);
    // Random words, not zeros: the measure must not depend on the data.
    device.fill_random_bf16(words.data(), ceilings.read_bytes / 2, random_bits(kSeed, 1));
    const double ms = median_ms(
        device, [&] { device.read_words(words.data(), ceilings.read_bytes); }, kCeilingRepeats);
    ceilings.read_gbps = static_cast<double>(ceilings.read_bytes) / (ms * 1e6);
  }
  return ceilings;
}

// ||o - ref|| / ||ref|| of one sequence (batch 1, `length` keys, dense),
// the reference from the CPU backend on the same bf16 Q and the same K/V
// (packed the same way, so both dequantise the same values) with fp32
// output. NaN in `o` gives NaN.
double sequence_error(const BenchCase &c, int64_t length, std::vector<uint8_t> &q, std::vector<uint8_t> &k,
                      std::vector<uint8_t> &v, std::vector<uint8_t> &k_scale, std::vector<uint8_t> &v_scale,
                      const std::vector<uint16_t> &o) {
  DecodeShape shape = c.shape();
  shape.batch = 1;
  shape.kv_len = length;
  fmha_splitk_problem problem = make_problem(shape, FMHA_BACKEND_CPU, 1);
  set_kv_quant(problem, c.spec.quant);
  problem.o_dtype = FMHA_DTYPE_F32;  // the reference keeps fp32, so only the tested output is rounded
  const Plan plan = create_plan(problem, "cpu");

  const DLDevice host{kDLCPU, 0};
  std::vector<float> reference(o.size());
  const DenseTensor q_tensor(q.data(), host, FMHA_DTYPE_BF16, {1, c.spec.q_len, c.spec.heads_q, c.spec.head_dim});
  const DenseTensor k_tensor(k.data(), host, kv_element(c), kv_dims(c, {1, length}));
  const DenseTensor v_tensor(v.data(), host, kv_element(c), kv_dims(c, {1, length}));
  const DenseTensor k_scale_tensor(k_scale.data(), host, scale_element(c), scale_dims(c, {1, length}));
  const DenseTensor v_scale_tensor(v_scale.data(), host, scale_element(c), scale_dims(c, {1, length}));
  const DenseTensor out(reference.data(), host, FMHA_DTYPE_F32, {1, c.spec.q_len, c.spec.heads_q, c.spec.head_dim});
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = q_tensor.dl();
  args.k = k_tensor.dl();
  args.v = v_tensor.dl();
  args.o = out.dl();
  if (c.spec.quant.fp8()) {
    args.k_scale = k_scale_tensor.dl();
    args.v_scale = v_scale_tensor.dl();
  }
  check_status(fmha_splitk_run(plan.get(), &args), "reference run on the CPU backend");

  double error_squared = 0.0;
  double reference_squared = 0.0;
  for (size_t i = 0; i < o.size(); ++i) {
    const double expected = reference[i];
    const double got = bf16_to_float(o[i]);
    error_squared += (got - expected) * (got - expected);
    reference_squared += expected * expected;
  }
  return std::sqrt(error_squared / reference_squared);
}

// The larger relative error of the first and last sequence of `set` (so no
// smaller than the pooled error `run` reports), each against the CPU
// backend on a dense copy of its keys (and per-row scales). NaN if either
// is NaN.
double check_against_cpu(Device &device, const BenchCase &c, const InputSet &set, const Metadata &metadata) {
  const int64_t row_bytes = int64_t{c.spec.heads_kv} * c.kv_head_bytes();
  const bool row_scales = c.spec.quant.fp8() && c.spec.quant.scale_granularity == FMHA_SCALE_PER_ROW;
  const int64_t scale_row_bytes = row_scales ? int64_t{c.spec.heads_kv} * c.scale_element_bytes() : 0;
  const int64_t q_sequence_bytes = c.spec.q_len * c.spec.heads_q * c.spec.head_dim * 2;
  DeviceBuffer k_rows(device, static_cast<size_t>(c.max_kv_len * row_bytes));
  DeviceBuffer v_rows(device, static_cast<size_t>(c.max_kv_len * row_bytes));
  DeviceBuffer k_scale_rows(device, static_cast<size_t>(c.max_kv_len * scale_row_bytes));
  DeviceBuffer v_scale_rows(device, static_cast<size_t>(c.max_kv_len * scale_row_bytes));
  std::vector<int64_t> sequences = {0};
  if (c.spec.batch > 1) sequences.push_back(c.spec.batch - 1);
  double worst = 0.0;
  for (const int64_t b : sequences) {
    const int64_t length = c.kv_lengths[static_cast<size_t>(b)];
    // The sequence's keys as runs of consecutive rows: (first row, rows).
    std::vector<std::pair<int64_t, int64_t>> runs;
    if (c.layout == FMHA_KV_PAGED) {
      const int64_t page = c.spec.page_size;
      for (int64_t p = 0; p * page < length; ++p) {
        const int32_t physical = metadata.table()[static_cast<size_t>(b * c.pages_per_seq + p)];
        runs.emplace_back(physical * page, std::min(page, length - p * page));
      }
    } else {
      runs.emplace_back(b * c.max_kv_len, length);
    }
    const auto gather = [&](const DeviceBuffer &rows_out, const DeviceBuffer &from, int64_t bytes_per_row) {
      int64_t gathered = 0;
      for (const auto &[first, rows] : runs) {
        device.copy_within(byte_offset(rows_out.data(), gathered * bytes_per_row),
                           byte_offset(from.data(), first * bytes_per_row), static_cast<size_t>(rows * bytes_per_row));
        gathered += rows;
      }
    };
    const auto to_host = [&](const void *from, size_t bytes) {
      std::vector<uint8_t> host(bytes);
      device.copy_to_host(host.data(), from, bytes);
      return host;
    };
    gather(k_rows, set.k(), row_bytes);
    gather(v_rows, set.v(), row_bytes);
    std::vector<uint8_t> k = to_host(k_rows.data(), static_cast<size_t>(length * row_bytes));
    std::vector<uint8_t> v = to_host(v_rows.data(), static_cast<size_t>(length * row_bytes));
    std::vector<uint8_t> k_scale, v_scale;
    if (row_scales) {
      gather(k_scale_rows, set.k_scale(), scale_row_bytes);
      gather(v_scale_rows, set.v_scale(), scale_row_bytes);
      k_scale = to_host(k_scale_rows.data(), static_cast<size_t>(length * scale_row_bytes));
      v_scale = to_host(v_scale_rows.data(), static_cast<size_t>(length * scale_row_bytes));
    } else {  // per head or per tensor (or none: empty)
      k_scale = to_host(set.k_scale().data(), set.k_scale().bytes());
      v_scale = to_host(set.v_scale().data(), set.v_scale().bytes());
    }
    std::vector<uint8_t> q =
        to_host(byte_offset(set.q().data(), b * q_sequence_bytes), static_cast<size_t>(q_sequence_bytes));
    std::vector<uint16_t> o(static_cast<size_t>(q_sequence_bytes / 2));
    device.copy_to_host(o.data(), byte_offset(set.o().data(), b * q_sequence_bytes),
                        static_cast<size_t>(q_sequence_bytes));
    const double error = sequence_error(c, length, q, k, v, k_scale, v_scale, o);
    if (std::isnan(error) || error > worst) worst = error;  // NaN, once in, stays
  }
  return worst;
}

// Median wall-clock microseconds of fmha_splitk_create_plan (each plan
// destroyed untimed: it may free device memory, which can synchronise).
double plan_creation_us(const fmha_splitk_problem &problem, const std::string &backend) {
  std::vector<double> times;
  for (int i = 0; i < kPlanRepeats; ++i) {
    fmha_splitk_plan_t plan = nullptr;
    const Clock::time_point start = Clock::now();
    const fmha_status status = fmha_splitk_create_plan(&problem, &plan);
    const Clock::time_point end = Clock::now();
    check_status(status, ("plan on backend " + backend).c_str());
    fmha_splitk_destroy_plan(plan);
    times.push_back(elapsed_us(start, end));
  }
  return median(times);
}

struct BenchSettings {
  int32_t backend = FMHA_BACKEND_AUTO;
  std::string backend_name;
  bool on_gpu = false;
  int64_t replays = kDefaultReplays;
  bool check = true;
  // Runs on a workspace of the bench's (--caller-workspace) instead of the
  // plan's own: split runs then take the combine pass.
  bool caller_workspace = false;
};

void bench_case(Device &device, const BenchSettings &settings, BenchResult &result) {
  const BenchCase &c = result.bench_case;
  const fmha_splitk_problem problem = c.library_problem(settings.backend);
  result.plan_us = plan_creation_us(problem, settings.backend_name);
  fmha_splitk_problem external = problem;
  external.flags |= FMHA_FLAG_EXTERNAL_WORKSPACE;
  result.plan_external_us = plan_creation_us(external, settings.backend_name);
  const Plan plan = create_plan(problem, settings.backend_name);
  const fmha_splitk_plan_info info = plan_info(plan);
  result.split_k = info.split_k;
  result.kernel = info.kernel_name;
  result.config_source = config_source_name(info.config_source);

  const Metadata metadata(device, c);
  const DeviceBuffer workspace(device, info.workspace_size);
  const int64_t set_count = rotated_sets(c.kv_allocated_bytes());
  std::vector<std::unique_ptr<InputSet>> sets;
  for (int64_t i = 0; i < set_count; ++i)
    sets.push_back(
        std::make_unique<InputSet>(device, c, i, metadata, settings.caller_workspace ? &workspace : nullptr));
  const auto run_set = [&](const InputSet &set) {
    check_status(fmha_splitk_run(plan.get(), &set.args()), "fmha_splitk_run");
  };
  const std::function<void()> run_every_set = [&] {
    for (const auto &set : sets) run_set(*set);
  };

  // Warm-up: first touch of memory, lazy loading of kernels, outside the
  // capture.
  for (int pass = 0; pass < kWarmupPasses; ++pass) run_every_set();
  device.synchronize();
  // The host has no graphs: a replay there is the eager calls.
  const std::unique_ptr<DeviceGraph> graph = device.capture(run_every_set);
  const std::function<void()> replay = graph ? std::function<void()>([&] { graph->replay(); }) : run_every_set;
  device.time_ms(replay);  // the first launch of a graph uploads it
  std::vector<double> per_call_us;
  for (int64_t i = 0; i < settings.replays; ++i) {
    per_call_us.push_back(1e3 * device.time_ms(replay) / static_cast<double>(set_count));
  }
  result.time_us = median(per_call_us);

  // The host cost of a call (checks, launches): the clock runs around the
  // calls only. On the host backend a call computes before it returns, so
  // it is timed as often as the replays. The median over the batches
  // between synchronisations: one preempted batch moved the mean of all
  // calls by 10-25 us on the H100 (runs 57-58); the median ignores it.
  const int64_t host_calls = settings.on_gpu ? kHostCalls : settings.replays;
  std::vector<double> batch_us;  // per call, one entry per batch
  for (int64_t done = 0; done < host_calls;) {
    const int64_t batch = std::min(kHostCallsPerSync, host_calls - done);
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < batch; ++i) run_set(*sets[static_cast<size_t>((done + i) % set_count)]);
    batch_us.push_back(elapsed_us(start, Clock::now()) / static_cast<double>(batch));
    device.synchronize();
    done += batch;
  }
  result.host_run_us = median(batch_us);

  if (settings.check) {
    result.rel_err = check_against_cpu(device, c, *sets.front(), metadata);
    result.checked = true;
  }
}

int bench_main(const Options &options) {
  const std::string backend_name = options.choice("backend", "auto", {"auto", "cpu", "cuda"});
  const int64_t requested_replays = options.integer("replays", kDefaultReplays, 1, 1000000);
  const std::string out_path = options.text("out", "");
  if (options.has("out") && out_path.empty()) throw UsageError("--out needs a file name");
  const std::string cache_path = options.text("tuning-cache", "");
  if (options.has("tuning-cache") && cache_path.empty()) throw UsageError("--tuning-cache needs a file name");
  const ProblemSelection selection = select_problems(options);

  // Before any plan: a plan takes a tuned configuration from the cache when
  // it is created, not later.
  const size_t cache_entries = cache_path.empty() ? 0 : load_tuning_cache(cache_path);
  const fmha_splitk_plan_info probe_info = probe_backend(backend_name);
  BenchSettings settings;
  settings.backend = probe_info.backend;
  settings.backend_name = probe_info.backend_name;
  settings.on_gpu = probe_info.backend != FMHA_BACKEND_CPU;
  settings.replays = settings.on_gpu ? std::max(requested_replays, kMinGpuReplays) : requested_replays;
  settings.check = !options.flag("no-check");
  settings.caller_workspace = options.flag("caller-workspace");
  const std::unique_ptr<Device> device = device_for(probe_info);

  BenchReport report;
  report.gpu = probe_info.device_name;
  report.commit = options.text("commit", "");
  report.date = utc_now();
  const Ceilings ceilings = measure_ceilings(*device, settings.on_gpu);
  report.copy_bandwidth_gbps = ceilings.copy_gbps;
  report.read_bandwidth_gbps = ceilings.read_gbps;

  std::printf("device:    %s, device %d (%s)\n", probe_info.backend_name, probe_info.device_id, probe_info.device_name);
  std::printf(
      "ceilings:  copy %.1f GB/s (%zu MiB, bytes read + written), read %.1f GB/s (%zu MiB); "
      "medians of %d\n",
      ceilings.copy_gbps, ceilings.copy_bytes >> 20, ceilings.read_gbps, ceilings.read_bytes >> 20, kCeilingRepeats);
  if (!cache_path.empty()) std::printf("tuning:    cache %s loaded (%zu entries)\n", cache_path.c_str(), cache_entries);
  std::printf("timing:    median of %lld %s per problem, per call; check against the CPU backend %s\n\n",
              static_cast<long long>(settings.replays), settings.on_gpu ? "graph replays" : "eager passes",
              settings.check ? "(limit 2e-02)" : "skipped (--no-check)");
  print_table_header(stdout);
  std::fflush(stdout);

  bool failed = false;
  for (const GridProblem &spec : selection.selected) {
    BenchResult result;
    try {
      result.bench_case = resolve_case(spec, selection.problems);
      bench_case(*device, settings, result);
    } catch (const std::exception &e) {
      result.bench_case.spec = spec;
      result.error = e.what();
    }
    failed = failed || result.failed();
    print_table_row(stdout, result, report.read_bandwidth_gbps);
    std::fflush(stdout);
    report.results.push_back(std::move(result));
    // Written after every problem, so that a run cut short keeps what it did.
    if (!out_path.empty()) write_report_json(out_path, report);
  }
  return failed ? 1 : 0;
}

std::string bench_usage() {
  return "usage: fmha-splitk bench [options]\n"
         "\n"
         "Runs the named benchmark grid (see bench/problems.txt) on one backend, as\n"
         "bench/peers.py runs the peers: per problem, enough rotated input sets that\n"
         "one pass reads eight times the 60 MiB L2, one CUDA graph with a run per set,\n"
         "the median time per call over its replays. Also measured: the bandwidth\n"
         "ceilings (a 2 GiB device-to-device copy, a read of every 16-byte word of a\n"
         "4 GiB buffer; medians of 10), plan creation (median of 200; again with\n"
         "FMHA_FLAG_EXTERNAL_WORKSPACE, without the plan's own allocations), the host\n"
         "cost of a call (500 eager calls: the median over 10 batches of 50), the first and\n"
         "last sequence of one set against the CPU backend (for int4 and fp8 K/V on the\n"
         "same packed data, random valid codes and scales). On the CPU backend: host\n"
         "memory, eager calls, and 64 MiB ceiling buffers (a rough guide only). Exits 1\n"
         "if a problem fails to run or its relative error exceeds 2e-2 (or is NaN).\n"
         "\n"
         "options:\n"
         "  --problems FILE    the grid (default bench/problems.txt, from the current directory)\n"
         "  --only NAME,...    run only these problems of the grid\n"
         "  --backend KIND     auto (default: the GPU when one is found), cpu or cuda\n"
         "  --replays N        timed replays per problem (default 60; at least 50 on a GPU)\n"
         "  --out FILE         also write the results as JSON (for bench/merge_results.py)\n"
         "  --tuning-cache FILE\n"
         "                     load this tuning cache (from `fmha-splitk tune`) before any plan is\n"
         "                     made, so that plans of its problem classes run their tuned\n"
         "                     configuration; the config column (config_source in the JSON) says\n"
         "                     where each plan's came from: heuristic, tuning_cache or autotune\n"
         "  --commit SHA       the commit measured, recorded in the JSON\n"
         "  --no-check         skip the check against the CPU backend\n"
         "  --caller-workspace run on a workspace the bench allocates instead of the plan's own\n"
         "                     (split runs then merge in a second launch, not in the forward kernel)\n";
}

}  // namespace

const Subcommand kBenchSubcommand = {
    /*name=*/"bench",
    /*summary=*/"time the benchmark grid against measured bandwidth ceilings",
    /*usage=*/bench_usage,
    /*options=*/{"problems", "only", "backend", "replays", "out", "commit", "tuning-cache"},
    /*main=*/bench_main,
    /*flags=*/{"no-check", "caller-workspace"},
};

}  // namespace fmha_cli
