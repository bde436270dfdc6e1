// fmha_merge and fmha_merge_backward on CUDA device memory against the
// float64 oracle: stacked and list forms, any strides (padded, permuted,
// interleaved, misaligned for wide loads), f16 / bf16 / f32, 4-D and 5-D,
// rows where some or all partials are empty (-inf), partial counts across
// the backend's per-launch limits.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "features/harness.h"
#include "gpu/cuda_util.h"
#include "oracle/oracle.h"

namespace fmha_test {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct MergeCase {
  std::string name;
  int64_t partials;
  int64_t batch, queries, groups, heads, head_dim;
  Dtype part_dtype;  // partial O (and, backward, its gradient)
  Dtype out_dtype;   // merged O (and, backward, dO)
  bool stacked;      // partials stacked (else a list)
  bool strided = false;
  int64_t pad = 0;  // elements added to each O row (1 defeats wide loads)
  bool four_d = false;
  bool want_lse = true;  // forward: merged LSE requested; backward: dLSE given
  bool stacked_grads = true;  // backward: gradients stacked (else a list)
};

std::string case_name(const ::testing::TestParamInfo<MergeCase> &info) { return info.param.name; }

// Strides of `shape` stored in the physical dim order `order` (outermost
// first), the innermost physical dim padded by `pad` elements.
std::vector<int64_t> strides_for(const std::vector<int64_t> &shape, const std::vector<size_t> &order, int64_t pad) {
  std::vector<int64_t> strides(shape.size(), 0);
  int64_t running = 1;
  for (size_t k = order.size(); k-- > 0;) {
    strides[order[k]] = running;
    running *= std::max<int64_t>(shape[order[k]], 1) + (k + 1 == order.size() ? pad : 0);
  }
  return strides;
}

std::vector<size_t> identity(size_t rank) {
  std::vector<size_t> order(rank);
  std::iota(order.begin(), order.end(), size_t{0});
  return order;
}

// `order` with dim `dim` moved to the front.
std::vector<size_t> outermost(std::vector<size_t> order, size_t dim) {
  order.erase(std::find(order.begin(), order.end(), dim));
  order.insert(order.begin(), dim);
  return order;
}

// Relative error of `out` against `ref`, with no NaN, and exact zeros where
// the oracle has exact zeros (empty partials and rows).
::testing::AssertionResult close_to(const std::vector<double> &out, const std::vector<double> &ref, double bound,
                                    const char *what) {
  if (out.size() != ref.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]))
      return ::testing::AssertionFailure() << what << ": element " << i << " is " << out[i] << " (oracle " << ref[i]
                                           << ")";
    if (ref[i] == 0.0 && out[i] != 0.0)
      return ::testing::AssertionFailure() << what << ": element " << i << " is " << out[i]
                                           << " where the oracle has exactly 0";
    err += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  const double rel = norm > 0.0 ? std::sqrt(err / norm) : std::sqrt(err);
  if (!(rel <= bound)) return ::testing::AssertionFailure() << what << ": relative error " << rel << " > " << bound;
  return ::testing::AssertionSuccess();
}

// Shapes of the case's tensors, with or without the group dim.
struct Shapes {
  std::vector<int64_t> o, lse;
  std::vector<int64_t> o_index(int64_t b, int64_t m, int64_t g, int64_t h, int64_t d, bool four_d) const {
    return four_d ? std::vector<int64_t>{b, m, h, d} : std::vector<int64_t>{b, m, g, h, d};
  }
  std::vector<int64_t> lse_index(int64_t b, int64_t g, int64_t h, int64_t m, bool four_d) const {
    return four_d ? std::vector<int64_t>{b, h, m} : std::vector<int64_t>{b, g, h, m};
  }
};

Shapes shapes_of(const MergeCase &c) {
  Shapes s;
  s.o = c.four_d ? std::vector<int64_t>{c.batch, c.queries, c.heads, c.head_dim}
                 : std::vector<int64_t>{c.batch, c.queries, c.groups, c.heads, c.head_dim};
  s.lse = c.four_d ? std::vector<int64_t>{c.batch, c.heads, c.queries}
                   : std::vector<int64_t>{c.batch, c.groups, c.heads, c.queries};
  return s;
}

std::vector<int64_t> with_split(int64_t n, std::vector<int64_t> shape) {
  shape.insert(shape.begin(), n);
  return shape;
}

fmha_oracle::MergeShape merge_shape(const MergeCase &c) {
  fmha_oracle::MergeShape s;
  s.batch = c.batch;
  s.queries = c.queries;
  s.groups = c.groups;
  s.heads = c.heads;
  s.head_dim = c.head_dim;
  return s;
}

// One set of tensors shaped like the partials, stacked or as a list, each
// list entry with its own layout when the case is strided.
struct PartialTensors {
  std::optional<Tensor> o_stacked, lse_stacked;
  std::vector<Tensor> o_list, lse_list;

  // The oracle's view of partial i (after the tensors' own rounding).
  std::vector<double> o_values(int64_t i) const {
    return o_stacked ? fmha_oracle::slice_to_doubles(*o_stacked, i) : fmha_oracle::to_doubles(o_list[i]);
  }
  std::vector<double> lse_values(int64_t i) const {
    return lse_stacked ? fmha_oracle::slice_to_doubles(*lse_stacked, i) : fmha_oracle::to_doubles(lse_list[i]);
  }
  std::vector<const Tensor *> o_ptrs() const {
    std::vector<const Tensor *> p;
    for (const Tensor &t : o_list) p.push_back(&t);
    return p;
  }
  std::vector<const Tensor *> lse_ptrs() const {
    std::vector<const Tensor *> p;
    for (const Tensor &t : lse_list) p.push_back(&t);
    return p;
  }
};

PartialTensors shaped_like_partials(const MergeCase &c, bool stacked, Dtype o_dtype) {
  const Shapes s = shapes_of(c);
  PartialTensors t;
  if (stacked) {
    const std::vector<int64_t> o_shape = with_split(c.partials, s.o), lse_shape = with_split(c.partials, s.lse);
    // Strided: the split dim inside the batch dim, so the stacked stride is
    // smaller than the batch stride.
    const std::vector<size_t> o_order = c.strided ? outermost(identity(o_shape.size()), 1) : identity(o_shape.size());
    const std::vector<size_t> lse_order =
        c.strided ? outermost(identity(lse_shape.size()), 1) : identity(lse_shape.size());
    t.o_stacked.emplace(o_dtype, o_shape, strides_for(o_shape, o_order, c.pad));
    t.lse_stacked.emplace(Dtype::f32, lse_shape, strides_for(lse_shape, lse_order, 0));
    t.o_stacked->poison();
    t.lse_stacked->poison();
    return t;
  }
  for (int64_t i = 0; i < c.partials; ++i) {
    std::vector<size_t> o_order = identity(s.o.size()), lse_order = identity(s.lse.size());
    if (c.strided && i % 3 == 1) o_order = outermost(o_order, s.o.size() - 2);  // heads outermost
    if (c.strided && i % 2 == 1) lse_order = outermost(lse_order, s.lse.size() - 1);  // queries outermost
    const int64_t pad = c.strided && i % 3 == 2 ? 0 : c.pad;
    t.o_list.emplace_back(o_dtype, s.o, strides_for(s.o, o_order, pad));
    t.lse_list.emplace_back(Dtype::f32, s.lse, strides_for(s.lse, lse_order, 0));
    t.o_list.back().poison();
    t.lse_list.back().poison();
  }
  return t;
}

// Random partials: LSE ~ N(0, 4^2) with about a fifth of the entries -inf
// and every seventh row empty in every partial; an empty partial's O holds
// large garbage, which must not reach the result.
PartialTensors random_partials(const MergeCase &c, std::mt19937_64 &rng) {
  PartialTensors t = shaped_like_partials(c, c.stacked, c.part_dtype);
  const Shapes s = shapes_of(c);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::bernoulli_distribution empty(0.2);
  for (int64_t i = 0; i < c.partials; ++i)
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t m = 0; m < c.queries; ++m)
        for (int64_t g = 0; g < c.groups; ++g)
          for (int64_t h = 0; h < c.heads; ++h) {
            const int64_t row = ((b * c.queries + m) * c.groups + g) * c.heads + h;
            const bool is_empty = row % 7 == 3 || empty(rng);
            const double lse = is_empty ? kNegInf : 4.0 * normal(rng);
            std::vector<int64_t> li = s.lse_index(b, g, h, m, c.four_d);
            if (t.lse_stacked) li.insert(li.begin(), i);
            (t.lse_stacked ? *t.lse_stacked : t.lse_list[i]).set(li, lse);
            for (int64_t d = 0; d < c.head_dim; ++d) {
              std::vector<int64_t> oi = s.o_index(b, m, g, h, d, c.four_d);
              if (t.o_stacked) oi.insert(oi.begin(), i);
              (t.o_stacked ? *t.o_stacked : t.o_list[i]).set(oi, is_empty ? 1.0e4 : normal(rng));
            }
          }
  return t;
}

Tensor output_o(const MergeCase &c, Dtype dtype) {
  const Shapes s = shapes_of(c);
  Tensor o(dtype, s.o, strides_for(s.o, identity(s.o.size()), c.pad));
  o.poison();
  return o;
}

Tensor output_lse(const MergeCase &c) {
  Tensor lse(Dtype::f32, shapes_of(c).lse);
  lse.poison();
  return lse;
}

// ------------------------------------------------------------- forward --

class CudaMerge : public ::testing::TestWithParam<MergeCase> {};

TEST_P(CudaMerge, MatchesOracle) {
  FMHA_SKIP_WITHOUT_CUDA();
  const MergeCase &c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const PartialTensors parts = random_partials(c, rng);

  std::vector<std::vector<double>> o_parts, lse_parts;
  for (int64_t i = 0; i < c.partials; ++i) {
    o_parts.push_back(parts.o_values(i));
    lse_parts.push_back(parts.lse_values(i));
  }
  const fmha_oracle::MergeResult ref = fmha_oracle::merge(merge_shape(c), o_parts, lse_parts);

  MergeInputs in;
  if (c.stacked) {
    in.o_stacked = &*parts.o_stacked;
    in.lse_stacked = &*parts.lse_stacked;
  } else {
    in.o_list = parts.o_ptrs();
    in.lse_list = parts.lse_ptrs();
  }
  Tensor o = output_o(c, c.out_dtype), lse = output_lse(c);
  std::string error;
  ASSERT_EQ(merge_on_device(in, o, c.want_lse ? &lse : nullptr, error), FMHA_STATUS_SUCCESS) << error;

  fmha_oracle::AttentionOutput as_attention;
  as_attention.rows_b = c.batch;
  as_attention.rows_m = c.queries;
  as_attention.groups = c.groups;
  as_attention.heads_q = c.heads;
  as_attention.head_dim_v = c.head_dim;
  as_attention.o = ref.o;
  as_attention.lse = ref.lse;
  EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(o), as_attention, 1e-5 + rounding_error(c.out_dtype, ref.o)));
  EXPECT_TRUE(outside_untouched(o, "O"));
  if (c.want_lse) {
    EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(lse), ref.lse));
    EXPECT_TRUE(outside_untouched(lse, "LSE"));
  }

  // Run to run: the same bits.
  Tensor again = output_o(c, c.out_dtype);
  ASSERT_EQ(merge_on_device(in, again, nullptr, error), FMHA_STATUS_SUCCESS) << error;
  EXPECT_TRUE(bitwise_equal(again, o));
}

INSTANTIATE_TEST_SUITE_P(
    Forms, CudaMerge,
    ::testing::Values(
        MergeCase{"stacked_f32_to_bf16", 4, 3, 1, 1, 8, 128, Dtype::f32, Dtype::bf16, true},
        MergeCase{"stacked_300_interleaved", 300, 2, 2, 2, 4, 64, Dtype::f32, Dtype::f32, true, true},
        MergeCase{"stacked_one_partial", 1, 2, 3, 1, 2, 24, Dtype::f32, Dtype::f32, true},
        MergeCase{"stacked_d576_bf16_parts", 7, 2, 1, 1, 16, 576, Dtype::bf16, Dtype::bf16, true},
        MergeCase{"stacked_padded_rows_4d", 5, 3, 2, 1, 8, 128, Dtype::f16, Dtype::f32, true, true, 8, true},
        MergeCase{"list_f16_strided", 5, 2, 3, 1, 4, 72, Dtype::f16, Dtype::f16, false, true, 8},
        MergeCase{"list_64_bf16_no_lse", 64, 1, 1, 1, 16, 128, Dtype::bf16, Dtype::f32, false, false, 0, false,
                  false},
        MergeCase{"list_misaligned_4d", 3, 4, 1, 1, 6, 20, Dtype::f32, Dtype::f16, false, true, 1, true},
        MergeCase{"list_groups_d256", 9, 2, 2, 3, 2, 256, Dtype::f32, Dtype::bf16, false, true}),
    case_name);

TEST(CudaMergeLimits, LongListIsRefusedWithAHint) {
  FMHA_SKIP_WITHOUT_CUDA();
  MergeCase c{"list_65", 65, 1, 1, 1, 2, 64, Dtype::f32, Dtype::f32, false};
  std::mt19937_64 rng(fresh_seed());
  const PartialTensors parts = random_partials(c, rng);
  MergeInputs in;
  in.o_list = parts.o_ptrs();
  in.lse_list = parts.lse_ptrs();
  Tensor o = output_o(c, c.out_dtype);
  std::string error;
  EXPECT_EQ(merge_on_device(in, o, nullptr, error), FMHA_STATUS_NOT_SUPPORTED);
  EXPECT_NE(error.find("stacked"), std::string::npos) << error;
}

// ------------------------------------------------------------ backward --

class CudaMergeBackward : public ::testing::TestWithParam<MergeCase> {};

TEST_P(CudaMergeBackward, MatchesOracle) {
  FMHA_SKIP_WITHOUT_CUDA();
  const MergeCase &c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  const PartialTensors parts = random_partials(c, rng);
  const fmha_oracle::MergeShape shape = merge_shape(c);

  std::vector<std::vector<double>> o_parts, lse_parts;
  for (int64_t i = 0; i < c.partials; ++i) {
    o_parts.push_back(parts.o_values(i));
    lse_parts.push_back(parts.lse_values(i));
  }
  // The merged (O, LSE) the forward would have produced, in the case's
  // dtype; the oracle then reads the same rounded values.
  const fmha_oracle::MergeResult merged = fmha_oracle::merge(shape, o_parts, lse_parts);
  Tensor o = output_o(c, c.out_dtype), lse = output_lse(c), grad_o = output_o(c, c.out_dtype),
         grad_lse = output_lse(c);
  std::normal_distribution<double> normal(0.0, 1.0);
  {
    size_t e = 0, r = 0;
    o.for_each_index([&](const std::vector<int64_t> &i) { o.set(i, merged.o[e++]); });
    lse.for_each_index([&](const std::vector<int64_t> &i) { lse.set(i, merged.lse[r++]); });
    grad_o.for_each_index([&](const std::vector<int64_t> &i) { grad_o.set(i, normal(rng)); });
    grad_lse.for_each_index([&](const std::vector<int64_t> &i) { grad_lse.set(i, normal(rng)); });
  }
  const fmha_oracle::MergeGradients ref = fmha_oracle::merge_backward(
      shape, o_parts, lse_parts, fmha_oracle::to_doubles(o), fmha_oracle::to_doubles(lse),
      fmha_oracle::to_doubles(grad_o), c.want_lse ? fmha_oracle::to_doubles(grad_lse) : std::vector<double>{});

  PartialTensors grads = shaped_like_partials(c, c.stacked_grads, c.part_dtype);
  Device &device = device_under_test();
  std::vector<DeviceTensor> keep;
  keep.reserve(8 + 4 * static_cast<size_t>(c.partials));
  auto up = [&](const Tensor &t) {
    keep.push_back(device.upload(t));
    return keep.back().dl();
  };
  fmha_merge_backward_args args = FMHA_MERGE_BACKWARD_ARGS_INIT;
  std::vector<const DLTensor *> o_list, lse_list, grad_o_list, grad_lse_list;
  if (c.stacked) {
    args.o_stacked = up(*parts.o_stacked);
    args.lse_stacked = up(*parts.lse_stacked);
  } else {
    for (const Tensor &t : parts.o_list) o_list.push_back(up(t));
    for (const Tensor &t : parts.lse_list) lse_list.push_back(up(t));
    args.o_list = o_list.data();
    args.lse_list = lse_list.data();
  }
  // Where the written gradients are in `keep`, partial by partial (the
  // stacked form: one entry each).
  std::vector<size_t> grad_o_slots, grad_lse_slots;
  auto up_grad = [&](const Tensor &t, std::vector<size_t> &slots) {
    const DLTensor *dl = up(t);
    slots.push_back(keep.size() - 1);
    return dl;
  };
  if (c.stacked_grads) {
    args.grad_o_stacked = up_grad(*grads.o_stacked, grad_o_slots);
    args.grad_lse_stacked = up_grad(*grads.lse_stacked, grad_lse_slots);
  } else {
    for (const Tensor &t : grads.o_list) grad_o_list.push_back(up_grad(t, grad_o_slots));
    for (const Tensor &t : grads.lse_list) grad_lse_list.push_back(up_grad(t, grad_lse_slots));
    args.grad_o_list = grad_o_list.data();
    args.grad_lse_list = grad_lse_list.data();
  }
  if (!c.stacked || !c.stacked_grads) args.num_partials = static_cast<size_t>(c.partials);
  args.o = up(o);
  args.lse = up(lse);
  args.grad_o = up(grad_o);
  args.grad_lse = c.want_lse ? up(grad_lse) : nullptr;
  args.stream = device.stream();
  fmha_check(fmha_merge_backward(&args), "fmha_merge_backward");
  device.synchronize();

  if (c.stacked_grads) {
    device.download(keep[grad_o_slots[0]], *grads.o_stacked);
    device.download(keep[grad_lse_slots[0]], *grads.lse_stacked);
  } else {
    for (int64_t i = 0; i < c.partials; ++i) {
      device.download(keep[grad_o_slots[static_cast<size_t>(i)]], grads.o_list[i]);
      device.download(keep[grad_lse_slots[static_cast<size_t>(i)]], grads.lse_list[i]);
    }
  }
  std::vector<double> got_o, got_lse, want_o, want_lse;
  for (int64_t i = 0; i < c.partials; ++i) {
    want_o.insert(want_o.end(), ref.grad_o[i].begin(), ref.grad_o[i].end());
    want_lse.insert(want_lse.end(), ref.grad_lse[i].begin(), ref.grad_lse[i].end());
  }
  for (int64_t i = 0; i < c.partials; ++i) {
    const std::vector<double> go = grads.o_values(i), gl = grads.lse_values(i);
    got_o.insert(got_o.end(), go.begin(), go.end());
    got_lse.insert(got_lse.end(), gl.begin(), gl.end());
  }
  EXPECT_TRUE(close_to(got_o, want_o, 1e-5 + rounding_error(c.part_dtype, want_o), "grad O_i"));
  EXPECT_TRUE(close_to(got_lse, want_lse, 2e-4, "grad LSE_i"));
  if (c.stacked_grads) {
    EXPECT_TRUE(outside_untouched(*grads.o_stacked, "stacked grad O"));
    EXPECT_TRUE(outside_untouched(*grads.lse_stacked, "stacked grad LSE"));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forms, CudaMergeBackward,
    ::testing::Values(
        MergeCase{"stacked_f32", 4, 3, 1, 1, 8, 128, Dtype::f32, Dtype::f32, true},
        MergeCase{"list_bf16_no_dlse", 6, 2, 2, 1, 4, 64, Dtype::bf16, Dtype::f32, false, true, 8, false, false,
                  false},
        MergeCase{"stacked_in_list_grads_d576", 40, 1, 1, 1, 4, 576, Dtype::f16, Dtype::bf16, true, false, 0, false,
                  true, false},
        MergeCase{"stacked_100_interleaved", 100, 2, 1, 2, 2, 32, Dtype::f32, Dtype::f32, true, true},
        MergeCase{"list_misaligned_4d", 3, 2, 3, 1, 5, 40, Dtype::f32, Dtype::f16, false, true, 1, true}),
    case_name);

}  // namespace
}  // namespace fmha_test
