// MLA decode (DESIGN 5.7): Hkv = 1, Dqk = 576, Dv = 512, V the first 512
// dims of the K rows (FMHA_FLAG_V_FROM_K: one buffer, no V tensor), paged
// (page sizes 1, 16, 64) or ragged CSR with and without kv_last_page_len,
// bf16 or fp8 K (per-tensor float32 k_scale [1]) with bf16 or fp8 Q
// (FMHA_FLAG_FP8_QK, per-tensor q_scale [1]), bf16 output, or f16 latents
// and output, Hq 16..128 and
// Mq 1..4. The cases are listed by hand so that every head count meets
// every dtype mode, both layouts and several split modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "features/harness.h"

namespace fmha_test {
namespace {

enum MlaDtype { kBf16, kFp8Kv, kFp8KvQ, kF16 };
const char *const kMlaDtypeNames[] = {"bf16", "fp8kv", "fp8kvq", "f16"};

struct MlaCase {
  int32_t heads_q, queries;
  MlaDtype dtype;
  bool ragged;
  int32_t page_size;
  bool last_page_len;
  bool causal;
  int32_t split_k;  // -1: batch invariant (chunk 32)
};

const MlaCase kMlaCases[] = {
    {16, 1, kBf16, false, 1, true, false, 0},     {64, 2, kFp8Kv, true, 16, true, true, 1},
    {128, 1, kFp8KvQ, false, 64, true, false, 7}, {16, 4, kBf16, true, 64, false, true, -1},
    {64, 1, kFp8KvQ, true, 1, true, false, 0},    {128, 3, kBf16, false, 16, true, true, 2},
    {16, 2, kFp8Kv, false, 64, true, false, 500}, {64, 4, kFp8KvQ, false, 16, true, true, 0},
    {128, 2, kFp8Kv, true, 16, false, false, 1},  {16, 3, kFp8KvQ, true, 16, true, false, 2},
    {64, 1, kBf16, true, 1, false, false, 7},     {128, 4, kFp8Kv, false, 1, true, true, -1},
    {16, 1, kF16, false, 16, true, false, 0},     {64, 2, kF16, true, 64, true, true, 1},
};

std::vector<AttentionCase> mla_cases() {
  const std::vector<int32_t> lengths[] = {{37, 150}, {64, 1, 100}, {129}};
  std::vector<AttentionCase> cases;
  for (size_t t = 0; t < std::size(kMlaCases); ++t) {
    const MlaCase &m = kMlaCases[t];
    AttentionCase c;
    c.dtype = m.dtype == kF16 ? Dtype::f16 : Dtype::bf16;
    c.four_d = true;
    c.heads_q = m.heads_q;
    c.heads_kv = 1;
    c.head_dim = 576;
    c.v_from_k = true;
    c.head_dim_v = 512;
    c.q_len = {m.queries};
    c.kv_len = lengths[t % 3];
    c.kv_layout = m.ragged ? FMHA_KV_RAGGED : FMHA_KV_PAGED;
    c.page_size = m.page_size;
    c.kv_page_dim = t % 2 == 0;
    c.last_page_len = m.last_page_len;
    if (m.causal) c.mask = FMHA_MASK_CAUSAL;
    if (m.split_k >= 0)
      c.split_k = m.split_k;
    else
      c.batch_invariant = true, c.kv_chunk_size = 32;
    if (m.dtype != kBf16) {
      c.kv_quant = FMHA_KV_QUANT_FP8;
      c.fp8_format = t % 4 < 2 ? FMHA_FP8_E4M3FN : FMHA_FP8_E4M3FNUZ;
      c.kv_scale_kind = FMHA_KV_SCALE_F32;
      c.kv_scale_granularity = FMHA_SCALE_PER_TENSOR;
      c.fp8_storage = t % 3 == 0 ? Fp8Storage::dlpack_code : Fp8Storage::bytes;
    }
    if (m.dtype == kFp8KvQ) {
      c.fp8_qk = true;
      c.q_scale_granularity = FMHA_SCALE_PER_TENSOR;
      c.error_bound = kFp8QkErrorBound;
    }
    c.name = std::string("mla_") + std::to_string(t) + "_hq" + std::to_string(m.heads_q) + "_mq" +
             std::to_string(m.queries) + "_" + kMlaDtypeNames[m.dtype] + (m.ragged ? "_ragged" : "_paged") + "_ps" +
             std::to_string(m.page_size) + (m.ragged && !m.last_page_len ? "_wholepages" : "") +
             (m.causal ? "_causal" : "") + "_s" + (m.split_k >= 0 ? std::to_string(m.split_k) : "Invariant");
    cases.push_back(c);
  }
  return cases;
}

// Features of the attention around MLA's shape, on both kernels of the
// CUDA backend (the MLA kernel; the tile kernel for a bias and E4M3FNUZ):
// soft-capping and sinks, local windows, partial outputs, NaN in the rows
// that hold no key, dense and gappy layouts, long sequences (many tiles
// through the ring), more splits than keys.
std::vector<AttentionCase> mla_feature_cases() {
  const auto mla = [](const char *name, Dtype dtype, int32_t heads_q, int32_t queries, bool fp8,
                      std::vector<int32_t> kv_len) {
    AttentionCase c;
    c.name = std::string("mla_") + name;
    c.dtype = dtype;
    c.four_d = true;
    c.heads_q = heads_q;
    c.heads_kv = 1;
    c.head_dim = 576;
    c.v_from_k = true;
    c.head_dim_v = 512;
    c.q_len = {queries};
    c.kv_len = std::move(kv_len);
    c.kv_layout = FMHA_KV_PAGED;
    c.page_size = 64;
    if (fp8) {
      c.kv_quant = FMHA_KV_QUANT_FP8;
      c.fp8_format = FMHA_FP8_E4M3FN;
      c.kv_scale_kind = FMHA_KV_SCALE_F32;
      c.kv_scale_granularity = FMHA_SCALE_PER_TENSOR;
    }
    return c;
  };
  std::vector<AttentionCase> cases;
  AttentionCase c = mla("softcap_sinks_bf16", Dtype::bf16, 16, 1, false, {37, 150});
  c.softcap = 5.0f, c.q_amplitude = 3.0, c.sinks = true;
  cases.push_back(c);
  c = mla("softcap_sinks_fp8_s2", Dtype::bf16, 32, 2, true, {300, 5});
  c.softcap = 5.0f, c.q_amplitude = 3.0, c.sinks = true, c.split_k = 2;
  cases.push_back(c);
  c = mla("local_f16q_fp8_ragged_s3", Dtype::f16, 16, 3, true, {200, 64});
  c.mask = FMHA_MASK_LOCAL, c.window_left = 20, c.window_right = 1, c.split_k = 3;
  c.kv_layout = FMHA_KV_RAGGED, c.page_size = 16;
  cases.push_back(c);
  c = mla("causal_local_bf16_s1", Dtype::bf16, 64, 4, false, {100, 33});
  c.mask = FMHA_MASK_CAUSAL_LOCAL, c.window_left = 40, c.split_k = 1;
  cases.push_back(c);
  c = mla("bias_bf16_s2", Dtype::bf16, 32, 1, false, {90, 7});
  c.bias = true, c.split_k = 2;
  cases.push_back(c);
  c = mla("bias_fp8_s0", Dtype::bf16, 16, 1, true, {130});
  c.bias = true;
  cases.push_back(c);
  c = mla("fnuz_bf16q_s0", Dtype::bf16, 16, 2, true, {77, 1, 260});
  c.fp8_format = FMHA_FP8_E4M3FNUZ;
  cases.push_back(c);
  c = mla("partials_bf16_s4", Dtype::bf16, 16, 2, false, {150, 40});
  c.write_partials = true, c.split_k = 4, c.mask = FMHA_MASK_CAUSAL;
  cases.push_back(c);
  c = mla("partials_fp8_s3", Dtype::bf16, 16, 1, true, {150, 40});
  c.write_partials = true, c.split_k = 3;
  cases.push_back(c);
  c = mla("nan_padding_fp8_ps1_s300", Dtype::bf16, 16, 1, true, {64, 1, 100});
  c.nan_padding = true, c.page_size = 1, c.split_k = 300;
  cases.push_back(c);
  c = mla("nan_padding_bf16_ragged_s0", Dtype::bf16, 16, 1, false, {64, 1, 100});
  c.nan_padding = true, c.kv_layout = FMHA_KV_RAGGED, c.page_size = 16;
  cases.push_back(c);
  c = mla("long_bf16_s0", Dtype::bf16, 16, 1, false, {1000, 2049, 3});
  cases.push_back(c);
  c = mla("long_fp8_s1", Dtype::bf16, 16, 1, true, {1500, 257});
  c.split_k = 1;
  cases.push_back(c);
  c = mla("long_f16_fp8_causal_s0", Dtype::f16, 16, 4, true, {1111});
  c.mask = FMHA_MASK_CAUSAL;
  cases.push_back(c);
  // fp8 compute (the MLA kernel's fp8 tensor-core paths on sm_89+).
  c = mla("fp8qk_pertensor_long_s0", Dtype::bf16, 16, 1, true, {1300, 40});
  c.fp8_qk = true, c.q_scale_granularity = FMHA_SCALE_PER_TENSOR, c.error_bound = kFp8QkErrorBound;
  cases.push_back(c);
  c = mla("fp8qk_perhead_causal_s2", Dtype::bf16, 64, 2, true, {200, 77});
  c.fp8_qk = true, c.q_scale_granularity = FMHA_SCALE_PER_HEAD, c.error_bound = kFp8QkErrorBound;
  c.mask = FMHA_MASK_CAUSAL, c.split_k = 2;
  cases.push_back(c);
  c = mla("fp8qk_perrow_ragged_s1", Dtype::bf16, 16, 4, true, {150});
  c.fp8_qk = true, c.q_scale_granularity = FMHA_SCALE_PER_ROW, c.error_bound = kFp8QkErrorBound;
  c.kv_layout = FMHA_KV_RAGGED, c.page_size = 16, c.split_k = 1;
  cases.push_back(c);
  c = mla("fp8pv_bf16q_long_s0", Dtype::bf16, 16, 1, true, {2000, 3});
  c.fp8_pv = true, c.error_bound = kFp8PvErrorBound;
  cases.push_back(c);
  c = mla("fp8qk_fp8pv_s0", Dtype::bf16, 16, 1, true, {1024, 1024, 17});
  c.fp8_qk = true, c.fp8_pv = true, c.q_scale_granularity = FMHA_SCALE_PER_TENSOR;
  c.error_bound = kFp8PvErrorBound;
  cases.push_back(c);
  c = mla("fp8qk_fp8pv_local_sinks_s300", Dtype::bf16, 32, 2, true, {90, 260});
  c.fp8_qk = true, c.fp8_pv = true, c.q_scale_granularity = FMHA_SCALE_PER_HEAD;
  c.error_bound = kFp8PvErrorBound, c.mask = FMHA_MASK_LOCAL, c.window_left = 50, c.sinks = true, c.split_k = 300;
  cases.push_back(c);
  // Sequences without keys (O = 0, LSE = -inf) beside others.
  c = mla("empty_sequences_bf16_s0", Dtype::bf16, 16, 2, false, {0, 70, 0});
  cases.push_back(c);
  c = mla("empty_sequences_fp8_s3", Dtype::bf16, 16, 1, true, {0, 33});
  c.split_k = 3, c.sinks = true;
  cases.push_back(c);
  c = mla("dense_bf16_s1", Dtype::bf16, 16, 1, false, {96, 96});
  c.kv_layout = FMHA_KV_DENSE, c.split_k = 1;
  cases.push_back(c);
  c = mla("gappy_fp8_s2", Dtype::bf16, 16, 2, true, {50, 120});
  c.kv_layout = FMHA_KV_GAPPY, c.split_k = 2;
  cases.push_back(c);
  c = mla("padded_f16_s0", Dtype::f16, 128, 1, false, {70, 300});
  c.kv_layout = FMHA_KV_PADDED;
  cases.push_back(c);
  // fp8 latent rows only 4-byte aligned (580-byte pitch): the CUDA backend
  // leaves the MLA kernel (16-byte copies) for the tile kernel at run time.
  c = mla("rows4_fp8kv_s2", Dtype::bf16, 16, 1, true, {200, 65});
  c.fp8_rows_4byte_aligned = true, c.split_k = 2, c.sinks = true;
  cases.push_back(c);
  c = mla("rows4_fp8qk_fp8pv_dlpack_s0", Dtype::bf16, 32, 2, true, {300, 1});
  c.fp8_rows_4byte_aligned = true, c.fp8_storage = Fp8Storage::dlpack_code;
  c.fp8_qk = true, c.fp8_pv = true, c.q_scale_granularity = FMHA_SCALE_PER_TENSOR;
  c.error_bound = kFp8PvErrorBound, c.mask = FMHA_MASK_CAUSAL;
  cases.push_back(c);
  return cases;
}

class Mla : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Mla, MatchesOracle) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  check_attention_case_if_supported(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Features, Mla, ::testing::ValuesIn(mla_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(MlaFeatures, Mla, ::testing::ValuesIn(mla_feature_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

}  // namespace
}  // namespace fmha_test
