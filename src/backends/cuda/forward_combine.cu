// The combine step of the split-K forward: each split sequence's partial
// slots (fp32 O and LSE in the workspace) are merged in piece order into O
// and LSE, and the sinks join the denominator here, once. One warp per
// query row, sequential over the slots: deterministic, no atomics.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/forward_kernels.cuh"
#include "backends/cuda/kernels/forward_params.cuh"
#include "backends/cuda/kernels/ptx.cuh"
#include "backends/cuda/merge_math.cuh"

namespace fmha::cuda {
namespace {

constexpr int kCombineWarps = 4;
// float4 groups of the head dim per lane: 4 x 4 x 32 lanes = 512 dims.
constexpr int kCombineVectors = 4;

__device__ __forceinline__ void store_quad(void *base, int32_t elem, int64_t index, float4 x) {
  switch (elem) {
    case FMHA_ELEM_F16:
      *reinterpret_cast<uint2 *>(static_cast<__half *>(base) + index) =
          make_uint2(kernels::pack2<__half>(x.x, x.y), kernels::pack2<__half>(x.z, x.w));
      break;
    case FMHA_ELEM_BF16:
      *reinterpret_cast<uint2 *>(static_cast<__nv_bfloat16 *>(base) + index) =
          make_uint2(kernels::pack2<__nv_bfloat16>(x.x, x.y), kernels::pack2<__nv_bfloat16>(x.z, x.w));
      break;
    default:
      *reinterpret_cast<float4 *>(static_cast<float *>(base) + index) = x;
      break;
  }
}

__global__ void __launch_bounds__(kCombineWarps * 32) split_combine_kernel(const __grid_constant__ ForwardParams p) {
  int32_t batch = 0;
  int32_t first_slot = 0;
  const int32_t slots = split_slots(p.work, p.seq, static_cast<int32_t>(blockIdx.x), &batch, &first_slot);
  if (slots == 0) return;
  const QueryRange queries = query_range(p.seq, batch);
  const int64_t mq = p.seq.max_q_seqlen;
  const int64_t slot_rows = static_cast<int64_t>(p.groups) * p.heads_q * mq;  // LSE entries per slot
  const int32_t rows = p.groups * p.heads_q * queries.count;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int vectors = p.head_dim_v / 4;

  for (int32_t row = static_cast<int32_t>(blockIdx.y) * kCombineWarps + warp; row < rows;
       row += static_cast<int32_t>(gridDim.y) * kCombineWarps) {
    const int32_t query = row % queries.count;
    const int32_t group_head = row / queries.count;  // group * Hq + head
    const int32_t head = group_head % p.heads_q;
    const int32_t group = group_head / p.heads_q;
    const int64_t row_in_slot = group_head * mq + query;

    OnlineLse state;
    float4 acc[kCombineVectors];
#pragma unroll
    for (int v = 0; v < kCombineVectors; ++v) acc[v] = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int32_t i = 0; i < slots; ++i) {
      const int64_t entry = (first_slot + i) * slot_rows + row_in_slot;
      float weight;
      const float rescale = state.push(p.ws_lse[entry], &weight);
      const float4 *o_i = reinterpret_cast<const float4 *>(p.ws_o + entry * p.head_dim_v);
#pragma unroll
      for (int v = 0; v < kCombineVectors; ++v) {
        const int index = lane + 32 * v;
        if (index < vectors) {
          // An empty partial (weight 0) holds O = 0: skip its bytes.
          const float4 x = weight != 0.f ? o_i[index] : make_float4(0.f, 0.f, 0.f, 0.f);
          acc[v].x = acc[v].x * rescale + weight * x.x;
          acc[v].y = acc[v].y * rescale + weight * x.y;
          acc[v].z = acc[v].z * rescale + weight * x.z;
          acc[v].w = acc[v].w * rescale + weight * x.w;
        }
      }
    }
    if (p.sinks != nullptr) {
      // The sink is one more partial with LSE = sink and O = 0.
      float weight;
      const float rescale = state.push(p.sinks[group * p.sinks_stride[0] + head * p.sinks_stride[1]], &weight);
#pragma unroll
      for (int v = 0; v < kCombineVectors; ++v) {
        acc[v].x *= rescale;
        acc[v].y *= rescale;
        acc[v].z *= rescale;
        acc[v].w *= rescale;
      }
    }

    const float inv_sum = state.inv_sum();
    const int32_t out_query = queries.row0 + query;
    const int64_t o_row = queries.batch * p.o_stride[0] + out_query * p.o_stride[1] + group * p.o_stride[2] +
                          head * p.o_stride[3];
#pragma unroll
    for (int v = 0; v < kCombineVectors; ++v) {
      const int index = lane + 32 * v;
      if (index < vectors)
        store_quad(p.o, p.o_elem, o_row + 4 * index,
                   make_float4(acc[v].x * inv_sum, acc[v].y * inv_sum, acc[v].z * inv_sum, acc[v].w * inv_sum));
    }
    if (lane == 0 && p.lse != nullptr)
      p.lse[queries.batch * p.lse_stride[0] + group * p.lse_stride[1] + head * p.lse_stride[2] +
            out_query * p.lse_stride[3]] = state.lse();
  }
}

}  // namespace

fmha_status launch_split_combine(const ForwardParams &params, int64_t items, cudaStream_t stream, fmha_msg msg) {
  if (items == 0) return FMHA_STATUS_SUCCESS;
  // Enough warps per item for the rows of a sequence (G * Hq * Mq), within
  // the grid's y limit; the kernel loops over the rest.
  const int64_t rows = static_cast<int64_t>(params.groups) * params.heads_q * params.seq.max_q_seqlen;
  const int64_t row_blocks = std::min<int64_t>((rows + kCombineWarps - 1) / kCombineWarps, 65535);
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(std::max<int64_t>(row_blocks, 1)));
  split_combine_kernel<<<grid, kCombineWarps * 32, 0, stream>>>(params);
  FMHA_CUDA_CHECK_LAUNCH("split_combine_kernel", msg);
  return FMHA_STATUS_SUCCESS;
}

}  // namespace fmha::cuda
