// The split combine of one query row (DESIGN 5.1): the partial slots of a
// split sequence (fp32 O and LSE in the workspace) merged in piece order
// into O and LSE, with the attention sink joining the denominator here,
// once. One warp (CUDA) or wavefront (HIP) per row, each lane holding
// kCombineVectors float4 groups of the head dim; a fixed order over the
// slots, so deterministic and atomic-free.
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

// The largest head dim the combine holds (MLA's Dv = 512).
constexpr int kCombineMaxHeadDim = 512;
// float4 groups of the head dim per lane: 4 x 4 x 32 lanes (CUDA) or
// 2 x 4 x 64 lanes (HIP) = 512 dims.
constexpr int kCombineVectors = kCombineMaxHeadDim / (4 * kWarpSize);
static_assert(kCombineVectors * 4 * kWarpSize == kCombineMaxHeadDim, "the lanes must cover the head dim exactly");

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

// Merges `slots` partial slots into one row of O (and LSE).
//   ws_o, ws_lse    the workspace partials: slot s's entry for this row is
//                   (first_slot + s) * slot_rows + row_in_slot, its O the
//                   head_dim_v floats from entry * head_dim_v
//   sinks, sink     the sinks (null when none) and the element of the row's
//                   head
//   o, o_elem, o_row  O's data, element type and the row's first element
//   lse, lse_row    LSE (null when not wanted) and the row's element
//   lane            this thread's lane in its warp / wavefront
// (Bases and offsets rather than row pointers: an offset is only applied
// where its tensor is present.)
//
// Two passes: the merged LSE from the slots' LSE values alone, then O as
// the sum of exp(LSE_i - LSE) O_i. The lanes take the slots' LSE values a
// warp's width at a time, reduced by butterflies (every lane the bitwise
// same maximum and sum, in a fixed order), and each lane keeps its slots'
// weights for the O pass, which broadcasts them: the loads of a pass do not
// wait for one another. (A running log-sum-exp made each slot's O load wait
// for its LSE load and each LSE for the previous rescale: about 20 us for
// 16 slots on an H200; a slot-by-slot LSE pass still waited for one load
// latency per 8 slots.)
__device__ __forceinline__ void combine_row(const float *ws_o, const float *ws_lse, int32_t first_slot, int32_t slots,
                                            int64_t slot_rows, int64_t row_in_slot, int head_dim_v, const float *sinks,
                                            int64_t sink, void *o, int32_t o_elem, int64_t o_row, float *lse,
                                            int64_t lse_row, int lane) {
  const LaneGroup warp(kWarpSize);
  const int vectors = head_dim_v / 4;
  const float *lse_of_slot = ws_lse + first_slot * slot_rows + row_in_slot;  // slot i at [i * slot_rows]
  // The sink is one more partial with LSE = sink and O = 0.
  const float sink_lse = sinks != nullptr ? sinks[sink] : kNegInf;
  // This lane's slots: lane, lane + kWarpSize, ...; the LSE values of the
  // first kSlotsKept of them stay in registers for the weights (-inf past
  // the last slot: no share of the sums, weight 0).
  constexpr int kSlotsKept = 2;
  float kept_lse[kSlotsKept];
#pragma unroll
  for (int k = 0; k < kSlotsKept; ++k) {
    const int32_t i = lane + k * kWarpSize;
    kept_lse[k] = i < slots ? lse_of_slot[i * slot_rows] : kNegInf;
  }
  float max_lse = kNegInf;
#pragma unroll
  for (int k = 0; k < kSlotsKept; ++k) max_lse = propagating_max(kept_lse[k], max_lse);
  for (int32_t i = lane + kSlotsKept * kWarpSize; i < slots; i += kWarpSize)
    max_lse = propagating_max(lse_of_slot[i * slot_rows], max_lse);
  max_lse = propagating_max(sink_lse, warp.reduce(max_lse, [](float a, float b) { return propagating_max(a, b); }));
  float sum_exp = 0.f;
#pragma unroll
  for (int k = 0; k < kSlotsKept; ++k) sum_exp += exp_relative(kept_lse[k], max_lse);
  for (int32_t i = lane + kSlotsKept * kWarpSize; i < slots; i += kWarpSize)
    sum_exp += exp_relative(lse_of_slot[i * slot_rows], max_lse);
  sum_exp = exp_relative(sink_lse, max_lse) + warp.sum(sum_exp);
  const float merged_lse = lse_of(max_lse, sum_exp);

  float4 acc[kCombineVectors];
#pragma unroll
  for (int v = 0; v < kCombineVectors; ++v) acc[v] = make_float4(0.f, 0.f, 0.f, 0.f);
  // Slots base .. base + kWarpSize - 1, lane j holding slot base + j's LSE.
  const auto add_slots = [&](int32_t base, float lane_lse) {
    const float lane_weight = merge_weight(lane_lse, merged_lse);
    const int32_t count = min(kWarpSize, slots - base);
    const auto add_slot = [&](int32_t j) {
      const float weight = warp.broadcast(lane_weight, j);
      const float4 *o_i =
          reinterpret_cast<const float4 *>(ws_o + ((first_slot + base + j) * slot_rows + row_in_slot) * head_dim_v);
#pragma unroll
      for (int v = 0; v < kCombineVectors; ++v) {
        const int index = lane + kWarpSize * v;
        if (index < vectors) {
          // An empty partial (weight 0) holds O = 0: skip its bytes.
          const float4 x = weight != 0.f ? o_i[index] : make_float4(0.f, 0.f, 0.f, 0.f);
          acc[v].x += weight * x.x;
          acc[v].y += weight * x.y;
          acc[v].z += weight * x.z;
          acc[v].w += weight * x.w;
        }
      }
    };
    // Eight slots' loads in flight at a time (unrolled by hand: a runtime
    // trip count with shuffles inside is not unrolled by HIP's compiler).
    int32_t j = 0;
    for (; j + 8 <= count; j += 8) {
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) add_slot(j + jj);
    }
    for (; j < count; ++j) add_slot(j);
  };
#pragma unroll
  for (int k = 0; k < kSlotsKept; ++k)
    if (k * kWarpSize < slots) add_slots(k * kWarpSize, kept_lse[k]);
  for (int32_t base = kSlotsKept * kWarpSize; base < slots; base += kWarpSize)
    add_slots(base, base + lane < slots ? lse_of_slot[(base + lane) * slot_rows] : kNegInf);
#pragma unroll
  for (int v = 0; v < kCombineVectors; ++v) {
    const int index = lane + kWarpSize * v;
    if (index < vectors) store_quad(o, o_elem, o_row + 4 * index, acc[v]);
  }
  if (lane == 0 && lse != nullptr) lse[lse_row] = merged_lse;
}

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_SPLIT_COMBINE_CUH_
