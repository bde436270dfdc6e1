// Empty and degenerate inputs (DESIGN 5.10, 5.4): sequences without keys,
// Mkv = 0, rows that every key is masked from, batch 0, zero queries, more
// splits than keys, and NaN in K/V rows that belong to no sequence. Rows
// that see nothing give O = 0 and LSE = -inf (LSE = sink with sinks), never
// NaN; the oracle comparison checks exactly that.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "features/harness.h"

namespace fmha_test {
namespace {

struct DegenerateBase {
  const char *name;
  std::function<void(AttentionCase &)> apply;
};

std::vector<AttentionCase> degenerate_cases() {
  const std::vector<DegenerateBase> bases = {
      {"zero_length_padded",
       [](AttentionCase &c) {
         c.kv_layout = FMHA_KV_PADDED, c.kv_len = {0, 37, 0};
       }},
      {"zero_length_gappy",
       [](AttentionCase &c) {
         c.kv_layout = FMHA_KV_GAPPY, c.kv_len = {0, 5, 0};
       }},
      {"zero_length_paged",
       [](AttentionCase &c) {
         c.kv_layout = FMHA_KV_PAGED, c.kv_page_dim = true, c.kv_len = {0, 20, 0};
       }},
      {"zero_length_ragged",
       [](AttentionCase &c) {
         c.kv_layout = FMHA_KV_RAGGED, c.kv_len = {0, 33, 0};
       }},
      {"all_lengths_zero_paged",
       [](AttentionCase &c) {
         c.kv_layout = FMHA_KV_PAGED, c.kv_len = {0, 0};
       }},
      {"dense_no_keys",
       [](AttentionCase &c) {
         c.kv_layout = FMHA_KV_DENSE, c.kv_len = {0, 0}, c.q_len = {3};
       }},
      {"dense_no_keys_sinks",
       [](AttentionCase &c) {
         c.kv_layout = FMHA_KV_DENSE, c.kv_len = {0, 0}, c.q_len = {2}, c.sinks = true;
       }},
      {"zero_length_sinks",
       [](AttentionCase &c) {
         c.kv_layout = FMHA_KV_PADDED, c.kv_len = {0, 9}, c.sinks = true;
       }},
      {"window_sees_no_key",
       [](AttentionCase &c) {
         c.mask = FMHA_MASK_LOCAL, c.kv_len = {3, 3}, c.q_len = {6}, c.kv_layout = FMHA_KV_PADDED;
       }},
      {"window_sees_no_key_sinks",
       [](AttentionCase &c) {
         c.mask = FMHA_MASK_CAUSAL_LOCAL, c.kv_len = {3, 12}, c.q_len = {6}, c.kv_layout = FMHA_KV_PADDED,
         c.sinks = true;
       }},
      {"causal_more_queries_than_keys",
       [](AttentionCase &c) {
         c.mask = FMHA_MASK_CAUSAL, c.kv_len = {5, 0, 10}, c.q_len = {16}, c.kv_layout = FMHA_KV_PADDED;
       }},
      {"bias_minus_inf_row",
       [](AttentionCase &c) {
         c.bias = true, c.bias_masks_first_row = true, c.q_len = {3}, c.kv_len = {40, 7};
       }},
      {"bias_minus_inf_row_sinks",
       [](AttentionCase &c) {
         c.bias = true, c.bias_masks_first_row = true, c.sinks = true, c.q_len = {2}, c.kv_len = {40, 7},
         c.kv_layout = FMHA_KV_PAGED;
       }},
      {"batch_0_dense", [](AttentionCase &c) { c.kv_layout = FMHA_KV_DENSE, c.kv_len = {}; }},
      {"batch_0_paged", [](AttentionCase &c) { c.kv_layout = FMHA_KV_PAGED, c.kv_len = {}; }},
      {"batch_0_varlen", [](AttentionCase &c) { c.q_layout = FMHA_Q_VARLEN, c.q_len = {}, c.kv_len = {}; }},
      {"zero_queries",
       [](AttentionCase &c) {
         c.q_len = {0}, c.kv_len = {30, 12};
       }},
      {"zero_queries_varlen",
       [](AttentionCase &c) {
         c.q_layout = FMHA_Q_VARLEN, c.q_len = {0, 0}, c.kv_len = {30, 12};
       }},
      {"some_sequences_without_queries",
       [](AttentionCase &c) {
         c.q_layout = FMHA_Q_VARLEN, c.q_len = {0, 3, 0}, c.kv_len = {30, 12, 9}, c.mask = FMHA_MASK_CAUSAL;
       }},
      {"splits_beyond_keys",
       [](AttentionCase &c) {
         c.kv_len = {3, 1}, c.split_k = 100;
       }},
      // One sequence long enough that BALANCED splits it: the GPU backend
      // then finds its pieces by arithmetic (no scheduling pass).
      {"one_sequence_split", [](AttentionCase &c) { c.kv_len = {2000}; }},
      {"one_paged_sequence_causal",
       [](AttentionCase &c) {
         c.kv_layout = FMHA_KV_PAGED, c.kv_len = {1537}, c.q_len = {3}, c.mask = FMHA_MASK_CAUSAL, c.sinks = true;
       }},
      {"nan_padding_padded",
       [](AttentionCase &c) {
         c.nan_padding = true, c.kv_len = {5, 37};
       }},
      {"nan_padding_paged",
       [](AttentionCase &c) {
         c.nan_padding = true, c.kv_layout = FMHA_KV_PAGED, c.paged_seqstart = true, c.kv_len = {5, 20, 40};
       }},
      {"nan_padding_ragged",
       [](AttentionCase &c) {
         c.nan_padding = true, c.kv_layout = FMHA_KV_RAGGED, c.kv_len = {7, 33};
       }},
      {"nan_padding_gappy",
       [](AttentionCase &c) {
         c.nan_padding = true, c.kv_layout = FMHA_KV_GAPPY, c.kv_len = {7, 33}, c.mask = FMHA_MASK_CAUSAL,
         c.q_len = {4};
       }},
  };
  struct Split {
    const char *name;
    int32_t split_k;
    bool batch_invariant;
  };
  const Split splits[] = {{"s1", 1, false}, {"s3", 3, false}, {"sAuto", 0, false}, {"sInvariant32", 0, true}};
  std::vector<AttentionCase> cases;
  for (size_t i = 0; i < bases.size(); ++i)
    for (size_t s = 0; s < 4; ++s) {
      AttentionCase c;
      c.kv_layout = FMHA_KV_PADDED;
      c.dtype = (i + s) % 2 == 0 ? Dtype::bf16 : Dtype::f16;
      c.head_dim = (i + s) % 3 == 0 ? 128 : 64;
      c.groups = s % 2 == 0 ? 2 : 1;
      c.heads_q = 4;
      c.heads_kv = 2;
      c.window_left = 0;
      c.window_right = 0;
      c.split_k = splits[s].split_k;
      c.batch_invariant = splits[s].batch_invariant;
      c.kv_chunk_size = splits[s].batch_invariant ? 32 : 0;
      bases[i].apply(c);
      if (c.split_k > 3) {  // the case forces its own split count
        if (s != 0) continue;
      } else {
        c.split_k = splits[s].split_k;
      }
      if (c.q_layout == FMHA_Q_VARLEN && c.q_len.size() != c.kv_len.size()) c.q_len.assign(c.kv_len.size(), 0);
      c.name = std::string(bases[i].name) + "_" + (c.split_k > 3 ? "forced" : splits[s].name);
      cases.push_back(c);
    }
  return cases;
}

class Degenerate : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Degenerate, EmptyRowsAreZeroNeverNaN) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  check_attention_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Features, Degenerate, ::testing::ValuesIn(degenerate_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

}  // namespace
}  // namespace fmha_test
