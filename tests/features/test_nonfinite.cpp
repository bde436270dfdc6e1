// NaN and Inf inputs (issue: hostile input and faults): they propagate per
// IEEE into exactly the outputs that depend on them, every other output
// keeps the bits of a clean run, and no kernel hangs. Runs on every device
// (CPU suite, GPU suite), with one split, a forced split and the balanced
// schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "features/harness.h"

namespace fmha_test {
namespace {

AttentionCase nonfinite_spec(int32_t split_k) {
  AttentionCase spec;
  spec.name = "nonfinite_split" + std::to_string(split_k);
  spec.dtype = Dtype::bf16;
  spec.kv_layout = FMHA_KV_PADDED;
  spec.q_layout = FMHA_Q_FIXED;
  spec.kv_len = {37, 80, 5, 64};
  spec.q_len = {2};
  spec.heads_q = 4;
  spec.heads_kv = 2;
  spec.head_dim = 64;
  spec.split_k = split_k;
  return spec;
}

// Sets the element of `t` at (batch, row, head, dim) (dims 0, 1, rank-2,
// rank-1; every group) to `value`.
void plant(Tensor &t, int64_t batch, int64_t row, int64_t head, int64_t dim, double value) {
  const size_t rank = t.shape().size();
  t.for_each_index([&](const std::vector<int64_t> &i) {
    if (i[0] == batch && i[1] == row && i[rank - 2] == head && i[rank - 1] == dim) t.set(i, value);
  });
}

// O elements (dims as above) that must be NaN are exactly those `expect_nan`
// names; every other element of O, and all of LSE outside `lse_free`, has
// the clean run's value.
template <class NanAt, class LseFree>
void expect_only(const Tensor &o, const Tensor &clean_o, const Tensor &lse, const Tensor &clean_lse, NanAt &&expect_nan,
                 LseFree &&lse_free) {
  const size_t rank = o.shape().size();
  int64_t wrong_nan = 0, missing_nan = 0, changed = 0;
  o.for_each_index([&](const std::vector<int64_t> &i) {
    const double got = o.get(i);
    if (expect_nan(i[0], i[1], i[rank - 2], i[rank - 1])) {
      if (!std::isnan(got)) ++missing_nan;
    } else if (std::isnan(got)) {
      ++wrong_nan;
    } else if (got != clean_o.get(i)) {
      ++changed;
    }
  });
  EXPECT_EQ(missing_nan, 0) << "outputs that depend on the NaN input are not NaN";
  EXPECT_EQ(wrong_nan, 0) << "NaN reached outputs that do not depend on it";
  EXPECT_EQ(changed, 0) << "outputs that do not depend on the planted value changed";
  // LSE [B, G, Hq, Mq]: batch dim 0, head rank-2, query rank-1.
  const size_t lse_rank = lse.shape().size();
  int64_t lse_changed = 0;
  lse.for_each_index([&](const std::vector<int64_t> &i) {
    if (lse_free(i[0], i[lse_rank - 2], i[lse_rank - 1])) return;
    const double got = lse.get(i), want = clean_lse.get(i);
    if (!(got == want || (std::isnan(got) && std::isnan(want)))) ++lse_changed;
  });
  EXPECT_EQ(lse_changed, 0) << "LSE rows that do not depend on the planted value changed";
}

class NonFinite : public ::testing::TestWithParam<int32_t> {};

TEST_P(NonFinite, PropagateOnlyWhereTheyAreUsed) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const AttentionCase spec = nonfinite_spec(GetParam());
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  const RunResult clean = run_attention(*data, upload_inputs(*data), data->problem);
  ASSERT_EQ(clean.status, FMHA_STATUS_SUCCESS) << clean.error;

  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  {
    // NaN in V: sequence 2, key 1 (every query sees it), K/V head 1, dim 5:
    // column 5 of the rows of Q heads 2 and 3 of sequence 2, nothing else.
    SCOPED_TRACE("NaN in V");
    Tensor saved = *data->v;
    plant(*data->v, 2, 1, 1, 5, nan);
    const RunResult run = run_attention(*data, upload_inputs(*data), data->problem);
    ASSERT_EQ(run.status, FMHA_STATUS_SUCCESS) << run.error;
    expect_only(
        run.o, clean.o, run.lse, clean.lse,
        [](int64_t b, int64_t, int64_t h, int64_t d) { return b == 2 && (h == 2 || h == 3) && d == 5; },
        [](int64_t, int64_t, int64_t) { return false; });
    *data->v = saved;
  }
  {
    // NaN in Q: sequence 1, query 0, head 0: that row's O is NaN; its LSE
    // is not finite (left free); nothing else changes.
    SCOPED_TRACE("NaN in Q");
    Tensor saved = *data->q;
    plant(*data->q, 1, 0, 0, 3, nan);
    const RunResult run = run_attention(*data, upload_inputs(*data), data->problem);
    ASSERT_EQ(run.status, FMHA_STATUS_SUCCESS) << run.error;
    expect_only(
        run.o, clean.o, run.lse, clean.lse,
        [](int64_t b, int64_t m, int64_t h, int64_t) { return b == 1 && m == 0 && h == 0; },
        [](int64_t b, int64_t h, int64_t m) { return b == 1 && m == 0 && h == 0; });
    *data->q = saved;
  }
  {
    // +Inf in K: sequence 0, key 4, K/V head 0, dim 0. The scores of Q heads
    // 0 and 1 of sequence 0 against that key are +-inf or NaN: their rows
    // may be anything (not checked), every other row keeps its bits and the
    // run finishes.
    SCOPED_TRACE("Inf in K");
    Tensor saved = *data->k;
    plant(*data->k, 0, 4, 0, 0, inf);
    const RunResult run = run_attention(*data, upload_inputs(*data), data->problem);
    ASSERT_EQ(run.status, FMHA_STATUS_SUCCESS) << run.error;
    const size_t rank = run.o.shape().size();
    int64_t changed = 0;
    run.o.for_each_index([&](const std::vector<int64_t> &i) {
      if (i[0] == 0 && i[rank - 2] < 2) return;
      const double got = run.o.get(i);
      if (!(got == clean.o.get(i))) ++changed;
    });
    EXPECT_EQ(changed, 0) << "rows that do not see the Inf key changed";
    *data->k = saved;
  }
}

INSTANTIATE_TEST_SUITE_P(Features, NonFinite, ::testing::Values(1, 3, 0),
                         [](const ::testing::TestParamInfo<int32_t> &info) {
                           return info.param == 0 ? std::string("sAuto") : "s" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace fmha_test
