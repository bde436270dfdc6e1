// The forward kernel's vendor layer: what splitk_forward.cuh and the tile
// loaders need that NVIDIA and AMD GPUs do differently, under one set of
// names in fmha::gpu::kernels. The algorithm (tiling, online softmax,
// masking, layouts, quantised loads, output) is written once against it.
//
// Each vendor header provides:
//   SmemAddr, smem_address(p)     how MMA loads and copies address shared
//                                 memory (CUDA: 32-bit shared window; HIP:
//                                 a pointer)
//   copy_async_16 / copy_async_4  one 16- / 4-byte global -> shared copy,
//   copy_commit, copy_wait<N>     zero-filled when not valid; commit closes
//                                 a group of copies, wait<N> leaves at most
//                                 N groups in flight (HIP: plain loads and
//                                 stores, done when issued)
//   fast_exp2(x)                  2^x with 2^-inf = +0
//   pack2<T>(x, y)                two floats rounded to T in one word
//   split_bf16x2(x, y, hi, lo)    bf16 pair and its rounding remainder
//   lane_xor(x, mask)             exchange with lane ^ mask in the warp
//   FragmentLayout                which rows and columns of the 16-row
//                                 MMA accumulator tile a lane holds, and
//                                 reductions over the lanes of one row
//   TilePolicy<D, quantised>      warps, keys per tile, pipeline stages and
//                                 resident blocks per SM for a head-dim
//                                 bucket
//   score_tile<Tile>(s, ...)      S = Q K^T for a warp's keys of one tile
//   accumulate_pv<Tile>(acc, ...) O += P V for a warp's head dims
//   FMHA_GPU_LAUNCH_BOUNDS(threads, blocks)
// The HIP plugin's build defines FMHA_SPLITK_GPU_HIP.
#ifndef FMHA_SPLITK_BACKENDS_GPU_VENDOR_TILE_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_VENDOR_TILE_CUH_

#include "backends/gpu/vendor.h"

#if defined(FMHA_SPLITK_GPU_HIP)
#include "backends/gpu/vendor/hip_tile.cuh"
#else
#include "backends/gpu/vendor/cuda_tile.cuh"
#endif

#endif  // FMHA_SPLITK_BACKENDS_GPU_VENDOR_TILE_CUH_
