// Instantiations of the MLA decode kernel beside bf16 Q. CUDA only
// (FMHA_GPU_HAS_MLA_KERNEL).
#include "backends/gpu/vendor.h"

#if FMHA_GPU_HAS_MLA_KERNEL
#include "backends/gpu/forward_mla.cuh"

namespace fmha::gpu {

fmha_status launch_mla_forward_bf16(const ForwardParams &params, dim3 grid, int device, Stream stream, fmha_msg msg) {
  return launch_mla<bf16_t>(params, grid, device, stream, msg);
}

}  // namespace fmha::gpu
#endif
