// A GPU backend's fmha_merge / fmha_merge_backward (DESIGN 5.8, 5.9): one
// implementation (merge.cu) for CUDA and HIP.
#ifndef FMHA_SPLITK_BACKENDS_GPU_MERGE_H_
#define FMHA_SPLITK_BACKENDS_GPU_MERGE_H_

#include "backends/gpu/vendor.h"
#include "core/backend_api.h"

namespace fmha::gpu {

// Partials a list-form merge can take in one call: their addresses and
// strides travel in the kernel's parameters, whose size the vendor limits.
constexpr int kMaxListPartials = kMaxKernelParamBytes >= 8192 ? 64 : 32;

// Launches the merge of views.num_partials partials on `stream` (the
// caller has made the tensors' device current). Partials of any float
// dtype, stacked (any count) or as a list (at most kMaxListPartials; more is
// NOT_SUPPORTED); O in f16 / bf16 / f32. No allocation, no host
// synchronisation: stream ordered and graph capturable.
fmha_status merge(const fmha_merge_views &views, Stream stream, fmha_msg msg);

// Launches the merge backward on `stream`: any number of partials (in
// launches of a bounded number each). Same guarantees as merge().
fmha_status merge_backward(const fmha_merge_backward_views &views, Stream stream, fmha_msg msg);

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_MERGE_H_
