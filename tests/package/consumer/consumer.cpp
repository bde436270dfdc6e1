// A program built against an installed fmha_splitk (through CMake's
// find_package or pkg-config): header and library versions agree, the
// backends are listed, and one decode attention runs on the CPU backend
// with a known answer. Every key is the same, so the softmax is uniform and
// O is the mean of the V rows, LSE = score + log(keys). Exit status 0 when
// all holds.
#include <fmha_splitk/fmha_splitk.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kBatch = 2, kHeadsQ = 4, kHeadDim = 16, kKeys = 40;

// bf16 of a float whose value fits in 8 significant bits: its top half.
uint16_t bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

bool ok(fmha_status status, const char *call) {
  if (status == FMHA_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "consumer: %s: %s: %s\n", call, fmha_status_string(status), fmha_last_error_message());
  return false;
}

}  // namespace

int main() {
  if (fmha_version_code() != FMHA_SPLITK_VERSION_CODE) {
    std::fprintf(stderr, "consumer: header %d, library %d\n", FMHA_SPLITK_VERSION_CODE, fmha_version_code());
    return 1;
  }
  std::printf("consumer: fmha_splitk %s\n", fmha_version());

  size_t count = 0;
  if (!ok(fmha_get_backends(nullptr, 0, &count), "fmha_get_backends")) return 1;
  std::vector<fmha_backend_info> backends(count, FMHA_BACKEND_INFO_INIT);
  if (!ok(fmha_get_backends(backends.data(), count, &count), "fmha_get_backends")) return 1;
  for (const fmha_backend_info &backend : backends)
    std::printf("consumer: backend %s%s%s: %s\n", backend.name, backend.path[0] ? " at " : "", backend.path,
                backend.reason);

  // Q [B, 1, Hq, D]; K and V [B, L, 1, D] (MQA); O [B, 1, Hq, D] fp32.
  std::vector<uint16_t> q(kBatch * kHeadsQ * kHeadDim), k(kBatch * kKeys * kHeadDim), v(k.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = bf16(static_cast<float>(i % 7) / 8.0f);
  for (size_t i = 0; i < k.size(); ++i) k[i] = bf16(static_cast<float>(i % kHeadDim) / 16.0f);
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16(static_cast<float>(i % 13) - 6.0f);
  std::vector<float> o(q.size()), lse(kBatch * kHeadsQ);

  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  problem.backend = FMHA_BACKEND_CPU;
  problem.batch = kBatch;
  problem.max_q_seqlen = 1;
  problem.max_kv_seqlen = kKeys;
  problem.heads_q = kHeadsQ;
  problem.heads_kv = 1;
  problem.head_dim_qk = kHeadDim;
  problem.q_dtype = FMHA_DTYPE_BF16;
  problem.o_dtype = FMHA_DTYPE_F32;
  problem.split_k = 3;  // three chunks and their merge
  fmha_splitk_plan_t plan = nullptr;
  if (!ok(fmha_splitk_create_plan(&problem, &plan), "fmha_splitk_create_plan")) return 1;

  int64_t q_shape[4] = {kBatch, 1, kHeadsQ, kHeadDim}, kv_shape[4] = {kBatch, kKeys, 1, kHeadDim};
  int64_t lse_shape[3] = {kBatch, kHeadsQ, 1};
  const DLDevice cpu = {kDLCPU, 0};
  const DLDataType bf16_type = {kDLBfloat, 16, 1}, f32 = {kDLFloat, 32, 1};
  DLTensor q_tensor = {q.data(), cpu, 4, bf16_type, q_shape, nullptr, 0};
  DLTensor k_tensor = {k.data(), cpu, 4, bf16_type, kv_shape, nullptr, 0};
  DLTensor v_tensor = {v.data(), cpu, 4, bf16_type, kv_shape, nullptr, 0};
  DLTensor o_tensor = {o.data(), cpu, 4, f32, q_shape, nullptr, 0};
  DLTensor lse_tensor = {lse.data(), cpu, 3, f32, lse_shape, nullptr, 0};
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = &q_tensor;
  args.k = &k_tensor;
  args.v = &v_tensor;
  args.o = &o_tensor;
  args.lse = &lse_tensor;
  const bool ran = ok(fmha_splitk_run(plan, &args), "fmha_splitk_run");
  fmha_splitk_destroy_plan(plan);
  if (!ran) return 1;

  double worst = 0.0;
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h = 0; h < kHeadsQ; ++h) {
      double score = 0.0;  // the same for every key of sequence b
      for (int64_t d = 0; d < kHeadDim; ++d) {
        const size_t qi = static_cast<size_t>((b * kHeadsQ + h) * kHeadDim + d);
        score += (static_cast<double>(qi % 7) / 8.0) * (static_cast<double>(d) / 16.0);
      }
      const double expected_lse =
          score / std::sqrt(static_cast<double>(kHeadDim)) + std::log(static_cast<double>(kKeys));
      worst = std::fmax(worst, std::fabs(lse[b * kHeadsQ + h] - expected_lse));
      for (int64_t d = 0; d < kHeadDim; ++d) {
        double mean = 0.0;
        for (int64_t j = 0; j < kKeys; ++j) mean += static_cast<double>(((b * kKeys + j) * kHeadDim + d) % 13) - 6.0;
        mean /= kKeys;
        worst = std::fmax(worst, std::fabs(o[(b * kHeadsQ + h) * kHeadDim + d] - mean));
      }
    }
  }
  std::printf("consumer: largest difference from the known answer %.2e\n", worst);
  if (!(worst < 1e-4)) {
    std::fprintf(stderr, "consumer: wrong result\n");
    return 1;
  }
  return 0;
}
