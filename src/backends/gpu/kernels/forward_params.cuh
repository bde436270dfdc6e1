// Kernel parameters of the split-K forward path and the device functions
// that read the per-run metadata (sequence lengths, query ranges, the work
// partition). One definition shared by the scheduling pass, the forward
// kernel and the combine kernel, so that they agree on every piece.
#ifndef FMHA_SPLITK_BACKENDS_GPU_KERNELS_FORWARD_PARAMS_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_KERNELS_FORWARD_PARAMS_CUH_

#include <cstdint>

#include "backends/gpu/vendor.h"
#include "core/backend_api.h"
#include "core/schedule.h"

namespace fmha::gpu {

using fmha::core::Piece;

// Where each sequence's keys and queries are: the device-side metadata of
// one run (canonical views of backend_api.h, strides in elements).
struct SeqLayout {
  int32_t kv_layout;  // fmha_kv_layout
  int32_t q_layout;   // fmha_q_layout
  int32_t batch;
  int32_t max_kv_seqlen;
  int32_t max_q_seqlen;
  int32_t page_size_log2;  // PAGED / RAGGED
  const int32_t *kv_seqlen;
  int64_t kv_seqlen_stride;
  const int32_t *kv_seqstart;  // GAPPY (required), PAGED (optional)
  int64_t kv_seqstart_stride;
  const int32_t *q_seqstart;  // VARLEN
  int64_t q_seqstart_stride;
  const int32_t *block_table;  // PAGED
  int64_t block_table_stride[2];
  const int32_t *kv_indptr;  // RAGGED
  int64_t kv_indptr_stride;
  const int32_t *kv_indices;
  int64_t kv_indices_stride;
  const int32_t *kv_last_page_len;  // RAGGED, optional
  int64_t kv_last_page_len_stride;
  // FMHA_FLAG_CHECKED: [batch] flags the metadata check (metadata_check.cu)
  // wrote; a nonzero one makes its sequence empty (no keys, no queries), so
  // that nothing of it is read or written. NULL when unchecked: one test.
  const uint8_t *seq_bad;
};

// True when the checked run found sequence b's metadata bad.
__device__ __forceinline__ bool sequence_bad(const SeqLayout &s, int32_t b) {
  return s.seq_bad != nullptr && s.seq_bad[b] != 0;
}

// How the pieces of a run are found.
enum class PieceSource : int32_t {
  // Piece i is chunk i % pieces_per_seq of sequence i / pieces_per_seq, cut
  // at multiples of kv_chunk (UNIFORM; also BALANCED with a single range,
  // as pieces_per_seq 1 and a chunk of max_kv_seqlen). Slot i when there
  // are several chunks per sequence, else -1.
  kUniform = 0,
  // FIXED_CHUNK: as kUniform with pieces_per_seq = chunks of the longest
  // sequence, except that a sequence uses only the chunks its own length
  // needs (the rest exit) and one that fits one chunk writes O directly.
  kFixedChunk = 1,
  // BALANCED: the scheduling pass wrote the pieces, their count and, per
  // range, its first piece. Work item r is range r: all its pieces, one
  // after the other, so that every CTA streams the same number of keys.
  kScheduled = 2,
  // BALANCED over a batch of one sequence: its partition is arithmetic on
  // the one length (the scheduling pass's, bit for bit), so the forward and
  // combine kernels find the pieces themselves and the pass is not
  // launched. pieces_per_seq holds the plan's ranges, kv_chunk the shortest
  // piece; range r is piece r.
  kBalancedSingle = 3,
  // BALANCED over a dense batch (every sequence max_kv_seqlen keys): the
  // pass's partition, bit for bit, by arithmetic, without the pass.
  // pieces_per_seq holds the effective ranges, kv_chunk their length. Range
  // r holds pieces (b, r) of the sequences b it meets, numbered r x
  // (the most a range can meet) + (b - its first sequence). Slots: ranges
  // shorter than a sequence split every sequence, and piece (b, r) takes
  // slot b + r (b + r grows along the partition: distinct, below B +
  // ranges - 1); longer ones put at most one cut k (at k x range length)
  // inside a sequence, whose two pieces take slots 2 (k - 1) and 2 k - 1,
  // and a sequence without a cut writes O directly.
  kBalancedDense = 4,
  // BALANCED over a batch of any lengths whose run merges inside the
  // forward kernel: the scheduling pass's partition, bit for bit, but each
  // CTA cuts its own range r from block-wide prefix sums of the lengths
  // (find_range_span), so the pass is not launched. pieces_per_seq holds
  // the plan's ranges, kv_chunk the shortest piece. Work item r is range r.
  kInline = 5
};

// The scheduling pass's output (kScheduled), in the workspace meta region.
struct ScheduleMeta {
  int32_t num_pieces;
  int32_t num_ranges;  // ranges of this run (<= the plan's num_ranges)
  int64_t range_len;   // keys per range (0: one range); the fused merge finds a piece's siblings by it
};

struct PieceTable {
  PieceSource source;
  int32_t pieces_per_seq;  // kUniform / kFixedChunk
  int32_t kv_chunk;        // kUniform / kFixedChunk
  int32_t reserved;
  const ScheduleMeta *meta;    // kScheduled
  const Piece *pieces;         // kScheduled: [meta->num_pieces]
  const int32_t *range_first;  // kScheduled: [meta->num_ranges + 1]
};

// One piece as a kernel attends it: the piece, its sequence's key count,
// its index in its sequence (o_partial) and `work_lanes`: the CTA's work
// item, one value per lane of each warp (splitk_forward.cuh, WorkLane;
// kInline's range length among them, by which the fused merge finds the
// piece's siblings).
struct PieceAt {
  Piece piece;
  int32_t kv_len;
  int32_t chunk;
  int32_t work_lanes;
};

// Everything one forward launch reads. Tensor strides are in elements of
// the tensor's own type; dims as in the canonical views (the last, head dim,
// is contiguous and left out).
struct ForwardParams {
  SeqLayout seq;
  PieceTable work;

  const void *q;  // [B, Mq, G, Hq, Dqk]
  int64_t q_stride[4];
  const void *k;  // [B, Mkv, G, Hkv, Dqk] or [pages, page_size, G, Hkv, Dqk]
  int64_t k_stride[4];
  const void *v;
  int64_t v_stride[4];

  void *o;  // [B, Mq, G, Hq, Dv], o_elem
  int64_t o_stride[4];
  float *lse;  // [B, G, Hq, Mq]; null when not wanted
  int64_t lse_stride[4];
  int32_t o_elem;  // fmha_elem_type
  int32_t bias_elem;
  const void *bias;  // [B, G, Hq, Mq, Mkv]; null when absent
  int64_t bias_stride[5];
  const float *sinks;  // [G, Hq]; null when absent
  int64_t sinks_stride[2];

  // FMHA_FLAG_WRITE_PARTIALS: chunk s of sequence b goes to index s.
  float *o_partial;  // [S, B, Mq, G, Hq, Dv]
  int64_t o_partial_stride[5];
  float *lse_partial;  // [S, B, G, Hq, Mq]
  int64_t lse_partial_stride[5];
  int32_t write_partials;

  // Workspace partial slots, contiguous: O [slots, G, Hq, Mq, Dv] and LSE
  // [slots, G, Hq, Mq] with Mq = max_q_seqlen.
  float *ws_o;
  float *ws_lse;
  // The merge inside the forward kernel (forward.cu, plan_forward): one
  // counter per (sequence, row tile, group, K/V head), zero before the run
  // and after it; NULL: the combine pass merges.
  uint32_t *merge_counters;

  int32_t groups;
  int32_t heads_q;
  int32_t heads_kv;
  int32_t heads_per_kv;  // Hq / Hkv: query heads sharing one K/V head
  int32_t head_dim_qk;
  int32_t head_dim_v;
  int32_t num_row_tiles;  // ceil(max_q_seqlen * heads_per_kv / the kernel's rows per CTA)

  int32_t mask;  // fmha_mask_kind
  int32_t window_left;
  int32_t window_right;

  // Quantised K/V (kv_quant != FMHA_KV_QUANT_NONE: the quantised kernels).
  int32_t kv_quant;  // fmha_kv_quant
  int32_t kv_quant_groups;
  int32_t fp8_format;
  int32_t kv_scale_kind;
  int32_t kv_scale_granularity;
  int32_t kv_copy16;    // packed rows and strides 16-byte aligned (else 4-byte copies)
  int32_t kv_over16;    // int4 one-group rows: their aligned 16-byte chunks may be copied whole
  const void *k_scale;  // fp8 scales: [B or pages, rows, G, Hkv], [G, Hkv] or [1]
  int64_t k_scale_stride[4];
  const void *v_scale;
  int64_t v_scale_stride[4];
  // FMHA_FLAG_FP8_QK: Q holds fp8 codes; q_scale [B, Mq, G, Hq], [G, Hq] or [1].
  int32_t q_fp8;
  int32_t q_scale_granularity;
  const float *q_scale;
  int64_t q_scale_stride[4];
  // FMHA_FLAG_FP8_PV: P rounded to fp8 per row and K/V tile.
  int32_t fp8_pv;
  int32_t fp8_bias;  // 7 (E4M3FN) or 8 (E4M3FNUZ)
  float fp8_max;     // 448 or 240

  // Scores in the kernel are in log2 units: t = log2(e) * (softcap(scale *
  // q.k) + bias). Without soft-capping t = q.k * score_scale (scale * log2e
  // folded in); with it t = softcap_log2 * tanh(q.k * score_scale), where
  // score_scale = scale / cap and softcap_log2 = cap * log2e.
  float score_scale;
  float softcap_log2;
  int32_t has_softcap;
};

// Shared memory of the merge inside the forward kernel for a row tile of
// `rows` rows whose sequence has `slots` partial slots: the "last CTA"
// flag (16 bytes), then each row's slot LSE values (then their weights)
// and its merged LSE. Taken from the kernel's dynamic shared memory, free
// once the CTA's piece is done: static shared memory, even 4 bytes, adds
// 128 to every CTA and cost the D 256 tile kernel a resident CTA per SM
// (1.6x slower on the H200, run 65).
constexpr size_t kMergeFlagBytes = 16;
__host__ __device__ constexpr size_t merge_smem_bytes(int64_t slots, int64_t rows) {
  return kMergeFlagBytes + static_cast<size_t>(rows * (slots + 1)) * sizeof(float);
}

// kInline: the shared memory a CTA of `threads` threads takes to cut its
// own range: the block scans' storage and the span (at most 8 bytes per
// thread and 256 more), then 4 bytes per sequence for the batch's
// lengths. plan_forward chooses kInline only where the kernel's dynamic
// shared memory holds this much.
__host__ __device__ constexpr size_t range_span_reserved_bytes(int threads) {
  return static_cast<size_t>(threads) * 8 + 256;
}
__host__ __device__ constexpr size_t range_span_smem_bytes(int64_t batch, int threads) {
  return range_span_reserved_bytes(threads) + static_cast<size_t>(batch) * sizeof(int32_t);
}

// Keys of sequence b, clamped to [0, max_kv_seqlen]: lengths only live on
// the device, and a bad one must not make the partition exceed the bounds
// the workspace was sized for.
// Where sequence b's keys start: its first K/V row (GAPPY), its logical
// start in the block table (PAGED, optional), its first kv_indices entry
// (RAGGED); 0 otherwise. The tile loaders add the key index to it.
__device__ __forceinline__ int64_t sequence_key_origin(const SeqLayout &s, int32_t b) {
  switch (s.kv_layout) {
    case FMHA_KV_GAPPY:
      return s.kv_seqstart[b * s.kv_seqstart_stride];
    case FMHA_KV_PAGED:
      return s.kv_seqstart != nullptr ? s.kv_seqstart[b * s.kv_seqstart_stride] : 0;
    case FMHA_KV_RAGGED:
      return s.kv_indptr[b * s.kv_indptr_stride];
    default:
      return 0;
  }
}

// Where key `key` of sequence b (whose sequence_key_origin() is `origin`)
// sits in a [B or pages, rows] K/V view: *outer is its batch index, page, or
// 0 (GAPPY), *inner its row there. Paged and ragged: one table lookup.
__device__ __forceinline__ void key_row_location(const SeqLayout &s, int64_t b, int64_t origin, int32_t key,
                                                 int64_t *outer, int64_t *inner) {
  const int32_t page_mask = (1 << s.page_size_log2) - 1;
  if (s.kv_layout == FMHA_KV_PAGED) {
    const int64_t position = origin + key;
    *outer =
        __ldg(s.block_table + b * s.block_table_stride[0] + (position >> s.page_size_log2) * s.block_table_stride[1]);
    *inner = position & page_mask;
  } else if (s.kv_layout == FMHA_KV_RAGGED) {
    *outer = __ldg(s.kv_indices + (origin + (key >> s.page_size_log2)) * s.kv_indices_stride);
    *inner = key & page_mask;
  } else {
    *outer = s.kv_layout == FMHA_KV_GAPPY ? 0 : b;
    *inner = origin + key;
  }
}

__device__ __forceinline__ int32_t kv_length(const SeqLayout &s, int32_t b) {
  if (sequence_bad(s, b)) return 0;
  int64_t len;
  switch (s.kv_layout) {
    case FMHA_KV_DENSE:
      return s.max_kv_seqlen;
    case FMHA_KV_RAGGED: {
      const int64_t pages =
          static_cast<int64_t>(s.kv_indptr[(b + 1) * s.kv_indptr_stride]) - s.kv_indptr[b * s.kv_indptr_stride];
      const int64_t page_size = int64_t{1} << s.page_size_log2;
      const int64_t last =
          s.kv_last_page_len != nullptr ? s.kv_last_page_len[b * s.kv_last_page_len_stride] : page_size;
      len = pages > 0 ? (pages - 1) * page_size + last : 0;
      break;
    }
    default:  // PADDED, GAPPY, PAGED
      len = s.kv_seqlen[b * s.kv_seqlen_stride];
      break;
  }
  return static_cast<int32_t>(len < 0 ? 0 : (len > s.max_kv_seqlen ? s.max_kv_seqlen : len));
}

// The queries of sequence b: rows [row0, row0 + count) of batch index
// `batch` in the Q / O / LSE views.
struct QueryRange {
  int32_t batch;
  int32_t row0;
  int32_t count;
};

__device__ __forceinline__ QueryRange query_range(const SeqLayout &s, int32_t b) {
  // A bad sequence has no queries: its O / LSE rows are not written (with a
  // bad q_seqstart they might not even be in bounds).
  if (sequence_bad(s, b)) return QueryRange{s.q_layout != FMHA_Q_VARLEN ? b : 0, 0, 0};
  if (s.q_layout != FMHA_Q_VARLEN) return QueryRange{b, 0, s.max_q_seqlen};
  const int32_t start = s.q_seqstart[b * s.q_seqstart_stride];
  int32_t count = s.q_seqstart[(b + 1) * s.q_seqstart_stride] - start;
  count = count < 0 ? 0 : (count > s.max_q_seqlen ? s.max_q_seqlen : count);
  return QueryRange{0, start, count};
}

// The balanced partition of one sequence of kv_len keys into at most
// `ranges` ranges of at least `min_piece` keys (as effective_ranges() in
// schedule.cpp and the scheduling pass): *range_len keys per piece (0: one
// piece, the whole sequence); returns the pieces (>= 1).
__device__ __forceinline__ int32_t single_sequence_pieces(int32_t kv_len, int32_t ranges, int32_t min_piece,
                                                          int64_t *range_len) {
  int64_t used = kv_len / min_piece;
  used = used < 1 ? 1 : (used > ranges ? ranges : used);
  *range_len = used > 1 ? (static_cast<int64_t>(kv_len) + used - 1) / used : 0;
  if (*range_len == 0 || kv_len == 0) return 1;
  return static_cast<int32_t>((kv_len - 1) / *range_len + 1);
}

// Chunks FIXED_CHUNK cuts a sequence of kv_len keys into (>= 1).
__device__ __forceinline__ int32_t fixed_chunks(int32_t kv_len, int32_t kv_chunk) {
  const int32_t chunks = static_cast<int32_t>((static_cast<int64_t>(kv_len) + kv_chunk - 1) / kv_chunk);
  return chunks > 1 ? chunks : 1;
}

// kBalancedDense: the concatenated keys of range r, [*begin, *end).
__device__ __forceinline__ void dense_range(const PieceTable &w, const SeqLayout &s, int32_t r, int64_t *begin,
                                            int64_t *end) {
  const int64_t total = static_cast<int64_t>(s.batch) * s.max_kv_seqlen;
  *begin = static_cast<int64_t>(r) * w.kv_chunk;
  *end = *begin + w.kv_chunk < total ? *begin + w.kv_chunk : total;
}

// kBalancedDense: the most pieces (sequences) one range meets.
__device__ __forceinline__ int32_t dense_pieces_per_range(const PieceTable &w, const SeqLayout &s) {
  return w.kv_chunk / s.max_kv_seqlen + 2;
}

// kBalancedDense: the cut inside sequence b when ranges are at least a
// sequence long (the first multiple of the range length past its start),
// or 0 when none falls inside it.
__device__ __forceinline__ int64_t dense_cut(const PieceTable &w, const SeqLayout &s, int32_t b) {
  const int64_t len = s.max_kv_seqlen;
  const int64_t cut = b * len / w.kv_chunk + 1;
  return cut * w.kv_chunk < (b + 1) * len ? cut : 0;
}

// The pieces of forward work item `item`: [*first, *first + count).
__device__ __forceinline__ int32_t item_pieces(const PieceTable &w, const SeqLayout &s, int32_t item, int32_t *first) {
  if (w.source == PieceSource::kBalancedDense) {
    int64_t begin, end;
    dense_range(w, s, item, &begin, &end);
    if (item >= w.pieces_per_seq || begin >= end) return 0;
    *first = item * dense_pieces_per_range(w, s);
    return static_cast<int32_t>((end - 1) / s.max_kv_seqlen - begin / s.max_kv_seqlen + 1);
  }
  if (w.source == PieceSource::kBalancedSingle) {
    int64_t range_len;
    const int32_t pieces = single_sequence_pieces(kv_length(s, 0), w.pieces_per_seq, w.kv_chunk, &range_len);
    *first = item;
    return item < pieces ? 1 : 0;
  }
  if (w.source != PieceSource::kScheduled) {
    *first = item;
    return 1;
  }
  if (item >= w.meta->num_ranges) return 0;
  *first = w.range_first[item];
  return w.range_first[item + 1] - *first;
}

// Piece `index` of the partition (fmha::core::partition's, bit for bit),
// with the length of its sequence; false when there is no such piece.
// `chunk` is the piece's index within its sequence (for o_partial).
// (kInline: span_piece.)
__device__ __forceinline__ bool find_piece(const PieceTable &w, const SeqLayout &s, int32_t index, PieceAt *at) {
  Piece *const piece = &at->piece;
  int32_t *const seq_kv_len = &at->kv_len;
  int32_t *const chunk = &at->chunk;
  if (w.source == PieceSource::kScheduled) {
    *piece = w.pieces[index];
    *seq_kv_len = kv_length(s, piece->batch);
    *chunk = 0;
    return true;
  }
  if (w.source == PieceSource::kBalancedDense) {
    const int32_t per_range = dense_pieces_per_range(w, s);
    const int32_t r = index / per_range;
    int64_t begin, end;
    dense_range(w, s, r, &begin, &end);
    const int64_t len = s.max_kv_seqlen;
    const int32_t b = static_cast<int32_t>(begin / len) + index % per_range;
    const int64_t seq_start = b * len;
    *seq_kv_len = static_cast<int32_t>(len);
    *chunk = 0;
    piece->batch = b;
    piece->kv_begin = static_cast<int32_t>((begin > seq_start ? begin : seq_start) - seq_start);
    piece->kv_end = static_cast<int32_t>((end < seq_start + len ? end : seq_start + len) - seq_start);
    if (w.kv_chunk < len) {
      piece->slot = b + r;
    } else {
      const int64_t cut = dense_cut(w, s, b);
      piece->slot = cut == 0 ? -1 : static_cast<int32_t>(2 * (cut - 1) + (r == cut ? 1 : 0));
    }
    return true;
  }
  if (w.source == PieceSource::kBalancedSingle) {
    const int32_t len = kv_length(s, 0);
    int64_t range_len;
    const int32_t pieces = single_sequence_pieces(len, w.pieces_per_seq, w.kv_chunk, &range_len);
    if (index >= pieces) return false;
    *seq_kv_len = len;
    *chunk = index;
    const int64_t begin = range_len * index;
    const int64_t end = pieces == 1 ? len : begin + range_len;
    piece->batch = 0;
    piece->kv_begin = static_cast<int32_t>(begin < len ? begin : len);
    piece->kv_end = static_cast<int32_t>(end < len ? end : len);
    piece->slot = pieces == 1 ? -1 : index;
    return true;
  }
  const int32_t b = index / w.pieces_per_seq;
  const int32_t c = index % w.pieces_per_seq;
  const int32_t len = kv_length(s, b);
  *seq_kv_len = len;
  *chunk = c;
  int32_t chunks = w.pieces_per_seq;
  if (w.source == PieceSource::kFixedChunk) {
    chunks = fixed_chunks(len, w.kv_chunk);
    if (c >= chunks) return false;
  }
  const int64_t begin = static_cast<int64_t>(c) * w.kv_chunk;
  const int64_t end = begin + w.kv_chunk;
  piece->batch = b;
  piece->kv_begin = static_cast<int32_t>(begin < len ? begin : len);
  piece->kv_end = static_cast<int32_t>(end < len ? end : len);
  piece->slot = chunks == 1 ? -1 : index;
  return true;
}

// The partial slots to merge for combine item `index` (a sequence for
// kUniform / kFixedChunk, a piece for kScheduled): slots [first, first +
// count) of sequence *batch, in piece order; count 0 when the item has
// nothing to merge (its sequence was written directly, or it is not the
// first piece of its sequence).
__device__ __forceinline__ int32_t split_slots(const PieceTable &w, const SeqLayout &s, int32_t index, int32_t *batch,
                                               int32_t *first) {
  if (w.source == PieceSource::kScheduled) {
    const int32_t num_pieces = w.meta->num_pieces;
    if (index >= num_pieces) return 0;
    const Piece head = w.pieces[index];
    if (head.slot < 0 || head.kv_begin != 0) return 0;
    int32_t count = 1;
    while (index + count < num_pieces && w.pieces[index + count].batch == head.batch) ++count;
    *batch = head.batch;
    *first = head.slot;
    return count;
  }
  if (w.source == PieceSource::kBalancedDense) {
    if (index >= s.batch) return 0;
    const int64_t len = s.max_kv_seqlen;
    *batch = index;
    if (w.kv_chunk >= len) {
      const int64_t cut = dense_cut(w, s, index);
      *first = static_cast<int32_t>(2 * (cut - 1));
      return cut == 0 ? 0 : 2;
    }
    const int64_t first_range = index * len / w.kv_chunk;
    const int64_t last_range = ((index + 1) * len - 1) / w.kv_chunk;
    *first = index + static_cast<int32_t>(first_range);
    return static_cast<int32_t>(last_range - first_range + 1);
  }
  if (w.source == PieceSource::kBalancedSingle) {
    if (index != 0) return 0;
    int64_t range_len;
    const int32_t pieces = single_sequence_pieces(kv_length(s, 0), w.pieces_per_seq, w.kv_chunk, &range_len);
    *batch = 0;
    *first = 0;
    return pieces > 1 ? pieces : 0;
  }
  *batch = index;
  *first = index * w.pieces_per_seq;
  if (w.source == PieceSource::kUniform) return w.pieces_per_seq > 1 ? w.pieces_per_seq : 0;
  const int32_t chunks = fixed_chunks(kv_length(s, index), w.kv_chunk);
  return chunks > 1 ? chunks : 0;
}

// The partial slots of the sequence of `piece` (the piece `find_piece`
// returned, of a sequence of kv_len keys) that the fused merge counts and
// merges: slots [*first, *first + count) in piece order; 0 when the piece
// writes O directly. Every piece of a sequence gives the same answer.
// kScheduled / kInline: the partition cut the concatenated keys at
// multiples of range_len (the pass's, or kInline's `inline_range_len`),
// so a split sequence's first piece holds f keys (up to its first cut),
// each later one range_len (the last at most), and
// its slots are consecutive: from any piece's kv_begin, f and the piece's
// index k in its sequence follow, and with them the count and first slot.
__device__ __forceinline__ int32_t piece_slots(const PieceTable &w, const SeqLayout &s, const Piece &piece,
                                               int32_t kv_len, int32_t inline_range_len, int32_t *first) {
  if (w.source != PieceSource::kScheduled && w.source != PieceSource::kInline) {
    int32_t batch;
    return split_slots(w, s, piece.batch, &batch, first);
  }
  const int64_t range_len = w.source == PieceSource::kInline ? inline_range_len : w.meta->range_len;
  if (piece.slot < 0 || range_len <= 0) return 0;
  const int64_t begin = piece.kv_begin;
  const int64_t head_keys = begin == 0 ? piece.kv_end : (begin - 1) % range_len + 1;  // f
  const int64_t index = begin == 0 ? 0 : (begin - head_keys) / range_len + 1;         // k
  *first = piece.slot - static_cast<int32_t>(index);
  return 1 + static_cast<int32_t>((kv_len - head_keys + range_len - 1) / range_len);
}

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_KERNELS_FORWARD_PARAMS_CUH_
