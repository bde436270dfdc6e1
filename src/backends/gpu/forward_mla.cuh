// The MLA decode kernel's launcher template, instantiated per Q dtype
// (forward_mla_{f16,bf16}.cu) for latents in Q's dtype and fp8 ones.
#ifndef FMHA_SPLITK_BACKENDS_GPU_FORWARD_MLA_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_FORWARD_MLA_CUH_

#include <cstdint>
#include <type_traits>

#include "backends/gpu/forward_kernels.cuh"
#include "backends/gpu/forward_launch.cuh"
#include "backends/gpu/kernels/mla_forward.cuh"
#include "backends/gpu/status.h"

namespace fmha::gpu {

template <typename T, bool kFp8, bool kFp8Q = false, bool kFp8P = false>
fmha_status launch_mla_latents(const ForwardParams &params, dim3 grid, int device, Stream stream, fmha_msg msg) {
  using Tile = kernels::MlaTile<T, kFp8, kFp8Q, kFp8P>;
  return launch_forward_kernel<kernels::mla_forward_kernel<T, kFp8, kFp8Q, kFp8P>>(
      "mla_forward_kernel", Tile::kThreads, Tile::kSmemBytes, params, grid, device, stream, msg);
}

// The kernel for the latents and compute modes in `params`: fp8 Q
// (FMHA_FLAG_FP8_QK) comes through the f16 launcher, as to the tile kernel.
template <typename T>
fmha_status launch_mla(const ForwardParams &params, dim3 grid, int device, Stream stream, fmha_msg msg) {
  if (params.kv_quant != FMHA_KV_QUANT_FP8) return launch_mla_latents<T, false>(params, grid, device, stream, msg);
  if constexpr (std::is_same_v<T, half_t>) {
    if (params.q_fp8)
      return params.fp8_pv ? launch_mla_latents<T, true, true, true>(params, grid, device, stream, msg)
                           : launch_mla_latents<T, true, true, false>(params, grid, device, stream, msg);
  }
  return params.fp8_pv ? launch_mla_latents<T, true, false, true>(params, grid, device, stream, msg)
                       : launch_mla_latents<T, true>(params, grid, device, stream, msg);
}

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_FORWARD_MLA_CUH_
