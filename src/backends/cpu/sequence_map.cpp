// Per-sequence key and query addressing (see sequence_map.h).
#include "backends/cpu/sequence_map.h"

#include <algorithm>
#include <cinttypes>

#include "backends/cpu/elements.h"
#include "backends/cpu/message.h"

namespace fmha::cpu {
namespace {

int32_t log2_of_power_of_two(int64_t value) {
  int32_t shift = 0;
  while ((int64_t{1} << shift) < value) ++shift;
  return shift;
}

}  // namespace

SequenceMap::SequenceMap(const fmha_plan_data &plan, const fmha_run_views &views)
    : plan_(plan),
      views_(views),
      layout_(plan.problem.kv_layout),
      varlen_q_(plan.problem.q_layout == FMHA_Q_VARLEN),
      page_size_(std::max(1, plan.problem.page_size)),
      page_shift_(log2_of_power_of_two(page_size_)) {}

int32_t SequenceMap::load_q_seqstart(int64_t b) const { return load_i32(views_.q_seqstart, b); }

int64_t SequenceMap::paged_start(int64_t b) const {
  return views_.kv_seqstart.data != nullptr ? load_i32(views_.kv_seqstart, b) : 0;
}

int64_t SequenceMap::metadata_kv_len(int64_t b) const {
  switch (layout_) {
    case FMHA_KV_DENSE:
      return plan_.problem.max_kv_seqlen;
    case FMHA_KV_RAGGED: {
      const int64_t pages = int64_t{load_i32(views_.kv_indptr, b + 1)} - load_i32(views_.kv_indptr, b);
      if (pages == 0) return 0;
      const int64_t last = views_.kv_last_page_len.data != nullptr ? load_i32(views_.kv_last_page_len, b) : page_size_;
      return (pages - 1) * page_size_ + last;
    }
    default:  // PADDED, GAPPY, PAGED
      return load_i32(views_.kv_seqlen, b);
  }
}

int32_t SequenceMap::kv_len(int64_t b) const { return static_cast<int32_t>(metadata_kv_len(b)); }

int64_t SequenceMap::q_len(int64_t b) const {
  return varlen_q_ ? int64_t{load_q_seqstart(b + 1)} - load_q_seqstart(b) : plan_.problem.max_q_seqlen;
}

KeyRow SequenceMap::key_row(int64_t b, int64_t i) const {
  switch (layout_) {
    case FMHA_KV_GAPPY:
      return {0, load_i32(views_.kv_seqstart, b) + i};
    case FMHA_KV_PAGED: {
      const int64_t logical = paged_start(b) + i;
      return {load_i32(views_.block_table, b, logical >> page_shift_), logical & (page_size_ - 1)};
    }
    case FMHA_KV_RAGGED:
      return {load_i32(views_.kv_indices, load_i32(views_.kv_indptr, b) + (i >> page_shift_)), i & (page_size_ - 1)};
    default:  // DENSE, PADDED
      return {b, i};
  }
}

fmha_status SequenceMap::validate_sequence(int64_t b, int32_t &kv_len_out, fmha_msg msg) const {
  const int64_t max_kv = plan_.problem.max_kv_seqlen;
  const fmha_view &k = views_.k;
  const fmha_view &v = views_.v.data != nullptr ? views_.v : k;  // V_FROM_K: V is in K's rows
  if (layout_ == FMHA_KV_RAGGED) {
    const int64_t begin = load_i32(views_.kv_indptr, b);
    const int64_t end = load_i32(views_.kv_indptr, b + 1);
    const int64_t nnz = views_.kv_indices.shape[0];
    if (begin < 0 || end < begin || end > nnz)
      return fail(msg, FMHA_STATUS_INVALID_ARGUMENT,
                  "kv_indptr[%" PRId64 "] = %" PRId64 ", kv_indptr[%" PRId64 "] = %" PRId64 ": sequence %" PRId64
                  "'s pages must satisfy 0 <= begin <= end <= kv_indices length %" PRId64,
                  b, begin, b + 1, end, b, nnz);
    if (end > begin && views_.kv_last_page_len.data != nullptr) {
      const int64_t last = load_i32(views_.kv_last_page_len, b);
      if (last < 0 || last > page_size_)
        return fail(msg, FMHA_STATUS_INVALID_ARGUMENT,
                    "kv_last_page_len[%" PRId64 "] = %" PRId64 " is outside [0, page_size = %" PRId64 "]", b, last,
                    page_size_);
    }
  }
  const int64_t kv_len = metadata_kv_len(b);
  if (kv_len < 0 || kv_len > max_kv)
    return fail(msg, FMHA_STATUS_INVALID_ARGUMENT,
                layout_ == FMHA_KV_RAGGED ? "sequence %" PRId64 " has %" PRId64
                                            " keys (kv_indptr, kv_last_page_len), outside [0, "
                                            "max_kv_seqlen = %" PRId64 "]"
                                          : "kv_seqlen[%" PRId64 "] = %" PRId64
                                            " is outside [0, max_kv_seqlen = %" PRId64 "]",
                b, kv_len, max_kv);
  if (layout_ == FMHA_KV_GAPPY) {
    const int64_t start = load_i32(views_.kv_seqstart, b);
    const int64_t rows = std::min(k.shape[1], v.shape[1]);
    if (start < 0 || start + kv_len > rows)
      return fail(msg, FMHA_STATUS_INVALID_ARGUMENT,
                  "kv_seqstart[%" PRId64 "] = %" PRId64 " with kv_seqlen = %" PRId64 " is outside the %" PRId64
                  " rows of K/V",
                  b, start, kv_len, rows);
  }
  const int64_t num_pages = std::min(k.shape[0], v.shape[0]);
  if (layout_ == FMHA_KV_PAGED && kv_len > 0) {
    const int64_t start = paged_start(b);
    const int64_t columns = views_.block_table.shape[1];
    if (start < 0 || ((start + kv_len - 1) >> page_shift_) >= columns)
      return fail(msg, FMHA_STATUS_INVALID_ARGUMENT,
                  "sequence %" PRId64 ": kv_seqstart = %" PRId64 " and kv_seqlen = %" PRId64 " reach past the %" PRId64
                  " block_table columns of page_size %" PRId64,
                  b, start, kv_len, columns, page_size_);
    for (int64_t page = start >> page_shift_; page <= (start + kv_len - 1) >> page_shift_; ++page) {
      const int64_t physical = load_i32(views_.block_table, b, page);
      if (physical < 0 || physical >= num_pages)
        return fail(msg, FMHA_STATUS_INVALID_ARGUMENT,
                    "block_table[%" PRId64 ", %" PRId64 "] = %" PRId64 " is outside [0, num_pages = %" PRId64 ")", b,
                    page, physical, num_pages);
    }
  }
  if (layout_ == FMHA_KV_RAGGED) {
    const int64_t begin = load_i32(views_.kv_indptr, b);
    const int64_t pages_read = (kv_len + page_size_ - 1) >> page_shift_;
    for (int64_t page = begin; page < begin + pages_read; ++page) {
      const int64_t physical = load_i32(views_.kv_indices, page);
      if (physical < 0 || physical >= num_pages)
        return fail(msg, FMHA_STATUS_INVALID_ARGUMENT,
                    "kv_indices[%" PRId64 "] = %" PRId64 " (sequence %" PRId64 ") is outside [0, num_pages = %" PRId64
                    ")",
                    page, physical, b, num_pages);
    }
  }
  kv_len_out = static_cast<int32_t>(kv_len);
  return FMHA_STATUS_SUCCESS;
}

fmha_status SequenceMap::validate_queries(int64_t b, fmha_msg msg) const {
  if (!varlen_q_) return FMHA_STATUS_SUCCESS;
  const int64_t begin = load_q_seqstart(b);
  const int64_t end = load_q_seqstart(b + 1);
  const int64_t total_q = views_.q.shape[1];
  if (begin < 0 || end < begin || end > total_q)
    return fail(msg, FMHA_STATUS_INVALID_ARGUMENT,
                "q_seqstart[%" PRId64 "] = %" PRId64 ", q_seqstart[%" PRId64 "] = %" PRId64
                ": must satisfy 0 <= begin <= end <= total_q = %" PRId64,
                b, begin, b + 1, end, total_q);
  if (end - begin > plan_.problem.max_q_seqlen)
    return fail(msg, FMHA_STATUS_INVALID_ARGUMENT,
                "sequence %" PRId64 " has %" PRId64 " queries (q_seqstart), more than max_q_seqlen = %" PRId64, b,
                end - begin, plan_.problem.max_q_seqlen);
  return FMHA_STATUS_SUCCESS;
}

fmha_status SequenceMap::validate(int32_t *kv_len_out, fmha_msg msg) const {
  for (int64_t b = 0; b < plan_.problem.batch; ++b) {
    int32_t kv_len = 0;
    if (const fmha_status status = validate_sequence(b, kv_len, msg); status != FMHA_STATUS_SUCCESS) return status;
    if (const fmha_status status = validate_queries(b, msg); status != FMHA_STATUS_SUCCESS) return status;
    if (kv_len_out != nullptr) kv_len_out[b] = kv_len;
  }
  return FMHA_STATUS_SUCCESS;
}

}  // namespace fmha::cpu
