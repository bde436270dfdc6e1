// The forward kernel's launcher template, instantiated once per dtype
// (forward_f16.cu, forward_bf16.cu) for every head-dim bucket.
#ifndef FMHA_SPLITK_BACKENDS_CUDA_FORWARD_LAUNCH_CUH_
#define FMHA_SPLITK_BACKENDS_CUDA_FORWARD_LAUNCH_CUH_

#include <atomic>
#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/forward_kernels.cuh"
#include "backends/cuda/kernels/splitk_forward.cuh"

namespace fmha::cuda {

template <typename T, int kHeadDim>
fmha_status launch_forward_bucket(const ForwardParams &params, dim3 grid, int device, cudaStream_t stream,
                                  fmha_msg msg) {
  using Tile = kernels::ForwardTile<T, kHeadDim>;
  const auto kernel = kernels::splitk_forward_kernel<T, kHeadDim>;
  // Raising the shared-memory limit is per device and kernel; doing it once
  // keeps it off the per-run host cost. Devices past 63 just redo it.
  static std::atomic<uint64_t> configured{0};
  const uint64_t device_bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (device_bit == 0 || (configured.load(std::memory_order_acquire) & device_bit) == 0) {
    FMHA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes),
                    msg);
    // Several CTAs per SM need the largest shared-memory carveout.
    FMHA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared),
                    msg);
    configured.fetch_or(device_bit, std::memory_order_release);
  }
  kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(params);
  FMHA_CUDA_CHECK_LAUNCH("splitk_forward_kernel", msg);
  return FMHA_STATUS_SUCCESS;
}

template <typename T>
fmha_status launch_forward(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                           cudaStream_t stream, fmha_msg msg) {
  switch (head_dim_bucket) {
    case 64:
      return launch_forward_bucket<T, 64>(params, grid, device, stream, msg);
    case 128:
      return launch_forward_bucket<T, 128>(params, grid, device, stream, msg);
    case 256:
      return launch_forward_bucket<T, 256>(params, grid, device, stream, msg);
    case 512:
      return launch_forward_bucket<T, 512>(params, grid, device, stream, msg);
    default:
      write_msg(msg, "internal: no forward kernel for head-dim bucket %d", head_dim_bucket);
      return FMHA_STATUS_INTERNAL_ERROR;
  }
}

}  // namespace fmha::cuda

#endif  // FMHA_SPLITK_BACKENDS_CUDA_FORWARD_LAUNCH_CUH_
