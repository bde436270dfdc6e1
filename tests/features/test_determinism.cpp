// Determinism (DESIGN 6) and batch invariance (DESIGN 5.1): the same run
// twice gives identical bits; with FMHA_FLAG_BATCH_INVARIANT a sequence's
// result has the same bits whether it runs alone or inside a larger batch.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "features/harness.h"

namespace fmha_test {
namespace {

::testing::AssertionResult same_bits(const std::vector<double> &a, const std::vector<double> &b, const char *what) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure()
             << what << ": element " << i << " differs (" << a[i] << " vs " << b[i] << ")";
  return ::testing::AssertionSuccess();
}

std::vector<AttentionCase> repeat_cases() {
  std::vector<AttentionCase> cases;
  AttentionCase c;
  c.groups = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 128;
  c.q_len = {4};

  c.name = "paged_auto_bias_sinks";
  c.kv_layout = FMHA_KV_PAGED;
  c.kv_len = {300, 17, 129};
  c.bias = c.sinks = true;
  cases.push_back(c);

  c.name = "padded_s7_causal_plan_workspace";
  c.kv_layout = FMHA_KV_PADDED;
  c.bias = c.sinks = false;
  c.mask = FMHA_MASK_CAUSAL;
  c.split_k = 7;
  c.null_workspace = true;
  c.dtype = Dtype::f16;
  cases.push_back(c);

  c.name = "ragged_invariant32";
  c.kv_layout = FMHA_KV_RAGGED;
  c.mask = FMHA_MASK_NONE;
  c.split_k = 0;
  c.null_workspace = false;
  c.batch_invariant = true;
  c.kv_chunk_size = 32;
  cases.push_back(c);

  c.name = "dense_s1";
  c.kv_layout = FMHA_KV_DENSE;
  c.kv_len = {200, 200};
  c.batch_invariant = false;
  c.kv_chunk_size = 0;
  c.split_k = 1;
  cases.push_back(c);
  return cases;
}

class Repeatable : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(Repeatable, SameRunSameBits) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  SCOPED_TRACE(GetParam().describe());
  const std::unique_ptr<AttentionData> data = build_attention(GetParam(), seed);
  const DeviceInputs inputs = upload_inputs(*data);
  const RunResult first = run_attention(*data, inputs, data->problem);
  ASSERT_EQ(first.status, FMHA_STATUS_SUCCESS) << first.error;
  const RunResult second = run_attention(*data, inputs, data->problem);
  ASSERT_EQ(second.status, FMHA_STATUS_SUCCESS) << second.error;
  EXPECT_TRUE(same_bits(fmha_oracle::to_doubles(first.o), fmha_oracle::to_doubles(second.o), "O"))
      << plan_note(first.info);
  EXPECT_TRUE(same_bits(fmha_oracle::to_doubles(first.lse), fmha_oracle::to_doubles(second.lse), "LSE"));
}

INSTANTIATE_TEST_SUITE_P(Features, Repeatable, ::testing::ValuesIn(repeat_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase> &info) { return info.param.name; });

// t[b] as a tensor [1, ...] of its own.
Tensor sequence_slice(const Tensor &t, int64_t b) {
  std::vector<int64_t> shape = t.shape();
  shape[0] = 1;
  Tensor out(t.dtype(), shape);
  out.for_each_index([&](const std::vector<int64_t> &i) {
    std::vector<int64_t> src = i;
    src[0] = b;
    out.set(i, t.get(src));
  });
  return out;
}

// Sequence b of a PADDED or PAGED batch as a batch of one: the same Q rows
// and keys (PAGED: the same page pool through its block-table row). With
// own_max_kv the plan is made for the sequence's own length, as a server
// would for a batch holding only it.
std::unique_ptr<AttentionData> alone(const AttentionData &whole, int64_t b, bool own_max_kv) {
  auto one = std::make_unique<AttentionData>();
  one->spec = whole.spec;
  one->kv_len = {whole.kv_len[static_cast<size_t>(b)]};
  one->spec.kv_len = one->kv_len;
  one->problem = whole.problem;
  one->problem.batch = 1;
  one->problem.kv_seqlen_hint = nullptr;
  one->q = sequence_slice(*whole.q, b);
  one->kv_seqlen = int_tensor(one->kv_len, {1});
  if (whole.sinks) one->sinks = *whole.sinks;
  if (whole.spec.kv_layout == FMHA_KV_PADDED) {
    one->k = sequence_slice(*whole.k, b);
    one->v = sequence_slice(*whole.v, b);
  } else {
    one->k = *whole.k;
    one->v = *whole.v;
    one->block_table = sequence_slice(*whole.block_table, b);
    if (whole.kv_seqstart) one->kv_seqstart = sequence_slice(*whole.kv_seqstart, b);
    if (own_max_kv) one->problem.max_kv_seqlen = one->kv_len[0];
  }
  return one;
}

struct InvariantCase {
  const char *name;
  int32_t kv_layout;
  int32_t kv_chunk_size;
  bool own_max_kv;
};

void PrintTo(const InvariantCase &c, std::ostream *os) { *os << c.name; }

class BatchInvariant : public ::testing::TestWithParam<InvariantCase> {};

TEST_P(BatchInvariant, SequenceAloneEqualsSequenceInBatch) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  const InvariantCase &param = GetParam();
  AttentionCase c;
  c.name = param.name;
  c.kv_layout = param.kv_layout;
  c.batch_invariant = true;
  c.kv_chunk_size = param.kv_chunk_size;
  c.kv_len = {300, 17, 64, 129, 513, 1};
  c.q_len = {2};
  c.groups = 2;
  c.heads_q = 4;
  c.heads_kv = 1;
  c.head_dim = 64;
  c.sinks = true;
  c.mask = FMHA_MASK_CAUSAL;
  c.paged_seqstart = param.kv_layout == FMHA_KV_PAGED;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  SCOPED_TRACE(c.describe());
  const std::unique_ptr<AttentionData> whole = build_attention(c, seed);
  const RunResult batch = run_attention(*whole);
  ASSERT_EQ(batch.status, FMHA_STATUS_SUCCESS) << batch.error;
  const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(whole->oracle_inputs()).forward();
  EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(batch.o), ref, attention_tolerance(c.dtype, c.dtype, ref.o)));
  for (int64_t b = 0; b < c.batch(); ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b) + " of length " +
                 std::to_string(whole->kv_len[static_cast<size_t>(b)]));
    const std::unique_ptr<AttentionData> one = alone(*whole, b, param.own_max_kv);
    const RunResult single = run_attention(*one);
    ASSERT_EQ(single.status, FMHA_STATUS_SUCCESS) << single.error;
    EXPECT_TRUE(same_bits(fmha_oracle::slice_to_doubles(batch.o, b), fmha_oracle::to_doubles(single.o), "O"))
        << "batch " << plan_note(batch.info) << "\nalone " << plan_note(single.info);
    EXPECT_TRUE(same_bits(fmha_oracle::slice_to_doubles(batch.lse, b), fmha_oracle::to_doubles(single.lse), "LSE"));
  }
}

INSTANTIATE_TEST_SUITE_P(Features, BatchInvariant,
                         ::testing::Values(InvariantCase{"padded_chunk32", FMHA_KV_PADDED, 32, false},
                                           InvariantCase{"padded_default_chunk", FMHA_KV_PADDED, 0, false},
                                           InvariantCase{"paged_chunk32", FMHA_KV_PAGED, 32, false},
                                           InvariantCase{"paged_chunk64_own_max_kv", FMHA_KV_PAGED, 64, true}),
                         [](const ::testing::TestParamInfo<InvariantCase> &info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace fmha_test
