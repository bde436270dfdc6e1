// Split-K heuristic and work partition (DESIGN 5.1). Pure C++ with no GPU
// header: the core uses it to size plans, the CPU backend to partition each
// run by the actual lengths; GPU plugins compile the same source (it has no
// dependency on the rest of the core) or mirror it in a device-side pass.
#ifndef FMHA_SPLITK_CORE_SCHEDULE_H_
#define FMHA_SPLITK_CORE_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "core/backend_api.h"

namespace fmha::core {

// One contiguous range of one sequence's keys, processed for every K/V head.
struct Piece {
  int32_t batch;     // sequence index
  int32_t kv_begin;  // first key (index within the sequence)
  int32_t kv_end;    // one past the last key
  // Partial slot in the workspace, or -1 when the piece covers the whole
  // sequence and so writes O / LSE directly.
  int32_t slot;
};

// The memory bandwidth per SM (GB/s, peak) from which the CUDA plugin runs
// its wide tile kernel on grids of at most two CTAs per SM (the H200, not
// the H100), and below which the heuristic keeps a uniform batch that
// fills whole layers of the SMs unsplit: one bound for both choices.
inline constexpr double kWideTileMinGbpsPerSm = 30.0;

// The parameters of a BALANCED partition, the knobs autotuning turns:
// `waves` work items per worker that the ranges aim at (0: a single range,
// no sequence split) and the shortest piece `min_piece` in keys. waves < 0
// asks for the heuristic. Schedules the problem fixes (forced split_k,
// batch invariant) have none: waves = -1 after choose_schedule.
struct ScheduleChoice {
  int32_t waves = -1;
  int32_t min_piece = 0;
};

// Fills plan.schedule, split_k, kv_chunk_size, num_ranges, max_partials,
// rows_per_kv_head and the workspace layout (ws_* and workspace_size) from
// plan.problem (defaults resolved), plan.device and the optional host length
// hint. `choice` (optional) asks for a BALANCED partition's parameters
// (ignored for schedules the problem fixes) and receives the ones used.
// Returns SUCCESS or INVALID_ARGUMENT / NOT_SUPPORTED with `message`.
fmha_status choose_schedule(fmha_plan_data &plan, const int32_t *kv_seqlen_hint, std::string &message,
                            ScheduleChoice *choice = nullptr);

// Ranges of a BALANCED plan a run with `total_keys` keys actually uses (the
// plan's num_ranges, but none shorter than its minimum piece).
int64_t effective_ranges(const fmha_plan_data &plan, int64_t total_keys);

// Whether the CUDA plugin runs this plan's forward pass in row pairs (the
// tile kernel with 32 query rows per CTA: native K/V, head dims up to 128,
// more than 16 query rows per K/V head, not MLA). One rule for the
// heuristic's CTA count here and the plugin's kernel choice.
bool uses_row_pairs(const fmha_plan_data &plan);

// Marks the BALANCED cut's arithmetic below for the GPU plugins' device
// code too (no GPU header: the compilers define these macros).
#if defined(__CUDACC__) || defined(__HIPCC__)
#define FMHA_SCHEDULE_HOST_DEVICE __host__ __device__
#else
#define FMHA_SCHEDULE_HOST_DEVICE
#endif

// A BALANCED partition's cut of the batch's keys, concatenated in batch
// order: boundaries at the multiples of range_len, which split the
// sequences they fall strictly inside. The one definition that
// partition(), the GPU scheduling pass and the GPU kernels that cut their
// own range (PieceSource::kInline) share, so that they agree bit for bit.
// `Key` counts keys: int64_t, or int32_t where the caller knows that
// twice the batch's keys fit it (the kernels: 32-bit divisions, fewer
// registers).
template <class Key>
struct BalancedCut {
  Key ranges;     // ranges the run uses (effective_ranges())
  Key range_len;  // keys per range (the last holds at most this); 0: one range, nothing is cut
};

// The cut of `total_keys` keys into at most `num_ranges` ranges of at
// least `min_piece` keys (effective_ranges()).
template <class Key>
FMHA_SCHEDULE_HOST_DEVICE inline BalancedCut<Key> balanced_cut(Key total_keys, Key num_ranges, Key min_piece) {
  Key ranges = total_keys / min_piece;
  ranges = ranges < 1 ? 1 : (ranges > num_ranges ? num_ranges : ranges);
  return BalancedCut<Key>{ranges, ranges > 1 ? (total_keys + ranges - 1) / ranges : 0};
}

// Where a sequence whose keys are [start, start + len) of the
// concatenation falls: the boundaries strictly inside it (`cuts`: it is
// split into cuts + 1 pieces, which take cuts + 1 consecutive slots when
// cuts > 0) and the range of its first piece; piece k lies in range
// first_range + k. A piece belongs to the range holding its first key; an
// empty sequence's one piece to the range at its position (the last range
// for those at the very end).
template <class Key>
struct SequenceCut {
  Key cuts;
  Key first_range;
};

template <class Key>
FMHA_SCHEDULE_HOST_DEVICE inline SequenceCut<Key> sequence_cut(const BalancedCut<Key> &cut, Key start, Key len) {
  if (cut.range_len <= 0) return SequenceCut<Key>{0, 0};
  const Key first = start / cut.range_len;
  return SequenceCut<Key>{len > 0 ? (start + len - 1) / cut.range_len - first : 0,
                          first < cut.ranges - 1 ? first : cut.ranges - 1};
}

// Partial slots a sequence with `cuts` inner boundaries takes.
template <class Key>
FMHA_SCHEDULE_HOST_DEVICE inline Key sequence_slots(Key cuts) {
  return cuts > 0 ? cuts + 1 : 0;
}

// Piece k (0 <= k <= cuts) of sequence `batch` at [start, start + len),
// whose slots start at first_slot: kv_begin and kv_end relative to the
// sequence, slot -1 for an uncut sequence (it writes O directly).
template <class Key>
FMHA_SCHEDULE_HOST_DEVICE inline Piece sequence_piece(const BalancedCut<Key> &cut, int32_t batch, Key start, Key len,
                                                      int32_t first_slot, Key k) {
  const SequenceCut<Key> at = sequence_cut(cut, start, len);
  if (at.cuts == 0) return Piece{batch, 0, static_cast<int32_t>(len), -1};
  // Boundary j (1 <= j <= cuts) inside the sequence is the multiple of
  // range_len after its first key's range, (start / range_len + j).
  const Key first_boundary = (start / cut.range_len + 1) * cut.range_len - start;
  const Key begin = k == 0 ? 0 : first_boundary + (k - 1) * cut.range_len;
  const Key end = k == at.cuts ? len : first_boundary + k * cut.range_len;
  return Piece{batch, static_cast<int32_t>(begin), static_cast<int32_t>(end), first_slot + static_cast<int32_t>(k)};
}

// The pieces of one range r, as a GPU kernel that cuts its own range
// finds them (PieceSource::kInline): since the ranges of consecutive
// sequences never go back, they are sequences first_batch..last_batch
// (none when last_batch < first_batch), one piece each. Only the first
// (head) and the last (tail) can be cut; every one between lies wholly
// inside r, is uncut and writes O directly.
template <class Key>
struct RangeSpan {
  int32_t first_batch;
  int32_t last_batch;
  int32_t head_len;
  int32_t head_slot;  // the head sequence's first slot
  Key head_start;
  int32_t tail_len;
  int32_t tail_slot;
  Key tail_start;
};

// Slots of sequences [b0, b1), the first starting at key `start` of the
// concatenation; kv_len(b) gives the keys of sequence b.
template <class Key, class KvLen>
FMHA_SCHEDULE_HOST_DEVICE Key sequences_slots(const BalancedCut<Key> &cut, int32_t b0, int32_t b1, Key start,
                                              KvLen kv_len) {
  Key slots = 0;
  for (int32_t b = b0; b < b1; ++b) {
    const Key len = static_cast<Key>(kv_len(b));
    slots += sequence_slots(sequence_cut(cut, start, len).cuts);
    start += len;
  }
  return slots;
}

// One thread's share of finding range r's span among `batch` sequences:
// it walks sequences [b0, b1), the first starting at key `start` with
// first slot `slot`, and writes the span's ends that fall there (each end
// falls in one thread's share: the threads' shares must tile [0, batch)).
template <class Key, class KvLen>
FMHA_SCHEDULE_HOST_DEVICE void find_span_ends(const BalancedCut<Key> &cut, Key r, int32_t batch, int32_t b0, int32_t b1,
                                              Key start, int32_t slot, KvLen kv_len, RangeSpan<Key> *span) {
  if (b0 >= b1) return;
  // The range of the previous sequence's last piece (-1: none).
  Key prev_last_range = -1;
  if (b0 > 0) {
    const Key prev_len = static_cast<Key>(kv_len(b0 - 1));
    const SequenceCut<Key> prev = sequence_cut(cut, start - prev_len, prev_len);
    prev_last_range = prev.first_range + prev.cuts;
  }
  for (int32_t b = b0; b < b1; ++b) {
    const Key len = static_cast<Key>(kv_len(b));
    const SequenceCut<Key> at = sequence_cut(cut, start, len);
    const Key last_range = at.first_range + at.cuts;
    if (at.first_range <= r && r <= last_range) {
      if (prev_last_range < r) {
        span->first_batch = b;
        span->head_len = static_cast<int32_t>(len);
        span->head_slot = slot;
        span->head_start = start;
      }
      // The next sequence's first range (sequence_cut of one starting at
      // start + len, whatever its length).
      const Key next_first_range = sequence_cut(cut, start + len, Key{0}).first_range;
      if (b == batch - 1 || next_first_range > r) {
        span->last_batch = b;
        span->tail_len = static_cast<int32_t>(len);
        span->tail_slot = slot;
        span->tail_start = start;
      }
    }
    prev_last_range = last_range;
    slot += static_cast<int32_t>(sequence_slots(at.cuts));
    start += len;
  }
}

// Piece i (0 <= i <= last_batch - first_batch) of range r's span; a
// sequence between the ends has kv_len(b) keys.
template <class Key, class KvLen>
FMHA_SCHEDULE_HOST_DEVICE Piece span_piece(const BalancedCut<Key> &cut, Key r, const RangeSpan<Key> &span, int32_t i,
                                           KvLen kv_len) {
  const int32_t b = span.first_batch + i;
  if (i == 0 || b == span.last_batch) {
    const bool head = i == 0;
    const Key start = head ? span.head_start : span.tail_start;
    const Key len = head ? span.head_len : span.tail_len;
    const Key k = r - sequence_cut(cut, start, len).first_range;
    return sequence_piece(cut, b, start, len, head ? span.head_slot : span.tail_slot, k);
  }
  return Piece{b, 0, static_cast<int32_t>(kv_len(b)), -1};
}

// Number of pieces partition() can produce at most for this plan.
int64_t max_pieces(const fmha_plan_data &plan);

// Cuts the batch into pieces by the actual lengths kv_len[0..B) (each in
// [0, max_kv_seqlen]); writes at most max_pieces(plan) entries ordered by
// (batch, kv_begin) and returns their count. Sequences of length 0 get one
// piece with kv_begin == kv_end (writes O = 0, LSE = -inf). Deterministic:
// depends only on the plan and the lengths (FIXED_CHUNK: on the sequence's
// own length only). Slots are numbered densely from 0 in piece order and
// never exceed plan.max_partials.
int64_t partition(const fmha_plan_data &plan, const int32_t *kv_len, Piece *pieces);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_SCHEDULE_H_
