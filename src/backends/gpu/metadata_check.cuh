// Checked mode (FMHA_FLAG_CHECKED) of the CUDA forward path: a kernel run
// before the forward kernels validates every sequence's device-side metadata
// (lengths against the capacity, page ids against the page count, offsets
// monotonic and in range), flags each bad sequence so that the forward path
// treats it as empty (SeqLayout::seq_bad), and records the first bad
// sequence (the lowest index) in the workspace, where
// fmha_splitk_check_status() finds it (read_check_status(), metadata_check.h).
//
// Workspace: the checked region is the workspace's last one, found from its
// end (checked_region_offset()): a CheckedHeader, then one flag byte per
// sequence. Every checked run zeroes it before the check.
#ifndef FMHA_SPLITK_BACKENDS_GPU_METADATA_CHECK_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_METADATA_CHECK_CUH_

#include <cstddef>
#include <cstdint>

#include "backends/gpu/kernels/forward_params.cuh"
#include "backends/gpu/metadata_check.h"
#include "backends/gpu/vendor.h"
#include "core/backend_api.h"

namespace fmha::gpu {

// What was wrong with a sequence (the first check it failed).
enum class ViolationKind : int32_t {
  kNone = 0,
  kKvSeqlenNegative = 1,     // kv_seqlen[b] < 0
  kKvSeqlenCapacity = 2,     // PADDED: kv_seqlen[b] > rows per sequence
  kKvSeqlenBound = 3,        // GAPPY / PAGED: kv_seqlen[b] > max_kv_seqlen
  kKvSeqstartNegative = 4,   // kv_seqstart[b] < 0
  kGappyRange = 5,           // kv_seqstart[b] + kv_seqlen[b] > rows of K/V
  kPagedReach = 6,           // kv_seqstart + kv_seqlen past the block-table columns
  kBlockTable = 7,           // block_table[b][c] outside [0, num_pages)
  kIndptrNegative = 8,       // kv_indptr[b] < 0
  kIndptrMonotonic = 9,      // kv_indptr[b + 1] < kv_indptr[b]
  kIndptrRange = 10,         // kv_indptr[b + 1] > entries of kv_indices
  kLastPageLen = 11,         // kv_last_page_len[b] outside [0, page_size]
  kRaggedCapacity = 12,      // RAGGED: keys > max_kv_seqlen
  kKvIndices = 13,           // kv_indices[i] outside [0, num_pages)
  kQSeqstartNegative = 14,   // q_seqstart[b] < 0
  kQSeqstartMonotonic = 15,  // q_seqstart[b + 1] < q_seqstart[b]
  kQSeqstartRange = 16,      // q_seqstart[b + 1] > total_q
  kQCount = 17               // q_seqstart[b + 1] - q_seqstart[b] > max_q_seqlen
};

// `status` when a record is present: any other value (zero after the run's
// memset, or whatever an unused workspace holds) means none, so a workspace
// no checked run has written reads as clean.
constexpr uint32_t kViolationRecorded = 0x43484b44u;  // "CHKD"

// The first bad sequence of a run, as the check kernel leaves it.
struct ViolationRecord {
  uint32_t status;         // kViolationRecorded, or anything else: nothing recorded
  int32_t kind;            // ViolationKind
  int32_t sequence;        // the lowest bad sequence
  uint32_t bad_sequences;  // how many sequences failed
  int64_t index;           // the entry: block_table column, kv_indices / kv_indptr / q_seqstart index
  int64_t value;           // the value found there
  int64_t limit;           // what it was checked against
  int64_t other;           // a second value the message needs (kv_seqstart, kv_seqlen)
};

// The region's header: the record and the check kernel's own counters.
struct CheckedHeader {
  ViolationRecord record;
  uint32_t blocks_done;  // blocks of the check kernel that finished
  // INT32_MAX - (lowest bad sequence), by atomicMax, so that the zeroed
  // region means "none" without a second initialising pass.
  uint32_t first_bad_key;
  uint32_t reserved[2];
};

// Bytes of the checked region for `batch` sequences (a multiple of 256).
constexpr size_t checked_region_bytes(int64_t batch) {
  return (sizeof(CheckedHeader) + static_cast<size_t>(batch < 0 ? 0 : batch) + 255) / 256 * 256;
}

// Where the region starts in the workspace: it is the last region.
inline size_t checked_region_offset(const fmha_plan_data &plan) {
  return plan.workspace_size - checked_region_bytes(plan.problem.batch);
}

inline const uint8_t *checked_seq_flags(const uint8_t *region) { return region + sizeof(CheckedHeader); }

// The capacities the metadata is checked against (from the plan and the
// run's canonical views).
struct MetadataLimits {
  int64_t kv_capacity;     // PADDED: K/V rows per sequence
  int64_t kv_rows;         // GAPPY: rows of K/V
  int64_t num_pages;       // PAGED / RAGGED
  int64_t table_columns;   // PAGED: block_table columns
  int64_t kv_indices_len;  // RAGGED: entries of kv_indices
  int64_t total_q;         // VARLEN: rows of Q
};

// Zeroes the checked region at `region` and launches the check on `stream`
// (graph capturable: a memset node and a kernel node).
fmha_status launch_metadata_check(const SeqLayout &seq, const MetadataLimits &limits, uint8_t *region, Stream stream,
                                  fmha_msg msg);

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_METADATA_CHECK_CUH_
