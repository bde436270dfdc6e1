// The forward kernel's launcher template, instantiated once per Q dtype and
// K/V kind (forward_{f16,bf16}.cu native, forward_quant_{f16,bf16}.cu int4 /
// fp8 K/V) for every head-dim bucket.
#ifndef FMHA_SPLITK_BACKENDS_GPU_FORWARD_LAUNCH_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_FORWARD_LAUNCH_CUH_

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "backends/gpu/forward_kernels.cuh"
#include "backends/gpu/kernels/splitk_forward.cuh"
#include "backends/gpu/status.h"

namespace fmha::gpu {

// Launches a forward kernel (tile, streaming or MLA) of `threads` threads
// and `smem_bytes` of dynamic shared memory. Raising a kernel's
// shared-memory limit is per device and kernel; doing it once keeps it off
// the per-run host cost: `configured` (one per kKernel) is its mask of
// devices done; devices past 63 just redo it.
// The launch is a programmatic dependent one (it may start while the
// stream's previous kernel finishes) where the kernel's code has the wait
// for it (compiled for sm_90 or newer and running as such; `overlapping`
// is that mask, read once per device): the kernel waits before it reads or
// writes global memory (attend_work_item), so the stream's order holds,
// and such a launch costs the host less (launch probe, run 54 of
// docs/validation.md: 3.4-4.1 us against 4.3-4.7 with <<<>>>).
template <auto kKernel>
fmha_status launch_forward_kernel(const char *name, int threads, int smem_bytes, const ForwardParams &params, dim3 grid,
                                  int device, Stream stream, fmha_msg msg) {
  static std::atomic<uint64_t> configured{0};
  static std::atomic<uint64_t> overlapping{0};
  const uint64_t device_bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  bool overlap = false;
  if (device_bit == 0 || (configured.load(std::memory_order_acquire) & device_bit) == 0) {
    FMHA_GPU_CHECK(allow_kernel_shared_memory(kKernel, smem_bytes), msg);
    int version = 0;
    FMHA_GPU_CHECK(kernel_ptx_version(kKernel, &version), msg);
    overlap = version >= 90;
    if (overlap) overlapping.fetch_or(device_bit, std::memory_order_relaxed);
    configured.fetch_or(device_bit, std::memory_order_release);
  } else {
    overlap = (overlapping.load(std::memory_order_relaxed) & device_bit) != 0;
  }
  const Error err =
      launch_overlapping(overlap, kKernel, grid, dim3(threads), static_cast<size_t>(smem_bytes), stream, params);
  if (err != kSuccess) return status_from(err, name, msg);
  FMHA_GPU_CHECK_LAUNCH(name, msg);
  return FMHA_STATUS_SUCCESS;
}

template <typename T, int kHeadDim, bool kQuantised, int kRowTiles = 1, bool kWide = false>
fmha_status launch_forward_bucket(const ForwardParams &params, dim3 grid, int device, Stream stream, fmha_msg msg) {
  using Tile = kernels::ForwardTile<T, kHeadDim, kQuantised, kRowTiles, kWide>;
  return launch_forward_kernel<kernels::splitk_forward_kernel<T, kHeadDim, kQuantised, kRowTiles, kWide>>(
      "splitk_forward_kernel", Tile::kThreads, Tile::kSmemBytes, params, grid, device, stream, msg);
}

// Row pairs (native K/V, buckets 64 and 128).
template <typename T>
fmha_status launch_row_pair_forward(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                    Stream stream, fmha_msg msg) {
  if (head_dim_bucket == 64) return launch_forward_bucket<T, 64, false, 2>(params, grid, device, stream, msg);
  if (head_dim_bucket == 128) return launch_forward_bucket<T, 128, false, 2>(params, grid, device, stream, msg);
  write_msg(msg, "internal: no row-pair forward kernel for head-dim bucket %d", head_dim_bucket);
  return FMHA_STATUS_INTERNAL_ERROR;
}

// `wide`: the 8-warp variant (native D 128 where the vendor has it).
template <typename T, bool kQuantised>
fmha_status launch_forward(const ForwardParams &params, int head_dim_bucket, bool wide, dim3 grid, int device,
                           Stream stream, fmha_msg msg) {
  (void)wide;  // (no wide tiles for the quantised kernels, nor on HIP)
  switch (head_dim_bucket) {
    case 64:
      return launch_forward_bucket<T, 64, kQuantised>(params, grid, device, stream, msg);
    case 128:
#if FMHA_GPU_HAS_WIDE_TILES
      if constexpr (!kQuantised)
        if (wide) return launch_forward_bucket<T, 128, false, 1, true>(params, grid, device, stream, msg);
#endif
      return launch_forward_bucket<T, 128, kQuantised>(params, grid, device, stream, msg);
    case 256:
      return launch_forward_bucket<T, 256, kQuantised>(params, grid, device, stream, msg);
    case 512:
      // The quantised tiles stop at 256 (plan_forward refuses larger).
      if constexpr (!kQuantised) return launch_forward_bucket<T, 512, false>(params, grid, device, stream, msg);
      break;
    case 576:
      // MLA (V_FROM_K): f16 / bf16 latents, or fp8 ones (quantised).
      return launch_forward_bucket<T, 576, kQuantised>(params, grid, device, stream, msg);
    default:
      break;
  }
  write_msg(msg, "internal: no forward kernel for head-dim bucket %d", head_dim_bucket);
  return FMHA_STATUS_INTERNAL_ERROR;
}

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_FORWARD_LAUNCH_CUH_
