// The CUDA backend's fmha_merge / fmha_merge_backward: the shared GPU
// implementation (backends/gpu/merge.h) built for CUDA.
#ifndef FMHA_SPLITK_BACKENDS_CUDA_MERGE_H_
#define FMHA_SPLITK_BACKENDS_CUDA_MERGE_H_

#include "backends/gpu/merge.h"

namespace fmha::cuda {

using fmha::gpu::merge;
using fmha::gpu::merge_backward;

}  // namespace fmha::cuda

#endif  // FMHA_SPLITK_BACKENDS_CUDA_MERGE_H_
