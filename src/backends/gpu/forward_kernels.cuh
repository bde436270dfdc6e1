// Launchers of the forward path's kernels, one per translation unit so that
// the kernel instantiations compile in parallel and forward.cu (the plan and
// launch heuristics) stays host code.
#ifndef FMHA_SPLITK_BACKENDS_GPU_FORWARD_KERNELS_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_FORWARD_KERNELS_CUH_

#include <cstdint>

#include "backends/gpu/kernels/forward_params.cuh"
#include "backends/gpu/vendor.h"
#include "core/backend_api.h"

namespace fmha::gpu {

// The head-dim bucket (64, 128, 256 or 512) a head dim runs in; dims below
// the bucket are masked. 0 when no bucket holds it.
constexpr int forward_head_dim_bucket(int head_dim) {
  return head_dim <= 0     ? 0
         : head_dim <= 64  ? 64
         : head_dim <= 128 ? 128
         : head_dim <= 256 ? 256
         : head_dim <= 512 ? 512
                           : 0;
}

// Shape of the forward kernel's tiles for a bucket, Q dtype and K/V kind:
// keys per tile, pipeline stages, dynamic shared memory.
struct ForwardTileInfo {
  int block_n;
  int stages;
  int smem_bytes;
  int threads = 0;  // per CTA (0: not given; the MLA kernel, which never merges inside)
};
ForwardTileInfo forward_tile_info(int head_dim_bucket, int32_t q_dtype, bool quantised);
#if FMHA_GPU_HAS_WIDE_TILES
// The same for the wide variant at D 128 (native K/V).
ForwardTileInfo wide_tile_info(int32_t q_dtype);
#endif

// The split-K forward kernel for `head_dim_bucket`, on `grid` (x: pieces x
// row tiles x groups x K/V heads, heads fastest); `wide`: its 8-warp
// variant at D 128 (FMHA_GPU_HAS_WIDE_TILES). `device` keys the one-time
// shared memory opt-in.
fmha_status launch_splitk_forward_f16(const ForwardParams &params, int head_dim_bucket, bool wide, dim3 grid,
                                      int device, Stream stream, fmha_msg msg);
fmha_status launch_splitk_forward_bf16(const ForwardParams &params, int head_dim_bucket, bool wide, dim3 grid,
                                       int device, Stream stream, fmha_msg msg);
// The same for int4 / fp8 K/V (buckets up to 256): f16 beside fp16 or fp8
// Q, bf16 beside bf16 Q.
fmha_status launch_splitk_forward_quant_f16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                            Stream stream, fmha_msg msg);
fmha_status launch_splitk_forward_quant_bf16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                             Stream stream, fmha_msg msg);

#if FMHA_GPU_HAS_ROW_PAIRS
// The tile kernel with 32 query rows per CTA (row pairs) for native K/V in
// the head-dim buckets 64 and 128: its tile shape, and its launch (grid as
// above, the row tiles counted in 32-row pairs).
ForwardTileInfo row_pair_tile_info(int head_dim_bucket, int32_t q_dtype);
fmha_status launch_row_pair_forward_f16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                        Stream stream, fmha_msg msg);
fmha_status launch_row_pair_forward_bf16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                         Stream stream, fmha_msg msg);
#endif

#if FMHA_GPU_HAS_QUANT_STREAM
// The streaming kernel for int4 / fp8 K/V (kernels/quant_stream_forward.cuh):
// head-dim buckets 64 and 128, f16 / fp8 Q (_f16) or bf16 Q (_bf16), not
// MLA. Its keys per warp tile, stages and dynamic shared memory for the
// problem's format.
ForwardTileInfo quant_stream_tile_info(int head_dim_bucket, int32_t q_dtype, int32_t kv_quant, int32_t kv_scale_kind,
                                       int32_t kv_quant_groups);
fmha_status launch_quant_stream_forward_f16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                            Stream stream, fmha_msg msg);
fmha_status launch_quant_stream_forward_bf16(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device,
                                             Stream stream, fmha_msg msg);
#endif

#if FMHA_GPU_HAS_MLA_KERNEL
// The MLA decode kernel (kernels/mla_forward.cuh) for f16 / bf16 Q (_f16
// also fp8 Q), over latents in Q's dtype or E4M3FN codes with one float
// scale; its dynamic shared memory.
int mla_smem_bytes(int32_t q_dtype, bool fp8);
fmha_status launch_mla_forward_f16(const ForwardParams &params, dim3 grid, int device, Stream stream, fmha_msg msg);
fmha_status launch_mla_forward_bf16(const ForwardParams &params, dim3 grid, int device, Stream stream, fmha_msg msg);
#endif

// Merges the workspace partial slots of every split sequence into O / LSE
// (adding the sinks); `items` is the number of combine items (sequences, or
// pieces with PieceSource::kScheduled). With `overlap` (the device can) it
// is launched to overlap the forward kernel's tail (launch_overlapping in
// the vendor layer) where the kernel was compiled for that.
fmha_status launch_split_combine(const ForwardParams &params, int64_t items, bool overlap, int device, Stream stream,
                                 fmha_msg msg);

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_FORWARD_KERNELS_CUH_
