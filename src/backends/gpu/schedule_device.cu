// BALANCED partition on the device, on the lengths the run finds in
// device memory: the cut of fmha::core::partition (schedule.cpp), by the
// same functions (core::balanced_cut, sequence_cut, sequence_piece), so
// that the two agree bit for bit. The batch's keys, concatenated, are cut
// at multiples of range_len = ceil(total / ranges); a sequence containing
// a cut is split there and its pieces take consecutive partial slots. A
// piece belongs to the range holding its first key: every range has
// range_len keys (the last one at most), which the forward kernel turns
// into equal CTAs.
#include <cstdint>

#include "backends/gpu/schedule_device.cuh"
#include "backends/gpu/status.h"
#include "backends/gpu/vendor/block.cuh"

namespace fmha::gpu {
namespace {

constexpr int kScheduleThreads = 512;

// Pieces and slots of one sequence, packed in one int64 (pieces high,
// slots low) so that one block scan gives both; each total stays below
// 2^31 (max_pieces, max_partials are int32 in the plan).
__device__ __forceinline__ int64_t pack_counts(int64_t pieces, int64_t slots) { return (pieces << 32) | slots; }

struct MaxOp {
  __device__ __forceinline__ int64_t operator()(int64_t a, int64_t b) const { return a > b ? a : b; }
};

__global__ void __launch_bounds__(kScheduleThreads)
    balanced_schedule_kernel(const FMHA_GPU_GRID_CONSTANT SeqLayout seq, int32_t num_ranges, int32_t min_piece_keys,
                             ScheduleMeta *meta, Piece *pieces, int32_t *range_first) {
  using Block = BlockInt64<kScheduleThreads>;
  __shared__ typename Block::TempStorage temp;
  __shared__ int64_t shared_total;
  const int tid = static_cast<int>(threadIdx.x);

  int64_t keys = 0;
  for (int32_t b = tid; b < seq.batch; b += kScheduleThreads) keys += kv_length(seq, b);
  const int64_t block_total = Block(temp).Sum(keys);
  if (tid == 0) shared_total = block_total;
  __syncthreads();
  const int64_t total_keys = shared_total;

  // No range shorter than the minimum piece; a single range cuts nothing.
  const core::BalancedCut<int64_t> cut = core::balanced_cut<int64_t>(total_keys, num_ranges, min_piece_keys);

  int64_t keys_before = 0;         // keys of the sequences of earlier rounds
  int64_t counts_before = 0;       // packed pieces / slots of earlier rounds
  int64_t last_range_before = -1;  // range of the last piece of earlier rounds
  for (int32_t base = 0; base < seq.batch; base += kScheduleThreads) {
    const int32_t b = base + tid;
    const bool active = b < seq.batch;
    const int64_t len = active ? kv_length(seq, b) : 0;
    int64_t seq_start;
    int64_t round_keys;
    Block(temp).ExclusiveSum(len, seq_start, round_keys);
    __syncthreads();
    seq_start += keys_before;
    // The boundaries strictly inside the sequence, and the range of its
    // first piece (its k-th piece lies in range first_range + k).
    const core::SequenceCut<int64_t> at = core::sequence_cut(cut, seq_start, len);
    const int64_t own_counts = active ? pack_counts(at.cuts + 1, core::sequence_slots(at.cuts)) : 0;
    int64_t counts;
    int64_t round_counts;
    Block(temp).ExclusiveSum(own_counts, counts, round_counts);
    __syncthreads();
    counts += counts_before;
    int64_t prev_range;  // range of the piece before this sequence's first
    int64_t round_last_range;
    Block(temp).ExclusiveScan(active ? at.first_range + at.cuts : -1, prev_range, last_range_before, MaxOp(),
                              round_last_range);
    __syncthreads();

    if (active) {
      const int64_t first_piece = counts >> 32;
      const int32_t first_slot = static_cast<int32_t>(counts & 0xffffffff);
      for (int64_t k = 0; k <= at.cuts; ++k) {
        pieces[first_piece + k] = core::sequence_piece(cut, b, seq_start, len, first_slot, k);
        // Ranges (prev_range, first_range + k] start at this piece.
        for (int64_t r = prev_range + 1; r <= at.first_range + k; ++r)
          range_first[r] = static_cast<int32_t>(first_piece + k);
        prev_range = at.first_range + k;
      }
    }
    keys_before += round_keys;
    counts_before += round_counts;
    last_range_before = max(last_range_before, round_last_range);
  }
  if (tid == 0) {
    const int32_t num_pieces = static_cast<int32_t>(counts_before >> 32);
    for (int64_t r = last_range_before + 1; r <= cut.ranges; ++r) range_first[r] = num_pieces;
    meta->num_pieces = num_pieces;
    meta->num_ranges = static_cast<int32_t>(cut.ranges);
    meta->range_len = cut.range_len;
  }
}

}  // namespace

fmha_status launch_balanced_schedule(const SeqLayout &seq, int32_t num_ranges, int32_t min_piece_keys,
                                     ScheduleMeta *meta, Piece *pieces, int32_t *range_first, Stream stream,
                                     fmha_msg msg) {
  balanced_schedule_kernel<<<1, kScheduleThreads, 0, stream>>>(seq, num_ranges, min_piece_keys, meta, pieces,
                                                               range_first);
  FMHA_GPU_CHECK_LAUNCH("balanced_schedule_kernel", msg);
  return FMHA_STATUS_SUCCESS;
}

}  // namespace fmha::gpu
