// FMHA_FLAG_WRITE_PARTIALS (DESIGN 5.8, context parallelism): with a forced
// split_k the run writes one fp32 partial (O, LSE) per uniform chunk; each
// must equal the oracle restricted to the chunk's keys (empty chunks O = 0,
// LSE = -inf), and merging them with fmha_merge must give the oracle's and
// the direct run's result.
#include <gtest/gtest.h>

#include <vector>

#include "features/harness.h"

namespace fmha_test {
namespace {

std::vector<AttentionCase> partial_cases() {
  struct Row {
    const char *name;
    int32_t kv_layout, split_k, mask, head_dim;
    std::vector<int32_t> kv_len;
    int32_t q_len;
    Dtype dtype;
    bool sinks, bias, four_d;
  };
  const std::vector<Row> rows = {
      {"dense_s2", FMHA_KV_DENSE, 2, FMHA_MASK_NONE, 64, {100, 100}, 1, Dtype::bf16, false, false, false},
      {"padded_s7_causal", FMHA_KV_PADDED, 7, FMHA_MASK_CAUSAL, 128, {37, 250, 1}, 4, Dtype::f16, false, false, true},
      {"paged_s64_sinks", FMHA_KV_PAGED, 64, FMHA_MASK_NONE, 80, {300, 17}, 2, Dtype::bf16, true, false, false},
      {"gappy_beyond_keys", FMHA_KV_GAPPY, 40, FMHA_MASK_NONE, 16, {9, 3, 30}, 1, Dtype::f16, false, true, false},
      {"ragged_s3_local", FMHA_KV_RAGGED, 3, FMHA_MASK_LOCAL, 256, {64, 129}, 3, Dtype::bf16, false, false, true},
      {"paged_s5_bias_causal", FMHA_KV_PAGED, 5, FMHA_MASK_CAUSAL, 512, {200, 33}, 16, Dtype::f16, true, true, false},
      {"padded_s2_zero_length", FMHA_KV_PADDED, 2, FMHA_MASK_NONE, 64, {0, 50}, 1, Dtype::bf16, false, false, false},
  };
  std::vector<AttentionCase> cases;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row &r = rows[i];
    AttentionCase c;
    c.name = r.name;
    c.write_partials = true;
    c.kv_layout = r.kv_layout;
    c.split_k = r.split_k;
    c.mask = r.mask;
    c.window_left = 40;
    c.window_right = 3;
    c.head_dim = r.head_dim;
    c.kv_len = r.kv_len;
    c.q_len = {r.q_len};
    c.dtype = r.dtype;
    c.o_dtype = i % 2 == 0 ? FMHA_DTYPE_F32 : FMHA_DTYPE_DEFAULT;
    c.sinks = r.sinks;
    c.bias = r.bias;
    c.four_d = r.four_d;
    c.groups = r.four_d ? 1 : 2;
    c.heads_q = 4;
    c.heads_kv = i % 2 == 0 ? 2 : 1;
    c.kv_page_dim = i % 3 == 0;
    cases.push_back(c);
  }
  return cases;
}

class WritePartials : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(WritePartials, ChunksAndTheirMergeMatchOracle) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  check_attention_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Features, WritePartials, ::testing::ValuesIn(partial_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

}  // namespace
}  // namespace fmha_test
