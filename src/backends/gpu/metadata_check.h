// The host-side entry of checked mode (metadata_check.cuh has the rest):
// what plugin.cpp, a host-compiled source, needs to answer
// fmha_splitk_check_status.
#ifndef FMHA_SPLITK_BACKENDS_GPU_METADATA_CHECK_H_
#define FMHA_SPLITK_BACKENDS_GPU_METADATA_CHECK_H_

#include "backends/gpu/vendor.h"
#include "core/backend_api.h"

namespace fmha::gpu {

// fmha_splitk_check_status: waits for `stream`, reads the record the last
// checked run left in `workspace`, clears it; INVALID_ARGUMENT with a
// message naming the sequence, field and value when a violation was
// recorded; SUCCESS for a plan without FMHA_FLAG_CHECKED.
fmha_status read_check_status(const fmha_plan_data &plan, void *workspace, Stream stream, fmha_msg msg);

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_METADATA_CHECK_H_
