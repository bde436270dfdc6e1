// Self-tests of the float64 oracle: the feature suites are only as good as
// the reference they compare with, so it is checked against hand-computed
// values and against its own invariants (rows sum to 1, a split-and-merge
// equals the whole, every layout of the same data gives the same answer,
// the merge gradient equals finite differences).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "features/harness.h"
#include "oracle/oracle.h"

namespace fmha_test {
namespace {

using fmha_oracle::AttentionOracle;
using fmha_oracle::AttentionOutput;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

AttentionOutput oracle_of(const AttentionData &data) { return AttentionOracle(data.oracle_inputs()).forward(); }

double max_abs_difference(const std::vector<double> &a, const std::vector<double> &b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] == b[i]) continue;  // equal infinities too
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst;
}

AttentionCase small_case() {
  AttentionCase c;
  c.name = "oracle";
  c.kv_layout = FMHA_KV_PADDED;
  c.kv_len = {37, 1, 80};
  c.q_len = {5};
  c.groups = 2;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim = 16;
  return c;
}

TEST(OracleSelfTest, HandComputedRow) {
  // q = (1, 0); keys (0, 0) and (1, 0); values (1, 0) and (0, 1); scale 1:
  // scores 0 and 1, so O = (1, e) / (1 + e) and LSE = log(1 + e).
  Tensor q(Dtype::f32, {1, 1, 1, 2}), k(Dtype::f32, {1, 2, 1, 2}), v(Dtype::f32, {1, 2, 1, 2});
  q.fill_int({1, 0});
  k.fill_int({0, 0, 1, 0});
  v.fill_int({1, 0, 0, 1});
  fmha_oracle::AttentionInputs in;
  in.q = &q;
  in.k = &k;
  in.v = &v;
  in.softmax_scale = 1.0;
  const double e = std::exp(1.0);
  AttentionOutput out = AttentionOracle(in).forward();
  EXPECT_NEAR(out.o[0], 1.0 / (1.0 + e), 1e-15);
  EXPECT_NEAR(out.o[1], e / (1.0 + e), 1e-15);
  EXPECT_NEAR(out.lse[0], std::log(1.0 + e), 1e-15);

  // A sink of 0.5 joins the denominator only.
  Tensor sinks(Dtype::f32, {1});
  sinks.set({0}, 0.5);
  in.sinks = &sinks;
  out = AttentionOracle(in).forward();
  const double denominator = 1.0 + e + std::exp(0.5);
  EXPECT_NEAR(out.o[0], 1.0 / denominator, 1e-15);
  EXPECT_NEAR(out.o[1], e / denominator, 1e-15);
  EXPECT_NEAR(out.lse[0], std::log(denominator), 1e-15);

  // Soft-capping with cap 0.5 maps the score 1 to 0.5 tanh(2), before the bias.
  in.sinks = nullptr;
  in.softcap = 0.5;
  Tensor bias(Dtype::f32, {1, 1, 1, 2});
  bias.fill_int({2, -1});
  in.bias = &bias;
  out = AttentionOracle(in).forward();
  const double s0 = 2.0, s1 = 0.5 * std::tanh(2.0) - 1.0;
  EXPECT_NEAR(out.lse[0], std::log(std::exp(s0) + std::exp(s1)), 1e-15);
  EXPECT_NEAR(out.o[1], std::exp(s1) / (std::exp(s0) + std::exp(s1)), 1e-15);
}

TEST(OracleSelfTest, SoftmaxRowsSumToOne) {
  for (int32_t mask : {FMHA_MASK_NONE, FMHA_MASK_CAUSAL, FMHA_MASK_LOCAL, FMHA_MASK_CAUSAL_LOCAL}) {
    AttentionCase c = small_case();
    c.mask = mask;
    c.window_left = 3;
    c.window_right = 2;
    c.bias = true;
    c.sinks = mask % 2 == 1;
    c.softcap = mask == FMHA_MASK_LOCAL ? 2.0f : 0.0f;
    SCOPED_TRACE(c.describe());
    const auto data = build_attention(c, 1234 + static_cast<uint64_t>(mask));
    const AttentionOracle oracle(data->oracle_inputs());
    for (int64_t b = 0; b < oracle.batch(); ++b)
      for (int32_t g = 0; g < oracle.groups(); ++g)
        for (int32_t h = 0; h < oracle.heads_q(); ++h)
          for (int64_t i = 0; i < oracle.queries(b); ++i) {
            const fmha_oracle::SoftmaxRow row = oracle.softmax_row(b, g, h, i);
            double sum = row.sink_prob;
            for (double p : row.probs) sum += p;
            if (row.lse == kNegInf)
              EXPECT_EQ(sum, 0.0);
            else
              EXPECT_NEAR(sum, 1.0, 1e-12) << "b " << b << " g " << g << " h " << h << " i " << i;
          }
  }
}

TEST(OracleSelfTest, MaskPatterns) {
  // Query i of a sequence with Mq queries and L keys sits at p = L - Mq + i.
  for (int32_t mask : {FMHA_MASK_NONE, FMHA_MASK_CAUSAL, FMHA_MASK_LOCAL, FMHA_MASK_CAUSAL_LOCAL}) {
    AttentionCase c;
    c.kv_len = {9};
    c.q_len = {5};
    c.head_dim = 16;
    c.mask = mask;
    c.window_left = 2;
    c.window_right = 1;
    const auto data = build_attention(c, 99);
    const AttentionOracle oracle(data->oracle_inputs());
    for (int64_t i = 0; i < 5; ++i) {
      const fmha_oracle::SoftmaxRow row = oracle.softmax_row(0, 0, 0, i);
      const int64_t p = 9 - 5 + i;
      for (int64_t j = 0; j < 9; ++j) {
        bool visible = true;
        if (mask == FMHA_MASK_CAUSAL) visible = j <= p;
        if (mask == FMHA_MASK_LOCAL) visible = j >= p - 2 && j <= p + 1;
        if (mask == FMHA_MASK_CAUSAL_LOCAL) visible = j >= p - 2 && j <= p;
        EXPECT_EQ(row.probs[static_cast<size_t>(j)] > 0.0, visible)
            << "mask " << mask << " query " << i << " key " << j;
      }
    }
  }
}

TEST(OracleSelfTest, FullyMaskedRows) {
  // A window of one key at p = L - Mq + i: the first queries sit before key 0.
  AttentionCase c;
  c.kv_len = {3};
  c.q_len = {6};
  c.head_dim = 16;
  c.mask = FMHA_MASK_LOCAL;
  for (bool sinks : {false, true}) {
    c.sinks = sinks;
    const auto data = build_attention(c, 7);
    const AttentionOutput out = oracle_of(*data);
    const double sink = sinks ? data->sinks->get({0, 0}) : kNegInf;
    for (int64_t i = 0; i < 6; ++i) {
      const bool empty = 3 - 6 + i < 0;
      if (empty) {
        EXPECT_EQ(out.lse[static_cast<size_t>(i)], sink) << "query " << i;
        for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(out.o[static_cast<size_t>(i * 16 + d)], 0.0);
      } else {
        EXPECT_TRUE(std::isfinite(out.lse[static_cast<size_t>(i)]));
      }
    }
  }
}

TEST(OracleSelfTest, MergedHalvesEqualWhole) {
  for (int32_t mask : {FMHA_MASK_NONE, FMHA_MASK_CAUSAL, FMHA_MASK_LOCAL}) {
    AttentionCase c = small_case();
    c.mask = mask;
    c.window_left = 20;
    c.window_right = 3;
    c.bias = true;
    c.sinks = true;
    SCOPED_TRACE(c.describe());
    const auto data = build_attention(c, 555 + static_cast<uint64_t>(mask));
    const AttentionOutput whole = oracle_of(*data);
    for (int64_t cut : {0, 1, 30, 79, 200}) {
      fmha_oracle::AttentionInputs first = data->oracle_inputs(), second = first;
      first.key_end = cut;
      second.key_begin = cut;
      second.sinks = nullptr;  // the sink joins one part only
      const AttentionOutput a = AttentionOracle(first).forward(), b = AttentionOracle(second).forward();
      const fmha_oracle::MergeShape shape{whole.rows_b, whole.rows_m, whole.groups, whole.heads_q, whole.head_dim_v};
      const fmha_oracle::MergeResult merged = fmha_oracle::merge(shape, {a.o, b.o}, {a.lse, b.lse});
      EXPECT_LE(max_abs_difference(merged.o, whole.o), 1e-12) << "cut " << cut;
      EXPECT_LE(max_abs_difference(merged.lse, whole.lse), 1e-12) << "cut " << cut;
    }
  }
}

TEST(OracleSelfTest, EveryLayoutOfTheSameDataAgrees) {
  // Equal lengths that are whole pages, so every layout can hold them.
  AttentionCase base = small_case();
  base.kv_len = {32, 48, 16};
  base.page_size = 16;
  base.bias = true;
  base.mask = FMHA_MASK_CAUSAL;
  auto with = [&](auto change) {
    AttentionCase c = base;
    change(c);
    return oracle_of(*build_attention(c, 2024));
  };
  const AttentionOutput reference = with([](AttentionCase &) {});
  const std::vector<std::pair<const char *, std::function<void(AttentionCase &)>>> variants = {
      {"gappy", [](AttentionCase &c) { c.kv_layout = FMHA_KV_GAPPY; }},
      {"paged rows", [](AttentionCase &c) { c.kv_layout = FMHA_KV_PAGED; }},
      {"paged pages", [](AttentionCase &c) { c.kv_layout = FMHA_KV_PAGED, c.kv_page_dim = true; }},
      {"paged seqstart", [](AttentionCase &c) { c.kv_layout = FMHA_KV_PAGED, c.paged_seqstart = true; }},
      {"paged ps 1", [](AttentionCase &c) { c.kv_layout = FMHA_KV_PAGED, c.page_size = 1; }},
      {"ragged", [](AttentionCase &c) { c.kv_layout = FMHA_KV_RAGGED, c.kv_page_dim = true; }},
      {"ragged no last", [](AttentionCase &c) { c.kv_layout = FMHA_KV_RAGGED, c.last_page_len = false; }},
      {"strided padded", [](AttentionCase &c) { c.strided_kv = true, c.strided_q_o = true; }},
      {"strided paged", [](AttentionCase &c) { c.kv_layout = FMHA_KV_PAGED, c.strided_kv = true; }},
  };
  for (const auto &[name, change] : variants) {
    const AttentionOutput out = with(change);
    EXPECT_EQ(out.o, reference.o) << name;
    EXPECT_EQ(out.lse, reference.lse) << name;
  }

  // MQA by a head stride of 0 equals one distinct K/V head; 4-D equals 5-D
  // with G = 1; VARLEN with equal lengths equals FIXED.
  base.groups = 1;
  base.heads_kv = 1;
  const AttentionOutput one_head = with([](AttentionCase &) {});
  EXPECT_EQ(with([](AttentionCase &c) { c.kv_head_stride0 = true; }).o, one_head.o);
  EXPECT_EQ(with([](AttentionCase &c) { c.four_d = true; }).o, one_head.o);
  base.mask = FMHA_MASK_NONE;
  base.bias = false;
  EXPECT_EQ(with([](AttentionCase &c) {
              c.q_layout = FMHA_Q_VARLEN, c.q_len = {5, 5, 5};
            }).o,
            with([](AttentionCase &) {}).o);
}

TEST(OracleSelfTest, GroupedHeadsReadTheirSharedHead) {
  // Hq = 4 over Hkv = 2 equals Hq = 4 over 4 heads where heads 2k, 2k+1 are
  // copies of head k.
  AttentionCase c = small_case();
  c.kv_layout = FMHA_KV_DENSE;
  c.kv_len = {40, 40, 40};
  const auto data = build_attention(c, 31);
  auto expand = [](const Tensor &t) {
    std::vector<int64_t> shape = t.shape();
    shape[3] = 4;
    Tensor out(t.dtype(), shape);
    out.for_each_index([&](const std::vector<int64_t> &i) {
      std::vector<int64_t> src = i;
      src[3] = i[3] / 2;
      out.set(i, t.get(src));
    });
    return out;
  };
  const Tensor k4 = expand(*data->k), v4 = expand(*data->v);
  fmha_oracle::AttentionInputs in = data->oracle_inputs();
  in.k = &k4;
  in.v = &v4;
  EXPECT_EQ(AttentionOracle(in).forward().o, oracle_of(*data).o);
}

TEST(OracleSelfTest, MergeEdgeCases) {
  const fmha_oracle::MergeShape shape{1, 1, 1, 2, 3};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Row 0: every partial empty (garbage O ignored). Row 1: one live partial.
  const std::vector<std::vector<double>> o = {{nan, nan, nan, 1, 2, 3}, {nan, nan, nan, nan, nan, nan}};
  const std::vector<std::vector<double>> lse = {{kNegInf, 0.25}, {kNegInf, kNegInf}};
  const fmha_oracle::MergeResult m = fmha_oracle::merge(shape, o, lse);
  EXPECT_EQ(m.lse[0], kNegInf);
  EXPECT_EQ(m.lse[1], 0.25);
  EXPECT_EQ(m.o, (std::vector<double>{0, 0, 0, 1, 2, 3}));
  const fmha_oracle::MergeGradients g =
      fmha_oracle::merge_backward(shape, o, lse, m.o, m.lse, {1, 1, 1, 1, 1, 1}, {1, 1});
  EXPECT_EQ(g.grad_o[0], (std::vector<double>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(g.grad_o[1], (std::vector<double>(6, 0.0)));
  EXPECT_EQ(g.grad_lse[0], (std::vector<double>{0, 1}));
  EXPECT_EQ(g.grad_lse[1], (std::vector<double>{0, 0}));
}

TEST(OracleSelfTest, MergeBackwardMatchesFiniteDifferences) {
  // loss = <dO, O> + <dLSE, LSE> of the oracle merge, differentiated by
  // central differences in float64.
  const fmha_oracle::MergeShape shape{2, 3, 2, 2, 5};
  std::mt19937_64 rng(17);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto random_vector = [&](int64_t n) {
    std::vector<double> x(static_cast<size_t>(n));
    for (double &e : x) e = normal(rng);
    return x;
  };
  const int parts = 3;
  std::vector<std::vector<double>> o, lse;
  for (int i = 0; i < parts; ++i) {
    o.push_back(random_vector(shape.rows() * shape.head_dim));
    lse.push_back(random_vector(shape.rows()));
  }
  lse[1][4] = kNegInf;  // one partial empty on one row
  const std::vector<double> grad_o = random_vector(shape.rows() * shape.head_dim),
                            grad_lse = random_vector(shape.rows());
  auto loss = [&](const std::vector<std::vector<double>> &po, const std::vector<std::vector<double>> &pl) {
    const fmha_oracle::MergeResult m = fmha_oracle::merge(shape, po, pl);
    double l = 0.0;
    for (size_t i = 0; i < m.o.size(); ++i) l += grad_o[i] * m.o[i];
    for (size_t i = 0; i < m.lse.size(); ++i) l += grad_lse[i] * m.lse[i];
    return l;
  };
  const fmha_oracle::MergeResult merged = fmha_oracle::merge(shape, o, lse);
  const fmha_oracle::MergeGradients grads =
      fmha_oracle::merge_backward(shape, o, lse, merged.o, merged.lse, grad_o, grad_lse);
  const double step = 1e-6;
  for (int i = 0; i < parts; ++i) {
    for (size_t e = 0; e < o[i].size(); ++e) {
      auto plus = o, minus = o;
      plus[i][e] += step;
      minus[i][e] -= step;
      EXPECT_NEAR((loss(plus, lse) - loss(minus, lse)) / (2 * step), grads.grad_o[i][e], 1e-7)
          << "dO partial " << i << " element " << e;
    }
    for (size_t e = 0; e < lse[i].size(); ++e) {
      if (lse[i][e] == kNegInf) {
        EXPECT_EQ(grads.grad_lse[i][e], 0.0);
        continue;
      }
      auto plus = lse, minus = lse;
      plus[i][e] += step;
      minus[i][e] -= step;
      EXPECT_NEAR((loss(o, plus) - loss(o, minus)) / (2 * step), grads.grad_lse[i][e], 1e-7)
          << "dLSE partial " << i << " row " << e;
    }
  }
}

}  // namespace
}  // namespace fmha_test
