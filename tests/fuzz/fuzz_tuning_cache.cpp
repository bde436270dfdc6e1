// Fuzz target: fmha_tuning_cache_load() on hostile bytes. The first input
// byte picks how the rest is used: (0) as the buffer itself; (1) as the
// body of a buffer with a valid header and checksum, so that parsing gets
// past the seal; (2) as edits (offset, xor) of a real cache of this process
// (one entry, tuned at start-up on a tiny CPU plan), resealed, so that
// loads also succeed. Beyond "no crash": a failed load leaves the cache as
// it was, and a successful one saves back to bytes that load again.
#include <fmha_splitk/fmha_splitk.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

void trap_if(bool broken, const char *what) {
  if (!broken) return;
  std::fprintf(stderr, "fuzz_tuning_cache: %s\n", what);
  __builtin_trap();
}

void reseal(std::vector<uint8_t> &bytes) {
  if (bytes.size() < 8) return;
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes.size() - 8; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  for (int i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = static_cast<uint8_t>(hash >> (8 * i));
}

std::vector<uint8_t> save() {
  size_t size = 0;
  trap_if(fmha_tuning_cache_save(nullptr, 0, &size) != FMHA_STATUS_SUCCESS, "size query failed");
  std::vector<uint8_t> bytes(size);
  trap_if(fmha_tuning_cache_save(bytes.data(), bytes.size(), &size) != FMHA_STATUS_SUCCESS, "save failed");
  return bytes;
}

// A cache of one entry from this process: a tiny CPU plan, tuned.
std::vector<uint8_t> real_cache() {
  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  problem.backend = FMHA_BACKEND_CPU;
  problem.batch = 1;
  problem.max_q_seqlen = 1;
  problem.max_kv_seqlen = 512;
  problem.heads_q = 2;
  problem.heads_kv = 1;
  problem.head_dim_qk = 16;
  problem.q_dtype = FMHA_DTYPE_F16;
  fmha_splitk_plan_t plan = nullptr;
  trap_if(fmha_splitk_create_plan(&problem, &plan) != FMHA_STATUS_SUCCESS, "plan of the template failed");
  std::vector<uint16_t> q(2 * 16, 0x3c00), kv(512 * 16, 0x3800), o(2 * 16);
  std::vector<float> lse(2);
  int64_t q_shape[4] = {1, 1, 2, 16}, kv_shape[4] = {1, 512, 1, 16}, lse_shape[3] = {1, 2, 1};
  const DLDevice cpu = {kDLCPU, 0};
  const DLDataType f16 = {kDLFloat, 16, 1}, f32 = {kDLFloat, 32, 1};
  DLTensor tq = {q.data(), cpu, 4, f16, q_shape, nullptr, 0};
  DLTensor tk = {kv.data(), cpu, 4, f16, kv_shape, nullptr, 0};
  DLTensor to = {o.data(), cpu, 4, f16, q_shape, nullptr, 0};
  DLTensor tl = {lse.data(), cpu, 3, f32, lse_shape, nullptr, 0};
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = &tq;
  args.k = &tk;
  args.v = &tk;
  args.o = &to;
  args.lse = &tl;
  fmha_splitk_autotune_options options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  options.warmup_runs = 1;
  options.timed_runs = 1;
  trap_if(fmha_splitk_autotune(plan, &args, &options) != FMHA_STATUS_SUCCESS, "autotune of the template failed");
  fmha_splitk_destroy_plan(plan);
  std::vector<uint8_t> bytes = save();
  fmha_tuning_cache_clear();
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::vector<uint8_t> kTemplate = real_cache();
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  std::vector<uint8_t> bytes;
  if (mode == 0) {
    bytes.assign(data + 1, data + size);
  } else if (mode == 1) {
    // Header of the real cache, then the input as entries, then a seal.
    bytes.assign(kTemplate.begin(), kTemplate.begin() + 24);
    bytes.insert(bytes.end(), data + 1, data + size);
    bytes.resize(bytes.size() + 8);
    reseal(bytes);
  } else {
    bytes = kTemplate;
    for (size_t i = 1; i + 2 < size; i += 3) {
      const size_t offset = (static_cast<size_t>(data[i]) << 8 | data[i + 1]) % bytes.size();
      bytes[offset] ^= data[i + 2];
    }
    reseal(bytes);
  }

  const std::vector<uint8_t> before = save();
  const fmha_status status = fmha_tuning_cache_load(bytes.empty() ? nullptr : bytes.data(), bytes.size());
  if (status != FMHA_STATUS_SUCCESS) {
    trap_if(status != FMHA_STATUS_INVALID_ARGUMENT && status != FMHA_STATUS_NOT_SUPPORTED, "unexpected status");
    trap_if(fmha_last_error_message()[0] == '\0', "failure without a message");
    trap_if(save() != before, "a failed load changed the cache");
  } else {
    const std::vector<uint8_t> after = save();
    fmha_tuning_cache_clear();
    trap_if(fmha_tuning_cache_load(after.data(), after.size()) != FMHA_STATUS_SUCCESS, "saved cache did not reload");
    trap_if(save() != after, "reloaded cache saves differently");
  }
  fmha_tuning_cache_clear();
  return 0;
}
