// Turning CUDA runtime errors into fmha_status values with a message: the
// CUDA backend's names for the shared helpers of backends/gpu/status.h.
//
// Every CUDA call in this backend goes through FMHA_CUDA_CHECK (or
// status_from) so that a failure reaches the caller as DEVICE_ERROR (or
// OUT_OF_MEMORY for a failed allocation) with the operation that failed and
// the driver's own text, e.g.
//   "cudaMemsetAsync(o) failed: cudaErrorInvalidValue (invalid argument)".
#ifndef FMHA_SPLITK_BACKENDS_CUDA_CUDA_CHECK_H_
#define FMHA_SPLITK_BACKENDS_CUDA_CUDA_CHECK_H_

#include "backends/gpu/status.h"

namespace fmha::cuda {

using fmha::gpu::launch_status;
using fmha::gpu::status_from;
using fmha::gpu::write_msg;

}  // namespace fmha::cuda

// Evaluates a cudaError_t expression; on failure writes the message and
// returns the status from the enclosing function (which must return
// fmha_status).
#define FMHA_CUDA_CHECK(call, msg) FMHA_GPU_CHECK(call, msg)

// After a <<<...>>> launch: returns the launch error, if any, naming the
// kernel.
#define FMHA_CUDA_CHECK_LAUNCH(kernel_name, msg) FMHA_GPU_CHECK_LAUNCH(kernel_name, msg)

#endif  // FMHA_SPLITK_BACKENDS_CUDA_CUDA_CHECK_H_
