// The forward feature matrix (DESIGN 5.1-5.5) against the float64 oracle.
//
// Not the full cross product: a covering design. Every feature gets eight
// cases t = 0..7, and the shared axes are rotated through them with a
// per-feature offset, so that each feature meets both input dtypes, all six
// head dims and all eight split modes, while output dtype, LSE on/off, 4-D /
// 5-D, group and head counts, query counts, lengths and a NULL workspace
// vary across the cases too.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "features/harness.h"

namespace fmha_test {
namespace {

constexpr int kCasesPerFeature = 8;
const Dtype kDtypes[] = {Dtype::f16, Dtype::bf16};
const int32_t kHeadDims[] = {16, 64, 80, 128, 256, 512};
const int32_t kOutputDtypes[] = {FMHA_DTYPE_DEFAULT, FMHA_DTYPE_F32, FMHA_DTYPE_BF16, FMHA_DTYPE_F16};
enum SplitMode {
  kSplit1,
  kSplit2,
  kSplit7,
  kSplit64,
  kSplitBeyondKeys,
  kSplitAuto,
  kSplitAutoHinted,
  kBatchInvariant32
};
const char *const kSplitNames[] = {"s1", "s2", "s7", "s64", "sBeyondKeys", "sAuto", "sAutoHint", "sInvariant32"};
// (Hq, Hkv) pairs: MHA, GQA and MQA shapes.
const std::pair<int32_t, int32_t> kHeads[] = {{1, 1}, {4, 1}, {4, 2}, {8, 8}, {6, 2}, {2, 2}, {8, 1}, {4, 4}};
const std::vector<int32_t> kLengths[] = {{1, 50},          {17, 300}, {64, 5, 129},   {256},
                                         {33, 200, 7, 90}, {300, 1},  {100, 100, 31}, {255, 2, 77}};
const int32_t kQueries[] = {1, 3, 1, 4, 16, 1, 2, 1};
const int32_t kLayouts[] = {FMHA_KV_DENSE, FMHA_KV_PADDED, FMHA_KV_PAGED, FMHA_KV_GAPPY, FMHA_KV_RAGGED};

void set_equal_lengths_if_dense(AttentionCase &c) {
  if (c.kv_layout == FMHA_KV_DENSE && !c.kv_len.empty())
    c.kv_len.assign(c.kv_len.size(), *std::max_element(c.kv_len.begin(), c.kv_len.end()));
}

// The shared axes of case t of feature f.
AttentionCase axes(int f, int t) {
  AttentionCase c;
  c.dtype = kDtypes[(t + f) % 2];
  c.head_dim = kHeadDims[(t + f) % 6];
  c.o_dtype = kOutputDtypes[(t + f / 2) % 4];
  c.lse = (t + f) % 3 != 2;
  c.null_workspace = (t + f) % 5 == 4;
  const auto [hq, hkv] = kHeads[(t + 3 * f) % 8];
  c.heads_q = hq;
  c.heads_kv = hkv;
  switch ((t + 2 * f) % 4) {
    case 0:
      c.four_d = true;
      break;
    case 1:
      c.groups = 2;
      break;
    case 2:
      break;  // 5-D with G = 1
    case 3:
      c.groups = 3, c.heads_q = std::min(hq, 4), c.heads_kv = std::min(hkv, c.heads_q);
      break;
  }
  if (c.heads_q % c.heads_kv != 0) c.heads_kv = 1;
  c.kv_len = kLengths[(t + f) % 8];
  c.q_len = {kQueries[(t + 5 * f) % 8]};
  return c;
}

// Applied last, when the lengths are final.
void apply_split(AttentionCase &c, SplitMode mode) {
  int32_t longest = 0;
  for (int32_t len : c.kv_len) longest = std::max(longest, len);
  switch (mode) {
    case kSplit1:
      c.split_k = 1;
      break;
    case kSplit2:
      c.split_k = 2;
      break;
    case kSplit7:
      c.split_k = 7;
      break;
    case kSplit64:
      c.split_k = 64;
      break;
    case kSplitBeyondKeys:
      c.split_k = 2 * (longest + c.page_size) + 8;
      break;
    case kSplitAuto:
      c.split_k = 0;
      break;
    case kSplitAutoHinted:
      c.split_k = 0, c.length_hint = true, c.stale_length_hint = c.kv_len.size() % 2 == 1;
      break;
    case kBatchInvariant32:
      c.batch_invariant = true, c.kv_chunk_size = 32;
      break;
  }
}

struct Feature {
  const char *name;
  std::function<void(AttentionCase &, int t)> apply;
};

void paged(AttentionCase &c, int32_t page_size, bool page_dim) {
  c.kv_layout = FMHA_KV_PAGED;
  c.page_size = page_size;
  c.kv_page_dim = page_dim;
}

const std::vector<Feature> &features() {
  static const std::vector<Feature> list = {
      {"dense", [](AttentionCase &c, int) { c.kv_layout = FMHA_KV_DENSE; }},
      {"padded", [](AttentionCase &c, int) { c.kv_layout = FMHA_KV_PADDED; }},
      {"gappy", [](AttentionCase &c, int) { c.kv_layout = FMHA_KV_GAPPY; }},
      {"paged_ps1", [](AttentionCase &c, int t) { paged(c, 1, t % 2 == 1); }},
      {"paged_ps16", [](AttentionCase &c, int t) { paged(c, 16, t % 2 == 1); }},
      {"paged_ps256", [](AttentionCase &c, int t) { paged(c, 256, t % 2 == 0); }},
      {"paged_odd_lengths",
       [](AttentionCase &c, int t) {
         paged(c, 16, t % 2 == 0);
         const std::vector<int32_t> odd = {1, 15, 16, 17, 255, 3, 33, 0};
         c.kv_len.clear();
         for (int b = 0; b < 5; ++b) c.kv_len.push_back(odd[static_cast<size_t>((b + t) % 7)]);
       }},
      {"paged_seqstart",
       [](AttentionCase &c, int t) {
         const int32_t sizes[] = {16, 1, 4, 256, 8, 32, 2, 64};
         paged(c, sizes[t], t % 2 == 1);
         c.paged_seqstart = true;
       }},
      {"ragged_last_page_len",
       [](AttentionCase &c, int t) {
         const int32_t sizes[] = {1, 16, 64, 256};
         c.kv_layout = FMHA_KV_RAGGED, c.page_size = sizes[t % 4], c.kv_page_dim = t % 2 == 0;
       }},
      {"ragged_whole_pages",
       [](AttentionCase &c, int t) {
         const int32_t sizes[] = {16, 4, 32, 1};
         c.kv_layout = FMHA_KV_RAGGED, c.page_size = sizes[t % 4], c.last_page_len = false, c.kv_page_dim = t % 2 == 1;
       }},
      {"varlen_q",
       [](AttentionCase &c, int t) {
         const int32_t layouts[] = {FMHA_KV_PADDED, FMHA_KV_PAGED, FMHA_KV_GAPPY, FMHA_KV_DENSE};
         c.kv_layout = layouts[t % 4];
         c.q_layout = FMHA_Q_VARLEN;
         const int32_t counts[] = {1, 4, 2, 16, 3, 0, 5, 1};
         c.q_len.clear();
         for (size_t b = 0; b < c.kv_len.size(); ++b) c.q_len.push_back(counts[(b + static_cast<size_t>(t)) % 8]);
         if (t % 3 == 0) c.mask = FMHA_MASK_CAUSAL;
       }},
      {"causal_mq1",
       [](AttentionCase &c, int t) { c.mask = FMHA_MASK_CAUSAL, c.q_len = {1}, c.kv_layout = kLayouts[t % 5]; }},
      {"causal_mq4",
       [](AttentionCase &c, int t) { c.mask = FMHA_MASK_CAUSAL, c.q_len = {4}, c.kv_layout = kLayouts[t % 5]; }},
      {"causal_mq64",
       [](AttentionCase &c, int t) {
         // Speculative verification / chunked prefill: more queries than
         // some sequences have keys (those rows see nothing or a prefix).
         const std::vector<int32_t> lengths[] = {{40, 300}, {64},  {100, 63}, {200},
                                                 {1, 128},  {300}, {70, 90},  {64, 65}};
         c.mask = FMHA_MASK_CAUSAL, c.q_len = {64}, c.kv_layout = kLayouts[t % 5];
         c.kv_len = lengths[t];
         c.groups = 1, c.four_d = t % 2 == 0, c.heads_q = std::min(c.heads_q, 4), c.heads_kv = 1;
       }},
      {"local",
       [](AttentionCase &c, int t) {
         const std::pair<int32_t, int32_t> windows[] = {{0, 0},  {3, 5},   {32, 0}, {100, 100},
                                                        {1, 17}, {250, 2}, {8, 8},  {0, 40}};
         c.mask = FMHA_MASK_LOCAL, c.kv_layout = kLayouts[t % 5];
         std::tie(c.window_left, c.window_right) = windows[t];
       }},
      {"causal_local",
       [](AttentionCase &c, int t) {
         const int32_t windows[] = {0, 5, 31, 100, 1, 250, 8, 64};
         c.mask = FMHA_MASK_CAUSAL_LOCAL, c.kv_layout = kLayouts[(t + 2) % 5], c.window_left = windows[t];
         c.q_len = {t % 2 == 0 ? 4 : 1};
       }},
      {"bias",
       [](AttentionCase &c, int t) {
         const Dtype dtypes[] = {Dtype::f32, Dtype::f16, Dtype::bf16};
         c.bias = true, c.bias_dtype = dtypes[t % 3], c.kv_layout = kLayouts[(t + 1) % 5];
       }},
      {"bias_with_masks",
       [](AttentionCase &c, int t) {
         const int32_t masks[] = {FMHA_MASK_CAUSAL, FMHA_MASK_LOCAL, FMHA_MASK_CAUSAL_LOCAL};
         c.bias = true, c.mask = masks[t % 3], c.window_left = 20, c.window_right = 7, c.q_len = {4};
         c.kv_layout = kLayouts[(t + 3) % 5];
         if (t == 5) c.q_layout = FMHA_Q_VARLEN, c.q_len.assign(c.kv_len.size(), 2), c.q_len[0] = 5;
       }},
      {"softcap",
       [](AttentionCase &c, int t) {
         const float caps[] = {5.0f, 10.0f, 30.0f, 2.0f};
         c.softcap = caps[t % 4], c.q_amplitude = 3.0, c.kv_layout = kLayouts[(t + 4) % 5];
       }},
      {"sinks",
       [](AttentionCase &c, int t) {
         c.sinks = true, c.kv_layout = kLayouts[t % 5];
         if (t % 2 == 1) c.mask = FMHA_MASK_CAUSAL, c.q_len = {4};
       }},
      {"gqa",
       [](AttentionCase &c, int t) {
         const std::pair<int32_t, int32_t> heads[] = {{8, 2}, {4, 2}, {6, 3}, {8, 4}, {4, 1}, {2, 1}, {6, 2}, {8, 1}};
         std::tie(c.heads_q, c.heads_kv) = heads[t];
         c.groups = t % 3 == 0 ? 2 : 1, c.four_d = t % 3 == 1, c.kv_layout = kLayouts[(t + 1) % 5];
       }},
      {"mqa_head_stride0",
       [](AttentionCase &c, int t) {
         c.kv_head_stride0 = true, c.heads_kv = 1, c.heads_q = 2 + 2 * (t % 4), c.kv_layout = kLayouts[(t + 2) % 5];
         if (c.groups == 3) c.groups = 2;
       }},
      {"mha",
       [](AttentionCase &c, int t) {
         c.heads_q = c.heads_kv = 1 << (t % 4), c.kv_layout = kLayouts[(t + 3) % 5];
         if (c.groups == 3) c.groups = 1;
       }},
      {"groups",
       [](AttentionCase &c, int t) {
         c.four_d = false, c.groups = 2 + t % 3, c.heads_q = 2, c.heads_kv = 1 + t % 2, c.kv_layout = kLayouts[t % 5];
       }},
      {"non_contiguous",
       [](AttentionCase &c, int t) { c.strided_q_o = true, c.strided_kv = true, c.kv_layout = kLayouts[t % 5]; }},
      {"lse_strided",
       [](AttentionCase &c, int t) { c.lse = true, c.strided_lse = true, c.kv_layout = kLayouts[(t + 1) % 5]; }},
      {"custom_scale",
       [](AttentionCase &c, int t) {
         const float scales[] = {0.3f, 0.05f, 1.0f, 0.125f};
         c.softmax_scale = scales[t % 4], c.kv_layout = kLayouts[(t + 4) % 5];
       }},
  };
  return list;
}

std::vector<AttentionCase> matrix() {
  std::vector<AttentionCase> cases;
  const std::vector<Feature> &list = features();
  for (size_t f = 0; f < list.size(); ++f)
    for (int t = 0; t < kCasesPerFeature; ++t) {
      AttentionCase c = axes(static_cast<int>(f), t);
      list[f].apply(c, t);
      set_equal_lengths_if_dense(c);
      const SplitMode split = static_cast<SplitMode>((t + 3 * static_cast<int>(f)) % 8);
      apply_split(c, split);
      c.name = std::string(list[f].name) + "_" + std::to_string(t) + "_" + dtype_name(c.dtype) + "_d" +
               std::to_string(c.head_dim) + "_" + kSplitNames[split];
      cases.push_back(c);
    }
  return cases;
}

class ForwardMatrix : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(ForwardMatrix, MatchesOracle) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  check_attention_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Features, ForwardMatrix, ::testing::ValuesIn(matrix()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

// A few problems of realistic size: long caches, wide GQA, many queries.
std::vector<AttentionCase> larger_cases() {
  std::vector<AttentionCase> cases;
  AttentionCase c;
  c.name = "llama_decode_paged_gqa";
  c.kv_layout = FMHA_KV_PAGED;
  c.page_size = 16;
  c.kv_len = {4096, 1000, 3000, 17};
  c.heads_q = 32;
  c.heads_kv = 8;
  c.four_d = true;
  c.head_dim = 128;
  c.dtype = Dtype::bf16;
  cases.push_back(c);

  c = AttentionCase();
  c.name = "speculative_verify_causal_padded";
  c.kv_layout = FMHA_KV_PADDED;
  c.kv_len = {2048, 777};
  c.q_len = {16};
  c.mask = FMHA_MASK_CAUSAL;
  c.groups = 2;
  c.heads_q = 8;
  c.heads_kv = 1;
  c.head_dim = 256;
  c.dtype = Dtype::f16;
  c.split_k = 7;
  c.sinks = true;
  cases.push_back(c);

  // Dense batches whose balanced ranges are shorter than a sequence: the
  // GPU kernels cut them by arithmetic (no scheduling pass). Ranges across
  // a sequence boundary, several cuts per sequence, and as many ranges as
  // sequences plus one (the most partial slots).
  c = AttentionCase();
  c.name = "dense_balanced_ranges_inside_sequences";
  c.kv_len = {2000, 2000, 2000};
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 64;
  c.sinks = true;
  cases.push_back(c);

  c = AttentionCase();
  c.name = "dense_balanced_gqa_decode";
  c.kv_len = {4096, 4096};
  c.heads_q = 32;
  c.heads_kv = 8;
  c.four_d = true;
  c.head_dim = 128;
  c.o_dtype = FMHA_DTYPE_F32;
  cases.push_back(c);

  c = AttentionCase();
  c.name = "dense_balanced_mqa_causal_mq4";
  c.kv_len = {777, 777, 777, 777, 777};
  c.q_len = {4};
  c.mask = FMHA_MASK_CAUSAL;
  c.groups = 2;
  c.heads_q = 8;
  c.heads_kv = 1;
  c.head_dim = 80;
  c.dtype = Dtype::f16;
  c.softcap = 30.0f;
  cases.push_back(c);

  c = AttentionCase();
  c.name = "dense_balanced_one_range_more_than_sequences";
  c.kv_len.assign(7, 300);
  c.heads_q = 2;
  c.heads_kv = 1;
  c.head_dim = 64;
  c.dtype = Dtype::f16;
  cases.push_back(c);

  // Ranges longer than a sequence: at most one cut inside a sequence, some
  // sequences whole (written directly), some ranges over several sequences.
  c = AttentionCase();
  c.name = "dense_balanced_ranges_over_sequences";
  c.kv_len.assign(24, 100);
  c.q_len = {2};
  c.mask = FMHA_MASK_CAUSAL;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 64;
  c.dtype = Dtype::f16;
  cases.push_back(c);

  c = AttentionCase();
  c.name = "dense_balanced_some_sequences_cut_sinks";
  c.kv_len.assign(9, 150);
  c.heads_q = 8;
  c.heads_kv = 8;
  c.head_dim = 32;
  c.sinks = true;
  cases.push_back(c);

  // Split batches with many query rows (4096 at Dv 128, 2304 at Dv 512):
  // the largest grids of the GPU's split combine among the cases.
  c = AttentionCase();
  c.name = "split_many_rows_d128";
  c.kv_layout = FMHA_KV_PADDED;
  c.kv_len = {700, 650, 700, 3, 700, 699, 1, 700};
  c.q_len = {16};
  c.heads_q = 32;
  c.heads_kv = 8;
  c.head_dim = 128;
  c.split_k = 3;
  c.sinks = true;
  cases.push_back(c);

  c = AttentionCase();
  c.name = "split_many_rows_d512";
  c.kv_len.assign(6, 300);
  c.q_len = {12};
  c.heads_q = 32;
  c.heads_kv = 4;
  c.head_dim = 512;
  c.split_k = 4;
  c.dtype = Dtype::f16;
  c.o_dtype = FMHA_DTYPE_F32;
  cases.push_back(c);

  c = AttentionCase();
  c.name = "chunked_prefill_causal_local_gappy";
  c.kv_layout = FMHA_KV_GAPPY;
  c.q_layout = FMHA_Q_VARLEN;
  c.kv_len = {1500, 600};
  c.q_len = {128, 64};
  c.mask = FMHA_MASK_CAUSAL_LOCAL;
  c.window_left = 256;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 64;
  c.dtype = Dtype::bf16;
  c.o_dtype = FMHA_DTYPE_F32;
  c.batch_invariant = true;
  c.kv_chunk_size = 128;
  cases.push_back(c);
  return cases;
}

class LargerProblems : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(LargerProblems, MatchOracle) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  check_attention_case(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Features, LargerProblems, ::testing::ValuesIn(larger_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

}  // namespace
}  // namespace fmha_test
