// bf16 instantiations of the split-K forward kernel's row pairs (32 query
// rows per CTA), in a translation unit of their own so that they compile
// beside the 16-row ones.
#include "backends/gpu/forward_launch.cuh"

#if FMHA_GPU_HAS_ROW_PAIRS
namespace fmha::gpu {

fmha_status launch_row_pair_forward_bf16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                         Stream stream, fmha_msg msg) {
  return launch_row_pair_forward<bf16_t>(params, head_dim_bucket, grid, device, stream, msg);
}

}  // namespace fmha::gpu
#endif
