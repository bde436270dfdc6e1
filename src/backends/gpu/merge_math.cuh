// Device arithmetic for merging partial attention results (O_i, LSE_i):
//   LSE = log sum_i exp(LSE_i),  O = sum_i exp(LSE_i - LSE) O_i,
// with every LSE_i = -inf giving O = 0 and LSE = -inf (never NaN), while a
// NaN in any input still reaches the output (tests must see it).
//
// In two passes (the merge kernels and the split combine):
// propagating_max over the LSE_i, then lse_of(max, sum of exp_relative),
// then merge_weight(LSE_i, LSE) per partial. Order-fixed and atomic-free,
// hence deterministic. Plain arithmetic: the same code on CUDA and HIP.
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

// max(a, b) that returns NaN when either is NaN (fmaxf returns the other
// operand), so that a NaN LSE_i cannot hide behind an all -inf maximum.
__device__ __forceinline__ float propagating_max(float a, float b) { return (a != a || a > b) ? a : b; }

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_MERGE_MATH_CUH_
