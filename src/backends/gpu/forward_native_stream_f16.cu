// Instantiations of the streaming forward kernel for native f16 K/V (Q, K and V in f16).
// CUDA only (FMHA_GPU_HAS_QUANT_STREAM).
#include "backends/gpu/vendor.h"

#if FMHA_GPU_HAS_QUANT_STREAM
#include "backends/gpu/forward_quant_stream.cuh"

namespace fmha::gpu {

fmha_status launch_native_stream_forward_f16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                             Stream stream, fmha_msg msg) {
  return launch_native_stream<half_t>(params, head_dim_bucket, grid, device, stream, msg);
}

}  // namespace fmha::gpu
#endif
