// Where each sequence's keys and queries are, for every key and query
// layout (DESIGN 5.2, 5.3), read from the run's metadata views (host memory
// on the CPU backend).
#ifndef FMHA_SPLITK_BACKENDS_CPU_SEQUENCE_MAP_H_
#define FMHA_SPLITK_BACKENDS_CPU_SEQUENCE_MAP_H_

#include <cstdint>

#include "core/backend_api.h"

namespace fmha::cpu {

// A key's position in the K/V views: indices of their first two dimensions
// ([B, Mkv] for dense, padded and gappy; [num_pages, page_size] for paged
// and ragged).
struct KeyRow {
  int64_t outer;
  int64_t inner;
};

class SequenceMap {
 public:
  SequenceMap(const fmha_plan_data &plan, const fmha_run_views &views);

  // Checks every sequence's metadata against the tensors it indexes (lengths
  // against capacity, offsets, page ids against the page count). On success
  // stores each key count into kv_len_out[b] when it is not NULL; on failure
  // writes msg (naming the sequence and the value) and returns
  // INVALID_ARGUMENT. The accessors below are valid only after success.
  fmha_status validate(int32_t *kv_len_out, fmha_msg msg) const;

  // Keys of sequence b.
  int32_t kv_len(int64_t b) const;
  // Queries of sequence b.
  int64_t q_len(int64_t b) const;
  // Indices of sequence b's first query in the batch and query dimensions of
  // Q, O, LSE and the partial outputs.
  int64_t q_batch(int64_t b) const { return varlen_q_ ? 0 : b; }
  int64_t q_first(int64_t b) const { return varlen_q_ ? load_q_seqstart(b) : 0; }
  // Where key i (< kv_len(b)) of sequence b is.
  KeyRow key_row(int64_t b, int64_t i) const;

 private:
  int32_t load_q_seqstart(int64_t b) const;
  // Keys of sequence b as the metadata says (unchecked, 64-bit).
  int64_t metadata_kv_len(int64_t b) const;
  int64_t paged_start(int64_t b) const;
  fmha_status validate_sequence(int64_t b, int32_t &kv_len, fmha_msg msg) const;
  fmha_status validate_queries(int64_t b, fmha_msg msg) const;

  const fmha_plan_data &plan_;
  const fmha_run_views &views_;
  const int32_t layout_;
  const bool varlen_q_;
  const int64_t page_size_;
  const int32_t page_shift_;  // page_size is a power of two
};

}  // namespace fmha::cpu

#endif  // FMHA_SPLITK_BACKENDS_CPU_SEQUENCE_MAP_H_
