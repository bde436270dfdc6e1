// The merge arithmetic of backends/gpu/merge_math.cuh under the CUDA
// backend's names, for the CUDA-only kernels (the split-K forward).
#ifndef FMHA_SPLITK_BACKENDS_CUDA_MERGE_MATH_CUH_
#define FMHA_SPLITK_BACKENDS_CUDA_MERGE_MATH_CUH_

#include "backends/gpu/merge_math.cuh"

namespace fmha::cuda {

using fmha::gpu::exp_relative;
using fmha::gpu::lse_of;
using fmha::gpu::merge_weight;

}  // namespace fmha::cuda

#endif  // FMHA_SPLITK_BACKENDS_CUDA_MERGE_MATH_CUH_
