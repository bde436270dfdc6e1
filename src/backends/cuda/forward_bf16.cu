// bf16 instantiations of the split-K forward kernel.
#include "backends/cuda/forward_launch.cuh"

namespace fmha::cuda {

fmha_status launch_splitk_forward_bf16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                       cudaStream_t stream, fmha_msg msg) {
  return launch_forward<__nv_bfloat16, false>(params, head_dim_bucket, grid, device, stream, msg);
}

}  // namespace fmha::cuda
