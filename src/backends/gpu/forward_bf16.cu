// bf16 instantiations of the split-K forward kernel.
#include "backends/gpu/forward_launch.cuh"

namespace fmha::gpu {

fmha_status launch_splitk_forward_bf16(const ForwardParams &params, int head_dim_bucket, bool wide, dim3 grid,
                                       int device, Stream stream, fmha_msg msg) {
  return launch_forward<bf16_t, false>(params, head_dim_bucket, wide, grid, device, stream, msg);
}

}  // namespace fmha::gpu
