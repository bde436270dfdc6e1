// fmha_merge and fmha_merge_backward (DESIGN 5.8, 5.9) against the float64
// oracle: stacked and list forms, 4-D and 5-D (stacked 5-D / 6-D),
// permuted and padded strides, f16 / bf16 / f32 partials and outputs, rows
// where every partial is empty, LSE output optional; the backward also
// against central finite differences of the float64 merge.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "features/harness.h"

namespace fmha_test {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct MergeCase {
  const char *name;
  int64_t parts, batch, queries, groups, heads, head_dim;
  bool four_d;
  bool stacked;        // partials (forward) or inputs (backward) stacked
  bool stacked_grads;  // backward: gradients of the partials stacked
  Dtype part_dtype;
  Dtype out_dtype;                    // forward: merged O; backward: gradients of the partial O
  bool lse_out;                       // forward: merged LSE requested; backward: grad_lse given
  bool strided;                       // O tensors with padded / permuted strides
  bool empty_rows;                    // some partials empty on some rows, every partial on row 0
  bool every_row_empty;               // every LSE_i is -inf
  Dtype merged_o_dtype = Dtype::f32;  // backward: dtype of the merged O input
  bool strided_lse = false;           // LSE tensors in O's row order (last dim not contiguous)
};

void PrintTo(const MergeCase &c, std::ostream *os) {
  *os << c.name << ": " << c.parts << " partials, B=" << c.batch << " M=" << c.queries << " G=" << c.groups
      << " H=" << c.heads << " D=" << c.head_dim << (c.four_d ? " 4-D" : " 5-D") << (c.stacked ? " stacked" : " list")
      << (c.stacked_grads ? " stacked-grads" : "") << " partials " << dtype_name(c.part_dtype) << " output "
      << dtype_name(c.out_dtype) << (c.lse_out ? " +lse" : "") << (c.strided ? " strided-o" : "")
      << (c.strided_lse ? " strided-lse" : "") << (c.empty_rows ? " empty-rows" : "")
      << (c.every_row_empty ? " all-empty" : "") << " merged-o " << dtype_name(c.merged_o_dtype);
}

fmha_oracle::MergeShape shape_of(const MergeCase &c) {
  return {c.batch, c.queries, c.four_d ? 1 : c.groups, c.heads, c.head_dim};
}

// Logical shapes, with or without the group dim and the leading split dim.
std::vector<int64_t> o_shape(const MergeCase &c, bool split) {
  std::vector<int64_t> s = {c.batch, c.queries};
  if (!c.four_d) s.push_back(c.groups);
  for (int64_t x : {c.heads, c.head_dim}) s.push_back(x);
  if (split) s.insert(s.begin(), c.parts);
  return s;
}
std::vector<int64_t> lse_shape(const MergeCase &c, bool split) {
  std::vector<int64_t> s = {c.batch};
  if (!c.four_d) s.push_back(c.groups);
  for (int64_t x : {c.heads, c.queries}) s.push_back(x);
  if (split) s.insert(s.begin(), c.parts);
  return s;
}

std::vector<size_t> natural_order(size_t rank) {
  std::vector<size_t> order(rank);
  for (size_t i = 0; i < rank; ++i) order[i] = i;
  return order;
}

// Non-contiguous strides, varied by `variant`: the split dim (when present)
// moved inside the batch and query dims with padded rows; without it,
// padded rows or batch and query swapped. LSE is stored in O's row order.
Tensor o_tensor(const MergeCase &c, Dtype dtype, bool split, int variant) {
  const std::vector<int64_t> shape = o_shape(c, split);
  if (!c.strided || variant % 3 == 0) return Tensor(dtype, shape);
  std::vector<size_t> order = natural_order(shape.size());
  if (split)
    std::rotate(order.begin(), order.begin() + 1, order.begin() + 3);  // [B, M, N, ...]
  else if (variant % 3 == 2)
    std::swap(order[0], order[1]);  // [M, B, ...]
  return Tensor(dtype, shape, strides_for(shape, order, split || variant % 3 == 1 ? 8 : 0));
}
Tensor lse_tensor(const MergeCase &c, bool split, int variant) {
  const std::vector<int64_t> shape = lse_shape(c, split);
  if (!c.strided_lse || variant % 3 == 0) return Tensor(Dtype::f32, shape);
  // [N?, B, G?, H, M] stored as [B, M, N?, G?, H], M padded when innermost.
  std::vector<size_t> order;
  const size_t lead = split ? 1 : 0, m = shape.size() - 1;
  order.push_back(lead);
  order.push_back(m);
  if (split) order.push_back(0);
  for (size_t d = lead + 1; d < m; ++d) order.push_back(d);
  return Tensor(Dtype::f32, shape, strides_for(shape, order, 0));
}

// Writes flat row-major values into a tensor (or into t[index] when split).
void write_flat(Tensor &t, const std::vector<double> &values, int64_t index) {
  size_t k = 0;
  t.for_each_index([&](const std::vector<int64_t> &i) {
    if (index >= 0 && i[0] != index) return;
    t.set(i, values[k++]);
  });
}

struct Partials {
  std::vector<std::vector<double>> o, lse;  // as stored (read back), per partial
  std::optional<Tensor> o_stacked, lse_stacked;
  std::vector<Tensor> o_list, lse_list;
  MergeInputs inputs() const {
    MergeInputs in;
    if (o_stacked) {
      in.o_stacked = &*o_stacked;
      in.lse_stacked = &*lse_stacked;
    }
    for (const Tensor &t : o_list) in.o_list.push_back(&t);
    for (const Tensor &t : lse_list) in.lse_list.push_back(&t);
    return in;
  }
};

Partials make_partials(const MergeCase &c, std::mt19937_64 &rng) {
  const fmha_oracle::MergeShape shape = shape_of(c);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> lse_value(-4.0, 4.0), unit(0.0, 1.0);
  Partials p;
  std::vector<std::vector<double>> o_values, lse_values;
  for (int64_t i = 0; i < c.parts; ++i) {
    std::vector<double> o(static_cast<size_t>(shape.rows() * shape.head_dim)), lse(static_cast<size_t>(shape.rows()));
    for (double &x : o) x = normal(rng);
    for (double &x : lse) {
      x = lse_value(rng);
      if (c.every_row_empty || (c.empty_rows && unit(rng) < 0.25)) x = kNegInf;
    }
    if (c.empty_rows) lse[0] = kNegInf;
    o_values.push_back(o);
    lse_values.push_back(lse);
  }
  if (c.stacked) {
    p.o_stacked = o_tensor(c, c.part_dtype, true, 1);
    p.lse_stacked = lse_tensor(c, true, 1);
    p.o_stacked->poison();
    p.lse_stacked->poison();
    for (int64_t i = 0; i < c.parts; ++i) {
      write_flat(*p.o_stacked, o_values[static_cast<size_t>(i)], i);
      write_flat(*p.lse_stacked, lse_values[static_cast<size_t>(i)], i);
      p.o.push_back(fmha_oracle::slice_to_doubles(*p.o_stacked, i));
      p.lse.push_back(fmha_oracle::slice_to_doubles(*p.lse_stacked, i));
    }
  } else {
    for (int64_t i = 0; i < c.parts; ++i) {
      p.o_list.push_back(o_tensor(c, c.part_dtype, false, static_cast<int>(i)));
      p.lse_list.push_back(lse_tensor(c, false, static_cast<int>(i) + 1));
      p.o_list.back().poison();
      p.lse_list.back().poison();
      write_flat(p.o_list.back(), o_values[static_cast<size_t>(i)], -1);
      write_flat(p.lse_list.back(), lse_values[static_cast<size_t>(i)], -1);
      p.o.push_back(fmha_oracle::to_doubles(p.o_list.back()));
      p.lse.push_back(fmha_oracle::to_doubles(p.lse_list.back()));
    }
  }
  return p;
}

double relative_error(const std::vector<double> &out, const std::vector<double> &ref) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    err += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return norm > 0.0 ? std::sqrt(err / norm) : (err > 0.0 ? INFINITY : 0.0);
}

std::string case_name(const ::testing::TestParamInfo<MergeCase> &info) { return info.param.name; }

// ---------------------------------------------------------------- forward

class Merge : public ::testing::TestWithParam<MergeCase> {};

TEST_P(Merge, MatchesOracle) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  const MergeCase &c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Partials partials = make_partials(c, rng);
  const fmha_oracle::MergeShape shape = shape_of(c);
  const fmha_oracle::MergeResult ref = fmha_oracle::merge(shape, partials.o, partials.lse);

  Tensor o = o_tensor(c, c.out_dtype, false, 1), lse = lse_tensor(c, false, 1);
  o.poison();
  lse.poison();
  std::string error;
  ASSERT_EQ(merge_on_device(partials.inputs(), o, c.lse_out ? &lse : nullptr, error), FMHA_STATUS_SUCCESS) << error;

  fmha_oracle::AttentionOutput expected;
  expected.rows_b = shape.batch;
  expected.rows_m = shape.queries;
  expected.groups = shape.groups;
  expected.heads_q = shape.heads;
  expected.head_dim_v = shape.head_dim;
  expected.o = ref.o;
  expected.lse = ref.lse;
  // fp32 arithmetic on exact inputs, plus rounding to the output dtype.
  EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(o), expected, 1e-5 + rounding_error(c.out_dtype, ref.o)));
  EXPECT_TRUE(outside_untouched(o, "O"));
  if (c.lse_out) {
    EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(lse), ref.lse, 1e-5));
    EXPECT_TRUE(outside_untouched(lse, "LSE"));
  }
}

const MergeCase kMergeCases[] = {
    // name, N, B, M, G, H, D, 4-D, stacked, -, part dtype, out dtype, lse, strided, empty rows, all empty
    {"stacked_6d_f32_to_f32", 3, 2, 3, 2, 2, 64, false, true, false, Dtype::f32, Dtype::f32, true, false, false, false},
    {"stacked_5d_f32_to_bf16", 2, 2, 1, 1, 4, 128, true, true, false, Dtype::f32, Dtype::bf16, false, false, false,
     false},
    {"stacked_6d_bf16_to_f16_strided", 5, 2, 3, 2, 2, 80, false, true, false, Dtype::bf16, Dtype::f16, true, true, true,
     false},
    {"stacked_5d_f16_to_f32_strided", 8, 3, 2, 1, 4, 16, true, true, false, Dtype::f16, Dtype::f32, true, true, false,
     false},
    {"list_5d_f32_to_f16_strided", 3, 2, 3, 2, 2, 64, false, false, false, Dtype::f32, Dtype::f16, true, true, true,
     false},
    {"list_4d_bf16_to_bf16", 2, 2, 4, 1, 2, 256, true, false, false, Dtype::bf16, Dtype::bf16, false, false, false,
     false},
    {"list_5d_f16_to_f32_strided", 4, 1, 2, 3, 2, 128, false, false, false, Dtype::f16, Dtype::f32, true, true, true,
     false},
    {"list_4d_f32_strided_one_partial", 1, 2, 2, 1, 3, 64, true, false, false, Dtype::f32, Dtype::f32, true, true,
     false, false},
    {"stacked_single_partial", 1, 2, 2, 2, 2, 16, false, true, false, Dtype::f32, Dtype::f32, true, false, true, false},
    {"stacked_64_partials", 64, 2, 1, 1, 2, 16, true, true, false, Dtype::f32, Dtype::f32, true, true, true, false},
    {"every_row_empty", 3, 2, 2, 2, 2, 64, false, true, false, Dtype::f32, Dtype::bf16, true, false, false, true},
    {"list_every_row_empty", 2, 1, 2, 1, 2, 32, true, false, false, Dtype::f32, Dtype::f32, true, true, false, true},
    {"list_d512", 2, 1, 1, 2, 4, 512, false, false, false, Dtype::f32, Dtype::f32, true, false, true, false},
};

MergeCase with_strided_lse(MergeCase c, const char *name) {
  c.name = name;
  c.strided_lse = true;
  return c;
}

std::vector<MergeCase> merge_cases() {
  std::vector<MergeCase> cases(std::begin(kMergeCases), std::end(kMergeCases));
  cases.push_back(with_strided_lse(kMergeCases[2], "stacked_6d_lse_permuted"));
  cases.push_back(with_strided_lse(kMergeCases[6], "list_5d_lse_permuted"));
  cases.push_back(with_strided_lse(kMergeCases[7], "list_4d_lse_permuted"));
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Features, Merge, ::testing::ValuesIn(merge_cases()), case_name);

// --------------------------------------------------------------- backward

struct GradientTensors {
  std::optional<Tensor> o_stacked, lse_stacked;
  std::vector<Tensor> o_list, lse_list;
};

GradientTensors make_gradients(const MergeCase &c) {
  GradientTensors g;
  if (c.stacked_grads) {
    g.o_stacked = o_tensor(c, c.out_dtype, true, 2);
    g.lse_stacked = lse_tensor(c, true, 2);
    g.o_stacked->poison();
    g.lse_stacked->poison();
  } else {
    for (int64_t i = 0; i < c.parts; ++i) {
      g.o_list.push_back(o_tensor(c, c.out_dtype, false, static_cast<int>(i) + 2));
      g.lse_list.push_back(lse_tensor(c, false, static_cast<int>(i)));
      g.o_list.back().poison();
      g.lse_list.back().poison();
    }
  }
  return g;
}

// Runs fmha_merge_backward on the device; gradients are downloaded into `g`.
fmha_status merge_backward_on_device(const Partials &p, const Tensor &o, const Tensor &lse, const Tensor &grad_o,
                                     const Tensor *grad_lse, GradientTensors &g, std::string &error) {
  Device &device = device_under_test();
  std::vector<std::unique_ptr<DeviceTensor>> keep;
  auto up = [&](const Tensor &t) {
    keep.push_back(std::make_unique<DeviceTensor>(device.upload(t)));
    return keep.back().get();
  };
  fmha_merge_backward_args args = FMHA_MERGE_BACKWARD_ARGS_INIT;
  std::vector<const DLTensor *> o_list, lse_list, grad_o_list, grad_lse_list;
  std::vector<DeviceTensor *> grad_o_dev, grad_lse_dev;
  if (p.o_stacked) {
    args.o_stacked = up(*p.o_stacked)->dl();
    args.lse_stacked = up(*p.lse_stacked)->dl();
  } else {
    for (const Tensor &t : p.o_list) o_list.push_back(up(t)->dl());
    for (const Tensor &t : p.lse_list) lse_list.push_back(up(t)->dl());
    args.o_list = o_list.data();
    args.lse_list = lse_list.data();
    args.num_partials = o_list.size();
  }
  DeviceTensor *grad_o_stacked = nullptr, *grad_lse_stacked = nullptr;
  if (g.o_stacked) {
    grad_o_stacked = up(*g.o_stacked);
    grad_lse_stacked = up(*g.lse_stacked);
    args.grad_o_stacked = grad_o_stacked->dl();
    args.grad_lse_stacked = grad_lse_stacked->dl();
  } else {
    for (const Tensor &t : g.o_list) grad_o_dev.push_back(up(t));
    for (const Tensor &t : g.lse_list) grad_lse_dev.push_back(up(t));
    for (DeviceTensor *t : grad_o_dev) grad_o_list.push_back(t->dl());
    for (DeviceTensor *t : grad_lse_dev) grad_lse_list.push_back(t->dl());
    args.grad_o_list = grad_o_list.data();
    args.grad_lse_list = grad_lse_list.data();
    args.num_partials = grad_o_list.size();
  }
  args.o = up(o)->dl();
  args.lse = up(lse)->dl();
  args.grad_o = up(grad_o)->dl();
  args.grad_lse = grad_lse ? up(*grad_lse)->dl() : nullptr;
  args.stream = device.stream();
  const fmha_status status = fmha_merge_backward(&args);
  if (status != FMHA_STATUS_SUCCESS) {
    error =
        std::string("fmha_merge_backward returned ") + fmha_status_string(status) + ": " + fmha_last_error_message();
    return status;
  }
  device.synchronize();
  if (g.o_stacked) {
    device.download(*grad_o_stacked, *g.o_stacked);
    device.download(*grad_lse_stacked, *g.lse_stacked);
  } else {
    for (size_t i = 0; i < grad_o_dev.size(); ++i) {
      device.download(*grad_o_dev[i], g.o_list[i]);
      device.download(*grad_lse_dev[i], g.lse_list[i]);
    }
  }
  return status;
}

// Central differences of loss = <dO, O> + <dLSE, LSE> of the float64 merge,
// row by row (the merge is separable over rows).
fmha_oracle::MergeGradients finite_differences(const fmha_oracle::MergeShape &shape, const Partials &p,
                                               const std::vector<double> &grad_o, const std::vector<double> &grad_lse) {
  const size_t parts = p.o.size();
  const int64_t D = shape.head_dim;
  fmha_oracle::MergeGradients out;
  out.grad_o.assign(parts, std::vector<double>(p.o[0].size(), 0.0));
  out.grad_lse.assign(parts, std::vector<double>(p.lse[0].size(), 0.0));
  const fmha_oracle::MergeShape one_row{1, 1, 1, 1, D};
  const double step = 1e-6;
  for (int64_t b = 0; b < shape.batch; ++b)
    for (int64_t m = 0; m < shape.queries; ++m)
      for (int64_t g = 0; g < shape.groups; ++g)
        for (int64_t h = 0; h < shape.heads; ++h) {
          const size_t o_at = static_cast<size_t>((((b * shape.queries + m) * shape.groups + g) * shape.heads + h) * D);
          const size_t lse_at = static_cast<size_t>(((b * shape.groups + g) * shape.heads + h) * shape.queries + m);
          std::vector<std::vector<double>> o_row(parts), lse_row(parts);
          for (size_t i = 0; i < parts; ++i) {
            o_row[i].assign(p.o[i].begin() + static_cast<std::ptrdiff_t>(o_at),
                            p.o[i].begin() + static_cast<std::ptrdiff_t>(o_at) + D);
            lse_row[i] = {p.lse[i][lse_at]};
          }
          auto loss = [&](const std::vector<std::vector<double>> &po, const std::vector<std::vector<double>> &pl) {
            const fmha_oracle::MergeResult r = fmha_oracle::merge(one_row, po, pl);
            double l = (grad_lse.empty() || r.lse[0] == kNegInf) ? 0.0 : grad_lse[lse_at] * r.lse[0];
            for (int64_t d = 0; d < D; ++d) l += grad_o[o_at + static_cast<size_t>(d)] * r.o[static_cast<size_t>(d)];
            return l;
          };
          for (size_t i = 0; i < parts; ++i) {
            if (lse_row[i][0] == kNegInf) continue;  // an empty partial gets zero gradients
            for (int64_t d = 0; d < D; ++d) {
              auto plus = o_row, minus = o_row;
              plus[i][static_cast<size_t>(d)] += step;
              minus[i][static_cast<size_t>(d)] -= step;
              out.grad_o[i][o_at + static_cast<size_t>(d)] = (loss(plus, lse_row) - loss(minus, lse_row)) / (2 * step);
            }
            auto plus = lse_row, minus = lse_row;
            plus[i][0] += step;
            minus[i][0] -= step;
            out.grad_lse[i][lse_at] = (loss(o_row, plus) - loss(o_row, minus)) / (2 * step);
          }
        }
  return out;
}

std::vector<double> concatenated(const std::vector<std::vector<double>> &parts) {
  std::vector<double> all;
  for (const auto &p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

class MergeBackward : public ::testing::TestWithParam<MergeCase> {};

TEST_P(MergeBackward, MatchesFormulaAndFiniteDifferences) {
  if (!device_under_test().available()) GTEST_SKIP() << "no device";
  const MergeCase &c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const Partials partials = make_partials(c, rng);
  const fmha_oracle::MergeShape shape = shape_of(c);
  const fmha_oracle::MergeResult merged = fmha_oracle::merge(shape, partials.o, partials.lse);

  // The forward merge's outputs as the caller would hold them, and random
  // incoming gradients.
  Tensor o = o_tensor(c, c.merged_o_dtype, false, 0), lse = lse_tensor(c, false, 0);
  write_flat(o, merged.o, -1);
  write_flat(lse, merged.lse, -1);
  Tensor grad_o = o_tensor(c, Dtype::f32, false, 1), grad_lse = lse_tensor(c, false, 2);
  grad_o.fill_normal(rng);
  grad_lse.fill_normal(rng);
  GradientTensors grads = make_gradients(c);
  std::string error;
  ASSERT_EQ(merge_backward_on_device(partials, o, lse, grad_o, c.lse_out ? &grad_lse : nullptr, grads, error),
            FMHA_STATUS_SUCCESS)
      << error;

  std::vector<std::vector<double>> got_o, got_lse;
  for (int64_t i = 0; i < c.parts; ++i) {
    got_o.push_back(grads.o_stacked ? fmha_oracle::slice_to_doubles(*grads.o_stacked, i)
                                    : fmha_oracle::to_doubles(grads.o_list[static_cast<size_t>(i)]));
    got_lse.push_back(grads.lse_stacked ? fmha_oracle::slice_to_doubles(*grads.lse_stacked, i)
                                        : fmha_oracle::to_doubles(grads.lse_list[static_cast<size_t>(i)]));
  }
  if (grads.o_stacked) {
    EXPECT_TRUE(outside_untouched(*grads.o_stacked, "grad_o_stacked"));
    EXPECT_TRUE(outside_untouched(*grads.lse_stacked, "grad_lse_stacked"));
  } else {
    for (const Tensor &t : grads.o_list) EXPECT_TRUE(outside_untouched(t, "grad_o_list[i]"));
    for (const Tensor &t : grads.lse_list) EXPECT_TRUE(outside_untouched(t, "grad_lse_list[i]"));
  }
  const std::vector<double> d_o = fmha_oracle::to_doubles(grad_o);
  const std::vector<double> d_lse = c.lse_out ? fmha_oracle::to_doubles(grad_lse) : std::vector<double>{};
  const fmha_oracle::MergeGradients formula = fmha_oracle::merge_backward(
      shape, partials.o, partials.lse, fmha_oracle::to_doubles(o), fmha_oracle::to_doubles(lse), d_o, d_lse);
  const double o_bound = 1e-5 + rounding_error(c.out_dtype, concatenated(formula.grad_o)), lse_bound = 1e-4;
  EXPECT_LE(relative_error(concatenated(got_o), concatenated(formula.grad_o)), o_bound) << "grad O vs the formula";
  EXPECT_LE(relative_error(concatenated(got_lse), concatenated(formula.grad_lse)), lse_bound)
      << "grad LSE vs the formula";
  // Rows whose merged LSE is -inf (or partials that are empty) get exactly 0.
  for (int64_t i = 0; i < c.parts; ++i)
    for (size_t r = 0; r < got_lse[static_cast<size_t>(i)].size(); ++r)
      if (partials.lse[static_cast<size_t>(i)][r] == kNegInf) {
        EXPECT_EQ(got_lse[static_cast<size_t>(i)][r], 0.0) << "partial " << i << " row " << r;
      }

  // The finite differences see the exact merge; a merged O rounded to bf16
  // legitimately moves dLSE_i away from them, so only f32 inputs compare.
  if (c.merged_o_dtype == Dtype::f32) {
    const fmha_oracle::MergeGradients numeric = finite_differences(shape, partials, d_o, d_lse);
    EXPECT_LE(relative_error(concatenated(got_o), concatenated(numeric.grad_o)), o_bound + 1e-6)
        << "grad O vs finite differences";
    EXPECT_LE(relative_error(concatenated(got_lse), concatenated(numeric.grad_lse)), lse_bound)
        << "grad LSE vs finite differences";
  }
}

MergeCase backward_case(const char *name, int64_t parts, int64_t groups, int64_t head_dim, bool four_d, bool stacked,
                        bool stacked_grads, Dtype part_dtype, Dtype grad_dtype, bool grad_lse, bool strided,
                        bool empty_rows, Dtype merged_o_dtype = Dtype::f32) {
  MergeCase c{name,    parts,         2,          3,          groups,   2,       head_dim,   four_d,
              stacked, stacked_grads, part_dtype, grad_dtype, grad_lse, strided, empty_rows, false};
  c.merged_o_dtype = merged_o_dtype;
  return c;
}

const MergeCase kBackwardCases[] = {
    backward_case("stacked_6d_f32", 3, 2, 64, false, true, true, Dtype::f32, Dtype::f32, true, false, false),
    backward_case("list_5d_f32_no_grad_lse", 2, 1, 32, true, false, false, Dtype::f32, Dtype::f32, false, true, true),
    backward_case("stacked_in_list_grads_bf16", 4, 2, 16, false, true, false, Dtype::bf16, Dtype::f32, true, true,
                  true),
    backward_case("list_in_stacked_grads_f16", 3, 1, 128, true, false, true, Dtype::f16, Dtype::bf16, true, false,
                  true),
    backward_case("stacked_single_partial", 1, 2, 16, false, true, true, Dtype::f32, Dtype::f32, true, true, false),
    backward_case("stacked_merged_o_bf16", 8, 1, 80, true, true, true, Dtype::f32, Dtype::f32, true, false, true,
                  Dtype::bf16),
};

std::vector<MergeCase> backward_cases() {
  std::vector<MergeCase> cases(std::begin(kBackwardCases), std::end(kBackwardCases));
  cases.push_back(with_strided_lse(kBackwardCases[1], "list_lse_permuted"));
  cases.push_back(with_strided_lse(kBackwardCases[2], "stacked_lse_permuted"));
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Features, MergeBackward, ::testing::ValuesIn(backward_cases()), case_name);

}  // namespace
}  // namespace fmha_test
