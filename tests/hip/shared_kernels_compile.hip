// Compile-only check: the shared GPU code that the HIP backend does not run
// yet (the split combine, which waits for the forward port) still compiles
// for HIP, so that a change made for CUDA cannot break it unseen. Built with
// the HIP plugin; nothing here is linked or launched.
#include "backends/gpu/split_combine.cuh"

namespace fmha_hip_test {

__global__ void split_combine_compiles(const float *ws_o, const float *ws_lse, int32_t slots, int64_t slot_rows,
                                       int head_dim_v, const float *sinks, void *o, int32_t o_elem, float *lse) {
  fmha::gpu::combine_row(ws_o, ws_lse, 0, slots, slot_rows, blockIdx.x, head_dim_v, sinks, 0, o, o_elem,
                         static_cast<int64_t>(blockIdx.x) * head_dim_v, lse, blockIdx.x,
                         static_cast<int>(threadIdx.x) % fmha::gpu::kWarpSize);
}

}  // namespace fmha_hip_test
