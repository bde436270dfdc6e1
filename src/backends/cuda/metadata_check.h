// The host-side entry of checked mode (metadata_check.cuh has the rest):
// what plugin.cpp, a host-compiled source, needs to answer
// fmha_splitk_check_status.
#ifndef FMHA_SPLITK_BACKENDS_CUDA_METADATA_CHECK_H_
#define FMHA_SPLITK_BACKENDS_CUDA_METADATA_CHECK_H_

#include <cuda_runtime.h>

#include "core/backend_api.h"

namespace fmha::cuda {

// fmha_splitk_check_status: waits for `stream`, reads the record the last
// checked run left in `workspace`, clears it; INVALID_ARGUMENT with a
// message naming the sequence, field and value when a violation was
// recorded; SUCCESS for a plan without FMHA_FLAG_CHECKED.
fmha_status read_check_status(const fmha_plan_data &plan, void *workspace, cudaStream_t stream, fmha_msg msg);

}  // namespace fmha::cuda

#endif  // FMHA_SPLITK_BACKENDS_CUDA_METADATA_CHECK_H_
