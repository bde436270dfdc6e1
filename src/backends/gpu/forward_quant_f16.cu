// Instantiations of the split-K forward kernel for int4 / fp8 K/V beside
// fp16 (or fp8) Q: K and V dequantised to fp16.
#include "backends/gpu/forward_launch.cuh"

namespace fmha::gpu {

fmha_status launch_splitk_forward_quant_f16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                            Stream stream, fmha_msg msg) {
  return launch_forward<half_t, true>(params, head_dim_bucket, false, grid, device, stream, msg);
}

}  // namespace fmha::gpu
