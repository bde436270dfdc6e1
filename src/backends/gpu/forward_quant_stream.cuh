// The streaming quantised forward kernel's launcher template, instantiated
// per Q dtype (forward_quant_stream_{f16,bf16}.cu) for both head-dim
// buckets and the five packed formats.
#ifndef FMHA_SPLITK_BACKENDS_GPU_FORWARD_QUANT_STREAM_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_FORWARD_QUANT_STREAM_CUH_

#include <cstdint>

#include "backends/gpu/forward_kernels.cuh"
#include "backends/gpu/forward_launch.cuh"
#include "backends/gpu/kernels/quant_stream_forward.cuh"
#include "backends/gpu/status.h"

namespace fmha::gpu {

inline kernels::StreamFormat stream_format(int32_t kv_quant, int32_t kv_scale_kind, int32_t kv_quant_groups) {
  if (kv_quant == FMHA_KV_QUANT_INT4)
    return kv_quant_groups == 1 ? kernels::StreamFormat::kInt4Row : kernels::StreamFormat::kInt4;
  return kv_scale_kind == FMHA_KV_SCALE_F16X2_SCALE_SHIFT ? kernels::StreamFormat::kFp8ScaleShift
                                                          : kernels::StreamFormat::kFp8Float;
}

template <typename T, int kHeadDim, kernels::StreamFormat kFormat, int kQueryTiles>
fmha_status launch_stream_tiles(const ForwardParams &params, dim3 grid, int device, Stream stream, fmha_msg msg) {
  using Tile = kernels::StreamTile<T, kHeadDim, kFormat, kQueryTiles>;
  return launch_forward_kernel<kernels::quant_stream_forward_kernel<T, kHeadDim, kFormat, kQueryTiles>>(
      "quant_stream_forward_kernel", Tile::kThreads, Tile::kSmemBytes, params, grid, device, stream, msg);
}

// One 8-query MMA n-tile where a CTA's rows (Mq x Hq / Hkv) fit it: half
// the MMAs and accumulators of two; the plan's row tiles are 16 rows, so
// such a problem has one.
template <typename T, int kHeadDim, kernels::StreamFormat kFormat>
fmha_status launch_stream_bucket(const ForwardParams &params, dim3 grid, int device, Stream stream, fmha_msg msg) {
  if (static_cast<int64_t>(params.seq.max_q_seqlen) * params.heads_per_kv <= 8)
    return launch_stream_tiles<T, kHeadDim, kFormat, 1>(params, grid, device, stream, msg);
  return launch_stream_tiles<T, kHeadDim, kFormat, 2>(params, grid, device, stream, msg);
}

template <typename T, int kHeadDim>
fmha_status launch_stream_format(const ForwardParams &params, dim3 grid, int device, Stream stream, fmha_msg msg) {
  switch (stream_format(params.kv_quant, params.kv_scale_kind, params.kv_quant_groups)) {
    case kernels::StreamFormat::kInt4:
      return launch_stream_bucket<T, kHeadDim, kernels::StreamFormat::kInt4>(params, grid, device, stream, msg);
    case kernels::StreamFormat::kInt4Row:
      // Rows whose aligned 16-byte chunks may be copied whole (forward.cu)
      // take the kernel that copies nothing else.
      if (params.kv_over16)
        return launch_stream_bucket<T, kHeadDim, kernels::StreamFormat::kInt4RowChunks>(params, grid, device, stream,
                                                                                        msg);
      return launch_stream_bucket<T, kHeadDim, kernels::StreamFormat::kInt4Row>(params, grid, device, stream, msg);
    case kernels::StreamFormat::kFp8ScaleShift:
      return launch_stream_bucket<T, kHeadDim, kernels::StreamFormat::kFp8ScaleShift>(params, grid, device, stream,
                                                                                      msg);
    default:
      return launch_stream_bucket<T, kHeadDim, kernels::StreamFormat::kFp8Float>(params, grid, device, stream, msg);
  }
}

template <typename T>
fmha_status launch_stream(const ForwardParams &params, int head_dim_bucket, dim3 grid, int device, Stream stream,
                          fmha_msg msg) {
  if (head_dim_bucket == 64) return launch_stream_format<T, 64>(params, grid, device, stream, msg);
  if (head_dim_bucket == 128) return launch_stream_format<T, 128>(params, grid, device, stream, msg);
  write_msg(msg, "internal: no streaming quantised kernel for head-dim bucket %d", head_dim_bucket);
  return FMHA_STATUS_INTERNAL_ERROR;
}

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_FORWARD_QUANT_STREAM_CUH_
