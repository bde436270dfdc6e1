// Instantiations of the split-K forward kernel for int4 / fp8 K/V beside
// bf16 Q: K dequantised to bf16 hi + lo, V to fp16.
#include "backends/gpu/forward_launch.cuh"

namespace fmha::gpu {

fmha_status launch_splitk_forward_quant_bf16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                             Stream stream, fmha_msg msg) {
  return launch_forward<bf16_t, true>(params, head_dim_bucket, false, grid, device, stream, msg);
}

}  // namespace fmha::gpu
