// The split combine of one query row (DESIGN 5.1): the partial slots of a
// split sequence (fp32 O and LSE in the workspace) merged in piece order
// into O and LSE, with the attention sink joining the denominator here,
// once. One block of kCombineThreads threads per row: the slots are dealt
// over the block so that all their loads are in flight at once, and every
// sum is taken in a fixed order (deterministic, no atomics).
//
// Vendor-neutral: the caller (a backend's combine kernel) finds the row and
// its slots from its forward parameters and passes the addresses.
#ifndef FMHA_SPLITK_BACKENDS_GPU_SPLIT_COMBINE_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_SPLIT_COMBINE_CUH_

#include <cstdint>

#include "backends/gpu/merge_math.cuh"
#include "backends/gpu/vendor.h"
#include "core/backend_api.h"

namespace fmha::gpu {

// The largest head dim the combine holds (MLA's Dv = 512): one float4 of
// it per thread of the block.
constexpr int kCombineMaxHeadDim = 512;
constexpr int kCombineThreads = kCombineMaxHeadDim / 4;
static_assert(kCombineThreads % kWarpSize == 0, "whole warps / wavefronts");

// Slots whose weights one pass of the O loop holds in shared memory.
constexpr int kCombineSlotsPerPass = kCombineThreads;
// Slot loads a thread keeps in flight.
constexpr int kCombineLoadsInFlight = 8;

// The block's shared memory for combine_row.
struct CombineShared {
  float warp_value[kCombineThreads / kWarpSize];  // block reductions
  float weight[kCombineSlotsPerPass];             // exp(LSE_i - LSE) of a pass's slots
  float4 partial_o[kCombineThreads];              // each thread's share of O
};

// `x` reduced by the commutative `op` over the block, on every thread, in a
// fixed order (butterflies within warps, then the warps in index order).
template <typename Op>
__device__ __forceinline__ float block_reduce(float x, Op op, CombineShared &shared) {
  const LaneGroup warp(kWarpSize);
  x = warp.reduce(x, op);
  const int t = static_cast<int>(threadIdx.x);
  if (t % kWarpSize == 0) shared.warp_value[t / kWarpSize] = x;
  __syncthreads();
  float all = shared.warp_value[0];
#pragma unroll
  for (int w = 1; w < kCombineThreads / kWarpSize; ++w) all = op(all, shared.warp_value[w]);
  __syncthreads();  // warp_value is free again
  return all;
}

// acc += weight * x, per component (the merges' weighted sum of partial O).
__device__ __forceinline__ void add_weighted(float4 &acc, float weight, float4 x) {
  acc.x += weight * x.x;
  acc.y += weight * x.y;
  acc.z += weight * x.z;
  acc.w += weight * x.w;
}

// Four floats rounded to O's element type, stored at element `index` of
// `base` (16 bytes for f32, 8 for f16 / bf16).
__device__ __forceinline__ void store_quad(void *base, int32_t elem, int64_t index, float4 x) {
  switch (elem) {
    case FMHA_ELEM_F16:
      *reinterpret_cast<uint2 *>(static_cast<half_t *>(base) + index) =
          make_uint2(pack_half2(x.x, x.y), pack_half2(x.z, x.w));
      break;
    case FMHA_ELEM_BF16:
      *reinterpret_cast<uint2 *>(static_cast<bf16_t *>(base) + index) =
          make_uint2(pack_bf162(x.x, x.y), pack_bf162(x.z, x.w));
      break;
    default:
      *reinterpret_cast<float4 *>(static_cast<float *>(base) + index) = x;
      break;
  }
}

// Merges `slots` partial slots into one row of O (and LSE); called by every
// thread of a kCombineThreads block (it synchronises the block).
//   ws_o, ws_lse    the workspace partials: slot s's entry for this row is
//                   (first_slot + s) * slot_rows + row_in_slot, its O the
//                   head_dim_v floats from entry * head_dim_v
//   sinks, sink     the sinks (null when none) and the element of the row's
//                   head
//   o, o_elem, o_row  O's data, element type and the row's first element
//   lse, lse_row    LSE (null when not wanted) and the row's element
// (Bases and offsets rather than row pointers: an offset is only applied
// where its tensor is present.)
//
// Two passes: the merged LSE from the slots' LSE values alone (thread t
// loads slot t, t + kCombineThreads, ...), then O as the sum of exp(LSE_i -
// LSE) O_i: the head dim's float4 groups take `lanes` threads, and the
// kCombineThreads / lanes groups of threads take the slots in turn, each
// with kCombineLoadsInFlight loads in flight; their sums are added in group
// order. A row thus waits for about two load latencies, however many slots
// it has up to a few hundred. (One warp per row, looping over the slots,
// took 5-13 us after the forward kernel on an H200: only 32 warps for a
// B = 1 problem's 32 rows, each waiting for its slots 8 at a time.)
__device__ __forceinline__ void combine_row(const float *ws_o, const float *ws_lse, int32_t first_slot, int32_t slots,
                                            int64_t slot_rows, int64_t row_in_slot, int head_dim_v, const float *sinks,
                                            int64_t sink, void *o, int32_t o_elem, int64_t o_row, float *lse,
                                            int64_t lse_row, CombineShared &shared) {
  const int t = static_cast<int>(threadIdx.x);
  const float *lse_of_slot = ws_lse + first_slot * slot_rows + row_in_slot;  // slot i at [i * slot_rows]
  const auto slot_lse = [&](int32_t i) { return i < slots ? lse_of_slot[i * slot_rows] : kNegInf; };
  // The sink is one more partial with LSE = sink and O = 0.
  const float sink_lse = sinks != nullptr ? sinks[sink] : kNegInf;
  const float kept_lse = slot_lse(t);  // the first pass's weights come from it
  const auto max_op = [](float a, float b) { return propagating_max(a, b); };
  float max_lse = kept_lse;
  for (int32_t i = t + kCombineThreads; i < slots; i += kCombineThreads) max_lse = max_op(slot_lse(i), max_lse);
  max_lse = max_op(sink_lse, block_reduce(max_lse, max_op, shared));
  float sum_exp = exp_relative(kept_lse, max_lse);
  for (int32_t i = t + kCombineThreads; i < slots; i += kCombineThreads) sum_exp += exp_relative(slot_lse(i), max_lse);
  sum_exp = exp_relative(sink_lse, max_lse) + block_reduce(sum_exp, [](float a, float b) { return a + b; }, shared);
  const float merged_lse = lse_of(max_lse, sum_exp);

  const int vectors = head_dim_v / 4;
  int lanes = kWarpSize / 2;
  while (lanes < vectors) lanes *= 2;
  const int groups = kCombineThreads / lanes;
  const int quad = t % lanes;
  const int group = t / lanes;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int32_t base = 0; base < slots; base += kCombineSlotsPerPass) {
    shared.weight[t] = merge_weight(base == 0 ? kept_lse : slot_lse(base + t), merged_lse);
    __syncthreads();
    const int32_t count = min(kCombineSlotsPerPass, slots - base);
    if (quad < vectors) {
      for (int32_t j0 = group; j0 < count; j0 += kCombineLoadsInFlight * groups) {
        float weight[kCombineLoadsInFlight];
        float4 x[kCombineLoadsInFlight];
#pragma unroll
        for (int k = 0; k < kCombineLoadsInFlight; ++k) {
          const int32_t j = j0 + k * groups;
          weight[k] = j < count ? shared.weight[j] : 0.f;
          // An empty partial (weight 0) holds O = 0: skip its bytes.
          x[k] = weight[k] != 0.f ? reinterpret_cast<const float4 *>(
                                        ws_o + ((first_slot + base + j) * slot_rows + row_in_slot) * head_dim_v)[quad]
                                  : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int k = 0; k < kCombineLoadsInFlight; ++k) add_weighted(acc, weight[k], x[k]);
      }
    }
    __syncthreads();  // the weights are read; the next pass rewrites them
  }
  shared.partial_o[t] = acc;
  __syncthreads();
  if (group == 0 && quad < vectors) {
    float4 sum = shared.partial_o[quad];
    for (int g = 1; g < groups; ++g) {
      const float4 x = shared.partial_o[g * lanes + quad];
      sum.x += x.x;
      sum.y += x.y;
      sum.z += x.z;
      sum.w += x.w;
    }
    store_quad(o, o_elem, o_row + 4 * quad, sum);
  }
  if (t == 0 && lse != nullptr) lse[lse_row] = merged_lse;
  __syncthreads();  // partial_o is free for the block's next row
}

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_SPLIT_COMBINE_CUH_
