// The combine step of the split-K forward: each split sequence's partial
// slots (fp32 O and LSE in the workspace) are merged in piece order into O
// and LSE, and the sinks join the denominator here, once. One block per
// query row (the shared gpu::combine_row), in a fixed order over the slots:
// deterministic, no atomics. This file maps the grid onto the rows of the
// forward path's parameters.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "backends/gpu/forward_kernels.cuh"
#include "backends/gpu/kernels/forward_params.cuh"
#include "backends/gpu/split_combine.cuh"
#include "backends/gpu/status.h"

namespace fmha::gpu {
namespace {

__global__ void __launch_bounds__(gpu::kCombineThreads)
    split_combine_kernel(const FMHA_GPU_GRID_CONSTANT ForwardParams p) {
  __shared__ gpu::CombineShared shared;
  // Launched overlapping the forward kernel, whose partials it reads.
  gpu::wait_for_prior_grids();
  int32_t batch = 0;
  int32_t first_slot = 0;
  const int32_t slots = split_slots(p.work, p.seq, static_cast<int32_t>(blockIdx.x), &batch, &first_slot);
  if (slots == 0) return;
  const QueryRange queries = query_range(p.seq, batch);
  const int64_t mq = p.seq.max_q_seqlen;
  const int64_t slot_rows = static_cast<int64_t>(p.groups) * p.heads_q * mq;  // LSE entries per slot
  const int32_t rows = p.groups * p.heads_q * queries.count;

  // (Uniform across the block: combine_row synchronises it.)
  for (int32_t row = static_cast<int32_t>(blockIdx.y); row < rows; row += static_cast<int32_t>(gridDim.y)) {
    const int32_t query = row % queries.count;
    const int32_t group_head = row / queries.count;  // group * Hq + head
    const int32_t head = group_head % p.heads_q;
    const int32_t group = group_head / p.heads_q;
    const int32_t out_query = queries.row0 + query;
    const int64_t o_row =
        queries.batch * p.o_stride[0] + out_query * p.o_stride[1] + group * p.o_stride[2] + head * p.o_stride[3];
    gpu::combine_row(p.ws_o, p.ws_lse, first_slot, slots, slot_rows, group_head * mq + query, p.head_dim_v, p.sinks,
                     group * p.sinks_stride[0] + head * p.sinks_stride[1], p.o, p.o_elem, o_row, p.lse,
                     queries.batch * p.lse_stride[0] + group * p.lse_stride[1] + head * p.lse_stride[2] +
                         out_query * p.lse_stride[3],
                     shared);
  }
}

}  // namespace

fmha_status launch_split_combine(const ForwardParams &params, int64_t items, bool overlap, int device, Stream stream,
                                 fmha_msg msg) {
  if (items == 0) return FMHA_STATUS_SUCCESS;
  if (overlap) {
    // The overlap is safe only with the kernel's own wait, which code
    // compiled for sm_90 or newer has (an sm_80 build that the driver
    // compiles for Hopper does not): read once per device.
    static std::atomic<int> ptx_versions[64] = {};  // 0: not read yet
    int version = device >= 0 && device < 64 ? ptx_versions[device].load(std::memory_order_relaxed) : 0;
    if (version == 0) {
      FMHA_GPU_CHECK(kernel_ptx_version(split_combine_kernel, &version), msg);
      if (device >= 0 && device < 64) ptx_versions[device].store(version, std::memory_order_relaxed);
    }
    overlap = version >= 90;
  }
  // A block per row of a sequence (G * Hq * Mq), within the grid's y limit;
  // the kernel loops over the rest.
  const int64_t rows = static_cast<int64_t>(params.groups) * params.heads_q * params.seq.max_q_seqlen;
  const int64_t row_blocks = std::min<int64_t>(rows, 65535);
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(std::max<int64_t>(row_blocks, 1)));
  const Error err =
      launch_overlapping(overlap, split_combine_kernel, grid, dim3(gpu::kCombineThreads), 0, stream, params);
  if (err != kSuccess) return status_from(err, "split_combine_kernel", msg);
  FMHA_GPU_CHECK_LAUNCH("split_combine_kernel", msg);
  return FMHA_STATUS_SUCCESS;
}

}  // namespace fmha::gpu
