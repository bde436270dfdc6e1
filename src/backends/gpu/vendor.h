// The vendor layer: everything the shared GPU kernels (src/backends/gpu/)
// need that CUDA and HIP spell differently, under one set of names in
// fmha::gpu. The HIP plugin's build defines FMHA_SPLITK_GPU_HIP; every other
// translation unit gets CUDA.
//
// Each vendor header provides:
//   kVendorName                     "cuda" / "hip", for messages
//   Stream, Error, kSuccess, kPerThreadStream
//                                   runtime types
//   is_out_of_memory, error_name, error_string, take_last_error
//   get_device_count, get_device, set_device, malloc_device, free_device,
//   memory_device                   the runtime calls the entry points make
//   Event, driver_version, l2_cache_bytes, event_*, memset_async,
//   copy_to_host_async, stream_synchronize
//                                   what autotuning's timing needs
//   event_create_untimed, stream_wait_event, stream_is_capturing
//                                   what orders runs on a plan's workspace
//   max_shared_memory_per_block, allow_kernel_shared_memory
//                                   the forward kernels' shared memory
//   kMaxKernelParamBytes            largest kernel parameter block
//   FMHA_GPU_GRID_CONSTANT          qualifier of by-value kernel parameters
//   half_t, bf16_t                  16-bit float types, with to_float,
//                                   half_from_float, bf16_from_float
//                                   (round to nearest even), pack_half2,
//                                   pack_bf162 (two in one 32-bit word)
//   kWarpSize                       32 (NVIDIA warp) / 64 (CDNA wavefront)
//   LaneGroup(lanes).sum(x)         deterministic sum over an aligned group
//                                   of lanes of one warp / wavefront
//   warp_min(x)                     uint32 minimum over the warp / wavefront
//   FMHA_GPU_BACKEND_NAME           "CUDA" / "HIP" (a literal, for messages)
// Block-wide reductions and scans are in vendor/block.cuh, the forward
// kernel's MMAs and copies in vendor/tile.cuh.
// The types, conversions and lanes exist only in device compiles (nvcc,
// HIP clang); host-only sources get the runtime part.
#ifndef FMHA_SPLITK_BACKENDS_GPU_VENDOR_H_
#define FMHA_SPLITK_BACKENDS_GPU_VENDOR_H_

#if defined(FMHA_SPLITK_GPU_HIP)
#include "backends/gpu/vendor/hip.h"
#else
#include "backends/gpu/vendor/cuda.h"
#endif

#endif  // FMHA_SPLITK_BACKENDS_GPU_VENDOR_H_
