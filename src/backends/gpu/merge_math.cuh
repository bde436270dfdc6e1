// Device arithmetic for merging partial attention results (O_i, LSE_i):
//   LSE = log sum_i exp(LSE_i),  O = sum_i exp(LSE_i - LSE) O_i,
// with every LSE_i = -inf giving O = 0 and LSE = -inf (never NaN), while a
// NaN in any input still reaches the output (tests must see it).
//
// Two ways to use it:
//  - two passes (the merge kernels): propagating_max over the LSE_i, then
//    lse_of(max, sum of exp_relative), then merge_weight(LSE_i, LSE) per
//    partial;
//  - one pass (a kernel that streams partials): OnlineLse::push per partial,
//    rescaling its accumulator, then OnlineLse::lse() / inv_sum().
// Both are order-fixed and atomic-free, hence deterministic. Plain
// arithmetic: the same code on CUDA and HIP.
#ifndef FMHA_SPLITK_BACKENDS_GPU_MERGE_MATH_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_MERGE_MATH_CUH_

#include <cmath>

#include "backends/gpu/vendor.h"

namespace fmha::gpu {

constexpr float kNegInf = -INFINITY;

// exp(lse_i - max) for the sum that defines LSE. A max of -inf means every
// partial so far is empty; returning 0 avoids exp(-inf - -inf) = NaN.
__device__ __forceinline__ float exp_relative(float lse_i, float max_lse) {
  return max_lse == kNegInf ? 0.f : expf(lse_i - max_lse);
}

// LSE from the maximum LSE_i and sum_i exp(LSE_i - max). The sum is 0 only
// when no partial holds a key (the largest one contributes exp(0) = 1), so
// that case gives -inf; a NaN sum stays NaN.
__device__ __forceinline__ float lse_of(float max_lse, float sum_exp) {
  return sum_exp == 0.f ? kNegInf : max_lse + logf(sum_exp);
}

// The weight exp(LSE_i - LSE) of partial i in the merged output and in the
// merge backward. LSE = -inf (all partials empty) gives weight 0, so O = 0.
__device__ __forceinline__ float merge_weight(float lse_i, float lse) {
  return lse == kNegInf ? 0.f : expf(lse_i - lse);
}

// Running log-sum-exp over partials seen one at a time. The caller keeps an
// accumulator acc = sum_i exp(LSE_i - max) O_i:
//   float w; float r = state.push(lse_i, &w); acc = acc * r + w * O_i;
// and finishes with O = acc * state.inv_sum(), LSE = state.lse().
struct OnlineLse {
  float max_lse = kNegInf;
  float sum_exp = 0.f;  // sum_i exp(LSE_i - max_lse)

  // Adds partial `lse_i`: writes its weight relative to the new maximum and
  // returns the factor that rescales what was accumulated against the old
  // maximum. An empty partial (-inf) changes nothing.
  __device__ __forceinline__ float push(float lse_i, float *weight_i) {
    if (lse_i == kNegInf) {
      *weight_i = 0.f;
      return 1.f;
    }
    // fmaxf would drop a NaN; keeping max_lse then lets exp(NaN) poison the
    // weight and the sum instead.
    const float new_max = lse_i > max_lse ? lse_i : max_lse;
    const float rescale = exp_relative(max_lse, new_max);
    *weight_i = expf(lse_i - new_max);
    sum_exp = sum_exp * rescale + *weight_i;
    max_lse = new_max;
    return rescale;
  }

  // Folds another running state into this one (a fixed reduction tree over
  // threads stays deterministic); writes the factors that rescale this
  // state's accumulator and the other's before they are added.
  __device__ __forceinline__ void combine(const OnlineLse &other,
                                          float *rescale_self,
                                          float *rescale_other) {
    const float new_max = other.max_lse > max_lse ? other.max_lse : max_lse;
    *rescale_self = exp_relative(max_lse, new_max);
    *rescale_other = exp_relative(other.max_lse, new_max);
    sum_exp = sum_exp * *rescale_self + other.sum_exp * *rescale_other;
    max_lse = new_max;
  }

  __device__ __forceinline__ float lse() const {
    return lse_of(max_lse, sum_exp);
  }

  // 1 / sum, or 0 when no partial held a key (so O = acc * inv_sum() = 0).
  __device__ __forceinline__ float inv_sum() const {
    return sum_exp == 0.f ? 0.f : 1.f / sum_exp;
  }
};

// max(a, b) that returns NaN when either is NaN (fmaxf returns the other
// operand), so that a NaN LSE_i cannot hide behind an all -inf maximum.
__device__ __forceinline__ float propagating_max(float a, float b) {
  return (a != a || a > b) ? a : b;
}

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_MERGE_MATH_CUH_
