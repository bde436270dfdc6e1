// Instantiations of the streaming quantised forward kernel beside bf16 Q (scaled into fp16 per row).
// CUDA only (FMHA_GPU_HAS_QUANT_STREAM).
#include "backends/gpu/vendor.h"

#if FMHA_GPU_HAS_QUANT_STREAM
#include "backends/gpu/forward_quant_stream.cuh"

namespace fmha::gpu {

fmha_status launch_quant_stream_forward_bf16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                             Stream stream, fmha_msg msg) {
  return launch_stream<bf16_t>(params, head_dim_bucket, grid, device, stream, msg);
}

}  // namespace fmha::gpu
#endif
