// The metadata check of checked runs (metadata_check.cuh): one warp per
// sequence, the scalar checks on every lane (same addresses: one
// transaction), the page-id checks spread over the lanes. The last block to
// finish writes the record of the lowest bad sequence, so that the report
// does not depend on which block ran first.
#include <cstdint>
#include <cstdio>
#include <limits>

#include "backends/gpu/metadata_check.cuh"
#include "backends/gpu/status.h"

namespace fmha::gpu {
namespace {

constexpr int kCheckWarps = 8;
constexpr int kCheckThreads = kCheckWarps * kWarpSize;
// Enough blocks to cover a large batch in a few passes; the warps loop.
constexpr int64_t kMaxCheckBlocks = 1024;
constexpr uint32_t kNoPage = 0xffffffffu;

struct Violation {
  ViolationKind kind;
  int64_t index;
  int64_t value;
  int64_t limit;
  int64_t other;
};

__device__ __forceinline__ Violation violation(ViolationKind kind, int64_t index, int64_t value, int64_t limit,
                                               int64_t other = 0) {
  return Violation{kind, index, value, limit, other};
}

__device__ __forceinline__ int64_t load(const int32_t *base, int64_t stride, int64_t i) {
  return static_cast<int64_t>(base[i * stride]);
}

// The first entry of `entries` [first, last] (a lane takes every kWarpSize-th) that
// is not a page id, as (index, value); index kNoPage when all are. Uniform
// across the warp.
template <class Entry>
__device__ __forceinline__ bool first_bad_page(int64_t first, int64_t last, int64_t num_pages, int lane, Entry entry,
                                               int64_t *index, int64_t *value) {
  uint32_t bad = kNoPage;
  for (int64_t i = first + lane; i <= last; i += kWarpSize) {
    const int64_t page = entry(i);
    if (page < 0 || page >= num_pages) {
      bad = static_cast<uint32_t>(i - first);
      break;  // later entries of this lane come after it
    }
  }
  bad = warp_min(bad);
  if (bad == kNoPage) return false;
  *index = first + bad;
  *value = entry(first + bad);
  return true;
}

// The first check sequence b fails (kind kNone when none). Every lane of
// the warp calls it and gets the same answer. Entries are read only once
// the checks before have shown them in bounds (the views' shapes are the
// core's: [B] and [B + 1] arrays, block_table [B, columns], kv_indices
// [kv_indices_len]).
__device__ Violation check_sequence(const SeqLayout &s, const MetadataLimits &m, int32_t b, int lane) {
  const int64_t page_size = int64_t{1} << s.page_size_log2;
  switch (s.kv_layout) {
    case FMHA_KV_PADDED:
    case FMHA_KV_GAPPY:
    case FMHA_KV_PAGED: {
      const int64_t len = load(s.kv_seqlen, s.kv_seqlen_stride, b);
      if (len < 0) return violation(ViolationKind::kKvSeqlenNegative, b, len, 0);
      if (s.kv_layout == FMHA_KV_PADDED) {
        if (len > m.kv_capacity) return violation(ViolationKind::kKvSeqlenCapacity, b, len, m.kv_capacity);
        break;
      }
      if (len > s.max_kv_seqlen) return violation(ViolationKind::kKvSeqlenBound, b, len, s.max_kv_seqlen);
      const bool has_start = s.kv_seqstart != nullptr;  // required for GAPPY (the core checks)
      const int64_t start = has_start ? load(s.kv_seqstart, s.kv_seqstart_stride, b) : 0;
      if (start < 0) return violation(ViolationKind::kKvSeqstartNegative, b, start, 0);
      if (s.kv_layout == FMHA_KV_GAPPY) {
        if (start + len > m.kv_rows) return violation(ViolationKind::kGappyRange, b, start, m.kv_rows, len);
        break;
      }
      if (len == 0) break;
      const int64_t reach = m.table_columns * page_size;  // keys one block-table row maps
      if (start + len > reach) return violation(ViolationKind::kPagedReach, b, start + len, reach, start);
      int64_t column = 0, page = 0;
      const int32_t *row = s.block_table + b * s.block_table_stride[0];
      if (first_bad_page(
              start >> s.page_size_log2, (start + len - 1) >> s.page_size_log2, m.num_pages, lane,
              [&](int64_t c) { return load(row, s.block_table_stride[1], c); }, &column, &page))
        return violation(ViolationKind::kBlockTable, column, page, m.num_pages);
      break;
    }
    case FMHA_KV_RAGGED: {
      const int64_t begin = load(s.kv_indptr, s.kv_indptr_stride, b);
      const int64_t end = load(s.kv_indptr, s.kv_indptr_stride, b + 1);
      if (begin < 0) return violation(ViolationKind::kIndptrNegative, b, begin, 0);
      if (end < begin) return violation(ViolationKind::kIndptrMonotonic, b + 1, end, begin);
      if (end > m.kv_indices_len) return violation(ViolationKind::kIndptrRange, b + 1, end, m.kv_indices_len);
      const int64_t pages = end - begin;
      if (pages == 0) break;
      int64_t last = page_size;
      if (s.kv_last_page_len != nullptr) {
        last = load(s.kv_last_page_len, s.kv_last_page_len_stride, b);
        if (last < 0 || last > page_size) return violation(ViolationKind::kLastPageLen, b, last, page_size);
      }
      const int64_t len = (pages - 1) * page_size + last;
      if (len > s.max_kv_seqlen) return violation(ViolationKind::kRaggedCapacity, b, len, s.max_kv_seqlen);
      if (len == 0) break;
      int64_t index = 0, page = 0;
      // Only the pages the keys use are read (a last page of length 0 is not).
      if (first_bad_page(
              begin, begin + (len + page_size - 1) / page_size - 1, m.num_pages, lane,
              [&](int64_t i) { return load(s.kv_indices, s.kv_indices_stride, i); }, &index, &page))
        return violation(ViolationKind::kKvIndices, index, page, m.num_pages);
      break;
    }
    default:  // DENSE: no device-side metadata
      break;
  }
  if (s.q_layout == FMHA_Q_VARLEN) {
    const int64_t begin = load(s.q_seqstart, s.q_seqstart_stride, b);
    const int64_t end = load(s.q_seqstart, s.q_seqstart_stride, b + 1);
    if (begin < 0) return violation(ViolationKind::kQSeqstartNegative, b, begin, 0);
    if (end < begin) return violation(ViolationKind::kQSeqstartMonotonic, b + 1, end, begin);
    if (end > m.total_q) return violation(ViolationKind::kQSeqstartRange, b + 1, end, m.total_q);
    if (end - begin > s.max_q_seqlen) return violation(ViolationKind::kQCount, b, end - begin, s.max_q_seqlen);
  }
  return violation(ViolationKind::kNone, 0, 0, 0);
}

__global__ void __launch_bounds__(kCheckThreads)
    metadata_check_kernel(const FMHA_GPU_GRID_CONSTANT SeqLayout seq,
                          const FMHA_GPU_GRID_CONSTANT MetadataLimits limits, CheckedHeader *header, uint8_t *seq_bad) {
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kCheckWarps + warp; b < seq.batch;
       b += static_cast<int64_t>(gridDim.x) * kCheckWarps) {
    const Violation v = check_sequence(seq, limits, static_cast<int32_t>(b), lane);
    if (v.kind != ViolationKind::kNone && lane == 0) {
      seq_bad[b] = 1;
      atomicAdd(&header->record.bad_sequences, 1u);
      atomicMax(&header->first_bad_key, static_cast<uint32_t>(std::numeric_limits<int32_t>::max() - b));
    }
  }

  // The last block to finish sees every block's atomics (the fence orders
  // each block's before its ticket) and writes the record.
  __shared__ bool last_block;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last_block = atomicAdd(&header->blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last_block || warp != 0) return;
  const uint32_t key = atomicAdd(&header->first_bad_key, 0u);
  if (key == 0) return;
  const int32_t b = std::numeric_limits<int32_t>::max() - static_cast<int32_t>(key);
  // The metadata does not change during the run: the same answer again.
  const Violation v = check_sequence(seq, limits, b, lane);
  if (lane != 0) return;
  ViolationRecord &r = header->record;
  r.kind = static_cast<int32_t>(v.kind);
  r.sequence = b;
  r.index = v.index;
  r.value = v.value;
  r.limit = v.limit;
  r.other = v.other;
  __threadfence();
  r.status = kViolationRecorded;
}

// The message of a record (the field, the sequence, the value, the limit).
void describe(const ViolationRecord &r, const fmha_plan_data &plan, fmha_msg msg) {
  char what[512];
  const long long index = r.index, value = r.value, limit = r.limit, other = r.other;
  const int b = r.sequence;
  switch (static_cast<ViolationKind>(r.kind)) {
    case ViolationKind::kKvSeqlenNegative:
      std::snprintf(what, sizeof what, "kv_seqlen[%d] = %lld is negative", b, value);
      break;
    case ViolationKind::kKvSeqlenCapacity:
      std::snprintf(what, sizeof what, "kv_seqlen[%d] = %lld exceeds the capacity %lld (k has %lld rows per sequence)",
                    b, value, limit, limit);
      break;
    case ViolationKind::kKvSeqlenBound:
      std::snprintf(what, sizeof what, "kv_seqlen[%d] = %lld exceeds max_kv_seqlen = %lld (the plan's bound)", b, value,
                    limit);
      break;
    case ViolationKind::kKvSeqstartNegative:
      std::snprintf(what, sizeof what, "kv_seqstart[%d] = %lld is negative", b, value);
      break;
    case ViolationKind::kGappyRange:
      std::snprintf(what, sizeof what,
                    "kv_seqstart[%d] = %lld with kv_seqlen[%d] = %lld ends at row %lld, past the %lld rows of k", b,
                    value, b, other, value + other, limit);
      break;
    case ViolationKind::kPagedReach:
      std::snprintf(what, sizeof what,
                    "kv_seqstart[%d] = %lld and kv_seqlen[%d] = %lld reach key %lld, past the %lld keys of its "
                    "block_table row (%lld columns of page_size %d)",
                    b, other, b, value - other, value, limit, limit / plan.problem.page_size, plan.problem.page_size);
      break;
    case ViolationKind::kBlockTable:
      std::snprintf(what, sizeof what, "block_table[%d][%lld] = %lld is not a page id (k has %lld pages)", b, index,
                    value, limit);
      break;
    case ViolationKind::kIndptrNegative:
      std::snprintf(what, sizeof what, "kv_indptr[%lld] = %lld is negative", index, value);
      break;
    case ViolationKind::kIndptrMonotonic:
      std::snprintf(what, sizeof what, "kv_indptr[%lld] = %lld < kv_indptr[%lld] = %lld (not monotonic)", index, value,
                    index - 1, limit);
      break;
    case ViolationKind::kIndptrRange:
      std::snprintf(what, sizeof what, "kv_indptr[%lld] = %lld exceeds the %lld entries of kv_indices", index, value,
                    limit);
      break;
    case ViolationKind::kLastPageLen:
      std::snprintf(what, sizeof what, "kv_last_page_len[%d] = %lld is outside [0, page_size = %lld]", b, value, limit);
      break;
    case ViolationKind::kRaggedCapacity:
      std::snprintf(what, sizeof what,
                    "sequence %d has %lld keys (kv_indptr, kv_last_page_len), more than max_kv_seqlen = %lld", b, value,
                    limit);
      break;
    case ViolationKind::kKvIndices:
      std::snprintf(what, sizeof what, "kv_indices[%lld] = %lld (sequence %d) is not a page id (k has %lld pages)",
                    index, value, b, limit);
      break;
    case ViolationKind::kQSeqstartNegative:
      std::snprintf(what, sizeof what, "q_seqstart[%lld] = %lld is negative", index, value);
      break;
    case ViolationKind::kQSeqstartMonotonic:
      std::snprintf(what, sizeof what, "q_seqstart[%lld] = %lld < q_seqstart[%lld] = %lld (not monotonic)", index,
                    value, index - 1, limit);
      break;
    case ViolationKind::kQSeqstartRange:
      std::snprintf(what, sizeof what, "q_seqstart[%lld] = %lld exceeds total_q = %lld (the rows of q)", index, value,
                    limit);
      break;
    case ViolationKind::kQCount:
      std::snprintf(what, sizeof what, "sequence %d has %lld queries (q_seqstart), more than max_q_seqlen = %lld", b,
                    value, limit);
      break;
    default:
      std::snprintf(what, sizeof what, "sequence %d failed check %d", b, static_cast<int>(r.kind));
      break;
  }
  char others[96] = "";
  if (r.bad_sequences > 1)
    std::snprintf(others, sizeof others, "; %u sequences failed, the lowest is reported", r.bad_sequences);
  write_msg(msg, "checked run: %s; sequence %d was skipped (its O / LSE rows not written)%s", what, b, others);
}

}  // namespace

fmha_status launch_metadata_check(const SeqLayout &seq, const MetadataLimits &limits, uint8_t *region, Stream stream,
                                  fmha_msg msg) {
  const int64_t batch = seq.batch;
  FMHA_GPU_CHECK(memset_async(region, 0, checked_region_bytes(batch), stream), msg);
  if (batch == 0) return FMHA_STATUS_SUCCESS;
  int64_t blocks = (batch + kCheckWarps - 1) / kCheckWarps;
  if (blocks > kMaxCheckBlocks) blocks = kMaxCheckBlocks;
  metadata_check_kernel<<<static_cast<unsigned>(blocks), kCheckThreads, 0, stream>>>(
      seq, limits, reinterpret_cast<CheckedHeader *>(region), region + sizeof(CheckedHeader));
  FMHA_GPU_CHECK_LAUNCH("metadata_check_kernel", msg);
  return FMHA_STATUS_SUCCESS;
}

fmha_status read_check_status(const fmha_plan_data &plan, void *workspace, Stream stream, fmha_msg msg) {
  if (!(plan.problem.flags & FMHA_FLAG_CHECKED) || plan.workspace_size < checked_region_bytes(plan.problem.batch))
    return FMHA_STATUS_SUCCESS;
  auto *header = reinterpret_cast<CheckedHeader *>(static_cast<uint8_t *>(workspace) + checked_region_offset(plan));
  ViolationRecord record{};
  // The copy follows the run on its stream; the wait makes both done.
  FMHA_GPU_CHECK(copy_to_host_async(&record, &header->record, sizeof(record), stream), msg);
  FMHA_GPU_CHECK(stream_synchronize(stream), msg);
  if (record.status != kViolationRecorded) return FMHA_STATUS_SUCCESS;
  // Cleared before returning, so that a run on another stream cannot meet
  // the old record still being erased.
  FMHA_GPU_CHECK(memset_async(&header->record, 0, sizeof(ViolationRecord), stream), msg);
  FMHA_GPU_CHECK(stream_synchronize(stream), msg);
  describe(record, plan, msg);
  return FMHA_STATUS_INVALID_ARGUMENT;
}

}  // namespace fmha::gpu
