// `fmha-splitk run`: one dense decode problem from a preset, on a chosen
// backend: random inputs, timed runs, achieved bandwidth, and a check of
// sampled sequences against the CPU backend.
#include <fmha_splitk/fmha_splitk.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "decode_problem.h"
#include "device.h"
#include "plan.h"
#include "presets.h"
#include "status.h"
#include "subcommand.h"

namespace fmha_cli {
namespace {

// Defaults: a second or two on the CPU backend; on a GPU, K and V well
// beyond the L2 cache, so the time is that of streaming them from memory.
constexpr int64_t kCpuBatch = 4;
constexpr int64_t kCpuKvLen = 2048;
constexpr int64_t kCpuIters = 10;
constexpr int64_t kGpuBatch = 16;
constexpr int64_t kGpuKvLen = 8192;
constexpr int64_t kGpuIters = 50;
constexpr uint64_t kSeed = 2026;

std::string format_bytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 3) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit ? "%.2f %s" : "%.0f %s", bytes, units[unit]);
  return text;
}

int run_main(const Options &options) {
  if (!options.has("preset")) throw UsageError("--preset is required");
  const std::string preset_name = options.text("preset", "");
  const Preset *preset = find_preset(preset_name);
  if (!preset) throw UsageError("unknown preset '" + preset_name + "'");
  const std::string backend_name = options.choice("backend", "auto", {"auto", "cpu", "cuda", "hip"});
  const std::string preset_dtype = preset->dtype == FMHA_DTYPE_BF16 ? "bf16" : "f16";
  const std::string dtype_name = options.choice("dtype", preset_dtype, {"bf16", "f16"});
  const auto split_k = static_cast<int32_t>(options.integer("split-k", 0, 0, 1 << 20));

  DecodeShape shape;
  shape.q_len = preset->q_len;
  shape.heads_q = preset->heads_q;
  shape.heads_kv = preset->heads_kv;
  shape.head_dim = preset->head_dim;
  shape.dtype = dtype_name == "bf16" ? FMHA_DTYPE_BF16 : FMHA_DTYPE_F16;

  // The backend that serves the request decides the default sizes. Planning
  // launches nothing, so a plan for one key cheaply tells which backend it is.
  DecodeShape probe = shape;
  probe.batch = 1;
  probe.kv_len = 1;
  const fmha_splitk_plan_info probe_info =
      plan_info(create_plan(make_problem(probe, backend_kind(backend_name), 0), backend_name));
  const bool on_cpu = probe_info.backend == FMHA_BACKEND_CPU;
  shape.batch = options.integer("batch", on_cpu ? kCpuBatch : kGpuBatch, 1, int64_t{1} << 20);
  shape.kv_len = options.integer("kv-len", on_cpu ? kCpuKvLen : kGpuKvLen, 1, int64_t{1} << 30);
  const int64_t iters = options.integer("iters", on_cpu ? kCpuIters : kGpuIters, 1, 1000000);

  const Plan plan = create_plan(make_problem(shape, probe_info.backend, split_k), probe_info.backend_name);
  const fmha_splitk_plan_info info = plan_info(plan);
  const std::unique_ptr<Device> device = device_for(info);

  const HostInputs inputs = random_inputs(shape, kSeed);
  const size_t q_bytes = inputs.q.size() * sizeof(uint16_t);
  const size_t kv_bytes = inputs.k.size() * sizeof(uint16_t);
  DeviceBuffer q_memory(*device, q_bytes);
  DeviceBuffer k_memory(*device, kv_bytes);
  DeviceBuffer v_memory(*device, kv_bytes);
  DeviceBuffer o_memory(*device, q_bytes);
  DeviceBuffer workspace(*device, info.workspace_size);
  device->copy_to_device(q_memory.data(), inputs.q.data(), q_bytes);
  device->copy_to_device(k_memory.data(), inputs.k.data(), kv_bytes);
  device->copy_to_device(v_memory.data(), inputs.v.data(), kv_bytes);
  // All-ones bytes are NaN in fp16 and bf16: a row no run writes fails the check.
  device->fill_bytes(o_memory.data(), 0xff, q_bytes);

  const DLDevice where = device->dl_device();
  const DenseTensor q(q_memory.data(), where, shape.dtype, {shape.batch, shape.q_len, shape.heads_q, shape.head_dim});
  const DenseTensor k(k_memory.data(), where, shape.dtype, {shape.batch, shape.kv_len, shape.heads_kv, shape.head_dim});
  const DenseTensor v(v_memory.data(), where, shape.dtype, {shape.batch, shape.kv_len, shape.heads_kv, shape.head_dim});
  const DenseTensor o(o_memory.data(), where, shape.dtype, {shape.batch, shape.q_len, shape.heads_q, shape.head_dim});
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = q.dl();
  args.k = k.dl();
  args.v = v.dl();
  args.o = o.dl();
  args.workspace = workspace.data();
  args.workspace_size = workspace.bytes();
  args.stream = device->stream();
  const auto run_once = [&] { check_status(fmha_splitk_run(plan.get(), &args), "fmha_splitk_run"); };

  device->time_ms(run_once);  // warm-up: first touch of memory, lazy loading of GPU kernels
  std::vector<double> times_ms;
  for (int64_t i = 0; i < iters; ++i) times_ms.push_back(device->time_ms(run_once));
  const double time_ms = median(times_ms);

  std::vector<uint16_t> output(inputs.q.size());
  device->copy_to_host(output.data(), o_memory.data(), q_bytes);
  std::vector<int64_t> checked = {0};
  if (shape.batch > 1) checked.push_back(shape.batch - 1);
  const double error = relative_error_against_cpu(shape, inputs, output, checked);
  const double limit = error_limit(shape.dtype);
  const bool passed = error <= limit;  // false for NaN

  std::printf("backend:   %s, device %d (%s)\n", info.backend_name, info.device_id, info.device_name);
  std::printf("problem:   %s: batch %lld, q_len %lld, heads_q %d, heads_kv %d, head_dim %d, kv_len %lld, %s\n",
              preset->name, static_cast<long long>(shape.batch), static_cast<long long>(shape.q_len), shape.heads_q,
              shape.heads_kv, shape.head_dim, static_cast<long long>(shape.kv_len), dtype_name.c_str());
  std::printf("plan:      split_k %d, kv_chunk_size %d, workers %d, kernel %s, workspace %s\n", info.split_k,
              info.kv_chunk_size, info.num_workers, info.kernel_name, format_bytes(info.workspace_size).c_str());
  std::printf("time:      %.4f ms (median of %lld runs)\n", time_ms, static_cast<long long>(iters));
  std::printf("bandwidth: %.1f GB/s (%s of K, V, Q and O)\n", shape.bytes_moved() / (time_ms * 1e6),
              format_bytes(shape.bytes_moved()).c_str());
  std::printf("check:     sequence%s", checked.size() > 1 ? "s" : "");
  for (size_t i = 0; i < checked.size(); ++i) {
    std::printf("%s%lld", i ? " and " : " ", static_cast<long long>(checked[i]));
  }
  std::printf(" against the CPU backend: relative error %.2e (limit %.0e): %s\n", error, limit,
              passed ? "ok" : "FAILED");
  return passed ? 0 : 1;
}

std::string run_usage() {
  std::string text =
      "usage: fmha-splitk run --preset NAME [options]\n"
      "\n"
      "Runs one dense decode attention problem (Q [B, Mq, Hq, D], K and V [B, L, Hkv, D])\n"
      "with random inputs on a backend, prints the plan, the median time, the achieved\n"
      "bandwidth (bytes of K, V, Q and O / time) and the relative error of the first and\n"
      "last sequence against the CPU backend. Exits 1 when that check fails.\n"
      "\n"
      "options:\n"
      "  --preset NAME      the problem's heads, head dim and dtype (below)\n"
      "  --backend KIND     auto (default: the GPU when one is found), cpu, cuda or hip\n"
      "  --batch B          sequences (default 4 on the CPU, 16 on a GPU)\n"
      "  --kv-len L         keys per sequence (default 2048 on the CPU, 8192 on a GPU)\n"
      "  --split-k S        KV chunks per sequence; 0 (default) lets the plan choose\n"
      "  --iters N          timed runs after one warm-up (default 10 on the CPU, 50 on a GPU)\n"
      "  --dtype bf16|f16   dtype of Q, K, V and O (default: the preset's)\n"
      "\n"
      "presets:\n";
  for (const Preset &preset : presets()) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-18s Hq %d, Hkv %d, D %d, Mq %lld: %s\n", preset.name, preset.heads_q,
                  preset.heads_kv, preset.head_dim, static_cast<long long>(preset.q_len), preset.description);
    text += line;
  }
  return text;
}

}  // namespace

const Subcommand kRunSubcommand = {
    /*name=*/"run",
    /*summary=*/"run, time and check one decode problem on a backend",
    /*usage=*/run_usage,
    /*options=*/{"preset", "backend", "batch", "kv-len", "split-k", "iters", "dtype"},
    /*main=*/run_main,
    /*flags=*/{},
};

}  // namespace fmha_cli
