// Fuzz target: fmha_splitk_create_plan() over every field of the problem,
// struct_size included, then the plan queries. The problem is handed over in
// a buffer of exactly `struct_size` bytes (or of sizeof when larger, with
// the trailing bytes of the input's choosing), so a read past what the
// caller declared is an ASan report. The kv_seqlen_hint array holds exactly
// `batch` entries. Invariants checked beyond "no crash": a failure leaves
// the out-parameter untouched and names itself in the message; a success
// gives a plan whose queries succeed.
#include <fmha_splitk/fmha_splitk.h>

#include <cstring>
#include <vector>

#include "fuzz_tensors.h"

namespace {

int32_t pick_enum(FuzzedDataProvider &input, int32_t valid_count) {
  switch (input.ConsumeIntegralInRange<int>(0, 15)) {
    case 0: return -1;
    case 1: return valid_count;
    case 2: return input.ConsumeIntegral<int32_t>();
    default: return input.ConsumeIntegralInRange<int32_t>(0, valid_count - 1);
  }
}

int64_t pick_count(FuzzedDataProvider &input, int64_t typical_max) {
  switch (input.ConsumeIntegralInRange<int>(0, 15)) {
    case 0: return -1;
    case 1: return 0;
    case 2: return std::numeric_limits<int64_t>::max();
    case 3: return int64_t{1} << input.ConsumeIntegralInRange<int>(20, 62);
    case 4: return std::numeric_limits<int32_t>::max() + int64_t{input.ConsumeIntegralInRange<int>(-1, 1)};
    default: return input.ConsumeIntegralInRange<int64_t>(1, typical_max);
  }
}

int32_t pick_count32(FuzzedDataProvider &input, int32_t typical_max) {
  const int64_t value = pick_count(input, typical_max);
  return value > std::numeric_limits<int32_t>::max() ? std::numeric_limits<int32_t>::max()
                                                      : static_cast<int32_t>(value);
}

void trap_if(bool broken, const char *what) {
  if (!broken) return;
  std::fprintf(stderr, "fuzz_plan: %s\n", what);
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FuzzedDataProvider input(data, size);
  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  problem.backend = input.ConsumeIntegralInRange<int>(0, 20) == 0 ? pick_enum(input, 4) : FMHA_BACKEND_CPU;
  problem.device_id = input.ConsumeIntegralInRange<int>(0, 20) == 0 ? input.ConsumeIntegral<int32_t>() : 0;
  problem.batch = pick_count(input, 8);
  // Planning is linear in the batch (a schedule per sequence): a valid
  // batch near INT32_MAX plans for seconds, which is not what this target
  // looks for, so valid batches stay below 2^24.
  if (problem.batch > (int64_t{1} << 24) && problem.batch <= std::numeric_limits<int32_t>::max())
    problem.batch = int64_t{1} << 24;
  problem.max_q_seqlen = pick_count(input, 16);
  problem.max_kv_seqlen = pick_count(input, 4096);
  problem.groups = input.ConsumeBool() ? 0 : pick_count32(input, 4);
  problem.heads_kv = pick_count32(input, 8);
  problem.heads_q = input.ConsumeBool() ? static_cast<int32_t>(std::min<int64_t>(
                                              int64_t{problem.heads_kv} * input.ConsumeIntegralInRange<int32_t>(1, 8),
                                              std::numeric_limits<int32_t>::max()))
                                        : pick_count32(input, 64);
  problem.head_dim_qk = input.ConsumeBool() ? input.PickValueInArray<int32_t>({16, 24, 64, 128, 256, 512, 576})
                                            : pick_count32(input, 1024);
  problem.head_dim_v = input.ConsumeBool() ? 0 : input.PickValueInArray<int32_t>({16, 64, 128, 512, -8, 7, 1024});
  problem.q_layout = pick_enum(input, 2);
  problem.kv_layout = pick_enum(input, 5);
  problem.page_size = input.ConsumeBool() ? input.PickValueInArray<int32_t>({0, 1, 16, 256, 512, 3, -16})
                                          : input.ConsumeIntegral<int32_t>();
  problem.q_dtype = pick_enum(input, 5);
  problem.kv_dtype = pick_enum(input, 5);
  problem.o_dtype = pick_enum(input, 5);
  problem.kv_quant = pick_enum(input, 3);
  problem.kv_quant_groups = input.PickValueInArray<int32_t>({0, 1, 2, 4, 8, 3, 16, -1});
  problem.fp8_format = pick_enum(input, 2);
  problem.kv_scale_kind = pick_enum(input, 2);
  problem.kv_scale_granularity = pick_enum(input, 3);
  problem.q_scale_granularity = pick_enum(input, 3);
  problem.mask = pick_enum(input, 4);
  problem.window_left = input.ConsumeBool() ? input.ConsumeIntegralInRange<int32_t>(-2, 64) : input.ConsumeIntegral<int32_t>();
  problem.window_right = input.ConsumeBool() ? input.ConsumeIntegralInRange<int32_t>(-2, 64) : input.ConsumeIntegral<int32_t>();
  problem.has_bias = input.ConsumeIntegralInRange<int32_t>(-1, 2);
  problem.has_sinks = input.ConsumeIntegralInRange<int32_t>(-1, 2);
  problem.softmax_scale = input.PickValueInArray<float>(
      {0.0f, 0.125f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 1e30f});
  problem.softcap = input.PickValueInArray<float>(
      {0.0f, 30.0f, -5.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 1e-30f});
  problem.split_k = input.ConsumeBool() ? input.ConsumeIntegralInRange<int32_t>(-1, 64) : pick_count32(input, 4096);
  problem.kv_chunk_size = input.ConsumeBool() ? input.PickValueInArray<int32_t>({0, 1, 64, 256, 3, -256})
                                              : input.ConsumeIntegral<int32_t>();
  problem.flags = input.ConsumeBool() ? input.ConsumeIntegralInRange<uint32_t>(0, 63) : input.ConsumeIntegral<uint32_t>();
  problem.reserved0 = input.ConsumeIntegralInRange<int>(0, 15) == 0 ? input.ConsumeIntegral<uint32_t>() : 0;
  problem.num_pages = pick_count(input, 64);
  problem.max_pages_per_seq = pick_count(input, 64);

  // The hint array holds exactly `batch` entries (none past 4096: the plan
  // may rightly read `batch` of them, and a huge batch gets no hint).
  std::vector<int32_t> hint;
  const bool with_hint = input.ConsumeBool() && problem.batch > 0 && problem.batch <= 4096;
  if (with_hint) {
    hint.resize(static_cast<size_t>(problem.batch));
    for (int32_t &length : hint)
      length = input.ConsumeBool() ? input.ConsumeIntegralInRange<int32_t>(0, 4096) : input.ConsumeIntegral<int32_t>();
    problem.kv_seqlen_hint = hint.data();
  }

  // struct_size: this build's, an older caller's (smaller, possibly cutting
  // a field), or a newer caller's (larger; the tail zero or not). The
  // caller owns struct_size bytes, whatever their number: the library may
  // read them all, so the harness allocates them all.
  size_t struct_size = sizeof(problem);
  switch (input.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: struct_size = input.ConsumeIntegralInRange<size_t>(0, sizeof(problem)); break;
    case 1: struct_size = sizeof(problem) + input.ConsumeIntegralInRange<size_t>(1, 64); break;
    case 2: struct_size = sizeof(problem) + input.ConsumeIntegralInRange<size_t>(1, 1 << 16); break;
    default: break;
  }
  problem.struct_size = struct_size;
  const size_t buffer_size = std::max(struct_size, sizeof(size_t));
  const bool null_problem = input.ConsumeIntegralInRange<int>(0, 63) == 0;

  fmha_splitk_plan_t plan = reinterpret_cast<fmha_splitk_plan_t>(0x5eed);
  fmha_status status;
  if (null_problem) {
    status = fmha_splitk_create_plan(nullptr, &plan);
  } else {
    std::unique_ptr<uint8_t[]> buffer(new uint8_t[buffer_size]);
    std::memset(buffer.get(), 0, buffer_size);
    std::memcpy(buffer.get(), &problem, std::min(buffer_size, sizeof(problem)));
    if (buffer_size > sizeof(problem) && input.ConsumeBool())
      buffer[input.ConsumeIntegralInRange<size_t>(sizeof(problem), buffer_size - 1)] = input.ConsumeIntegralInRange<uint8_t>(1, 255);
    std::memcpy(buffer.get(), &struct_size, sizeof(size_t));
    status = fmha_splitk_create_plan(reinterpret_cast<const fmha_splitk_problem *>(buffer.get()), &plan);
  }
  if (status != FMHA_STATUS_SUCCESS) {
    trap_if(plan != reinterpret_cast<fmha_splitk_plan_t>(0x5eed), "a failed create_plan wrote the plan");
    trap_if(fmha_last_error_message()[0] == '\0', "a failed create_plan left no message");
    trap_if(std::strcmp(fmha_status_string(status), "unknown status") == 0, "create_plan returned an unknown status");
    return 0;
  }
  size_t workspace = 0;
  trap_if(fmha_splitk_plan_workspace_size(plan, &workspace) != FMHA_STATUS_SUCCESS, "workspace_size failed");
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  trap_if(fmha_splitk_get_plan_info(plan, &info) != FMHA_STATUS_SUCCESS, "get_plan_info failed");
  trap_if(info.workspace_size != workspace, "plan info and workspace_size disagree");
  trap_if(std::memchr(info.kernel_name, '\0', sizeof(info.kernel_name)) == nullptr, "kernel_name unterminated");
  // An older caller's plan_info: only its bytes may be written.
  const size_t info_size = input.ConsumeIntegralInRange<size_t>(0, sizeof(info) + 8);
  std::unique_ptr<uint8_t[]> info_buffer(new uint8_t[std::max(info_size, sizeof(size_t))]);
  std::memcpy(info_buffer.get(), &info_size, sizeof(size_t));
  fmha_splitk_get_plan_info(plan, reinterpret_cast<fmha_splitk_plan_info *>(info_buffer.get()));
  fmha_splitk_destroy_plan(plan);
  return 0;
}
