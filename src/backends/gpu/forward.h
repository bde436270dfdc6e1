// Entry point of the CUDA split-K forward path (kernels in forward*.cu).
#ifndef FMHA_SPLITK_BACKENDS_GPU_FORWARD_H_
#define FMHA_SPLITK_BACKENDS_GPU_FORWARD_H_

#include "backends/gpu/vendor.h"
#include "core/backend_api.h"

namespace fmha::gpu {

// Plan-time: choose the forward kernel configuration for plan->problem on
// plan->device, store it in plan->backend_private / kernel_name, and grow
// the workspace for device-side scheduling metadata. NOT_SUPPORTED (with a
// message) for problems the kernels do not handle yet.
fmha_status plan_forward(fmha_plan_data *plan, fmha_msg msg);

// Run-time: launches the scheduling pass (if any), the split-K forward
// kernel and the merge of split partials on `stream`. No allocation, no
// host synchronisation (graph capturable).
fmha_status run_forward(const fmha_plan_data &plan, const fmha_run_views &views, Stream stream, fmha_msg msg);

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_FORWARD_H_
