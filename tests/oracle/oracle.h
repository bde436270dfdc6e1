// The tests' float64 reference of split-K attention and of the log-sum-exp
// merge (DESIGN 5), written from the definitions. It materialises every
// score row and reads the host tensors through their own strides, so it
// shares neither code nor structure (nor bugs) with the library's streaming
// kernels. Only the public header's enum values are borrowed, to name
// layouts and masks.
#ifndef FMHA_SPLITK_TESTS_ORACLE_ORACLE_H_
#define FMHA_SPLITK_TESTS_ORACLE_ORACLE_H_

#include <fmha_splitk/fmha_splitk.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "common/tensor.h"

namespace fmha_oracle {

using fmha_test::Tensor;

// What one forward pass reads. Pointers are borrowed host tensors; NULL when
// absent. Shapes follow the public header:
//   q    FIXED [B, Mq, G, Hq, Dqk] or [B, Mq, Hq, Dqk];
//        VARLEN [1, total_q, ...] with q_seqstart [B + 1].
//   k, v DENSE / PADDED [B, Mkv, G, Hkv, D] (or 4-D); GAPPY [1, total, ...];
//        PAGED / RAGGED [num_pages * page_size, G, Hkv, D] (or [rows, Hkv, D]),
//        or, with kv_page_dim, [num_pages, page_size, G, Hkv, D] (or 4-D).
//        Hkv may be Hq with a head stride of 0 (MQA as in the reference).
//   bias [B, G, Hq, Mq, Mkv] or [B, Hq, Mq, Mkv], indexed by the query's and
//        key's index within their own sequence.
//   sinks [G, Hq] or [Hq].
struct AttentionInputs {
  int32_t q_layout = FMHA_Q_FIXED;
  int32_t kv_layout = FMHA_KV_DENSE;
  int32_t page_size = 0;
  bool kv_page_dim = false;
  int32_t mask = FMHA_MASK_NONE;
  int64_t window_left = 0;
  int64_t window_right = 0;
  double softmax_scale = 0.0;  // 0: 1 / sqrt(Dqk)
  double softcap = 0.0;        // 0: off
  // Only keys whose index within their sequence lies in [key_begin, key_end)
  // take part: the reference of one split chunk's partial result. Positions
  // (and so masks) stay those of the whole sequence.
  int64_t key_begin = 0;
  int64_t key_end = std::numeric_limits<int64_t>::max();

  const Tensor *q = nullptr;
  const Tensor *k = nullptr;
  const Tensor *v = nullptr;
  const Tensor *bias = nullptr;
  const Tensor *sinks = nullptr;
  const Tensor *kv_seqlen = nullptr;
  const Tensor *kv_seqstart = nullptr;
  const Tensor *q_seqstart = nullptr;
  const Tensor *block_table = nullptr;
  const Tensor *kv_indptr = nullptr;
  const Tensor *kv_indices = nullptr;
  const Tensor *kv_last_page_len = nullptr;
};

// The reference result, in the library's output order: O as
// [rows_b, rows_m, G, Hq, Dv] and LSE as [rows_b, G, Hq, rows_m], where
// (rows_b, rows_m) = (B, Mq) for FIXED and (1, total_q) for VARLEN.
struct AttentionOutput {
  int64_t rows_b = 0, rows_m = 0, groups = 0, heads_q = 0, head_dim_v = 0;
  std::vector<double> o;
  std::vector<double> lse;
};

// The softmax of one query row over the keys of its sequence.
struct SoftmaxRow {
  std::vector<double> probs;  // per key; 0 where masked or outside the key range
  double sink_prob = 0.0;     // the sink's share of the denominator
  double lse = 0.0;           // -inf when nothing (not even a sink) is seen
};

class AttentionOracle {
 public:
  // Reads the metadata and checks that the inputs are consistent (throws
  // std::invalid_argument naming what is wrong: a test bug, not a library
  // one).
  explicit AttentionOracle(const AttentionInputs &inputs);

  int64_t batch() const { return batch_; }
  int64_t queries(int64_t b) const { return q_len_[static_cast<size_t>(b)]; }
  int64_t keys(int64_t b) const { return static_cast<int64_t>(key_rows_[static_cast<size_t>(b)].size()); }
  int32_t groups() const { return groups_; }
  int32_t heads_q() const { return heads_q_; }

  SoftmaxRow softmax_row(int64_t b, int32_t g, int32_t h, int64_t i) const;
  AttentionOutput forward() const;

 private:
  // Physical position of a key row: (index of dim 0, index of dim 1) of K/V;
  // the second is unused when rows are addressed by dim 0 alone.
  struct KeyRow {
    int64_t i0, i1;
  };
  int64_t kv_row_offset(const Tensor &t, const KeyRow &r) const;
  // K (or V) of sequence b, group g, K/V-tensor head hk as [keys, D] doubles.
  std::vector<double> gather(const Tensor &t, int64_t b, int32_t g, int64_t hk) const;
  std::vector<double> query(int64_t b, int32_t g, int32_t h, int64_t i) const;
  SoftmaxRow softmax(int64_t b, int32_t g, int32_t h, int64_t i, const std::vector<double> &q,
                     const std::vector<double> &k) const;

  AttentionInputs in_;
  int64_t batch_ = 0;
  int32_t groups_ = 1, heads_q_ = 1;
  int64_t heads_k_ = 1, head_dim_qk_ = 0, head_dim_v_ = 0;
  int64_t q_rows_b_ = 0, q_rows_m_ = 0;
  bool q_has_g_ = false, kv_has_g_ = false, kv_two_row_dims_ = false;
  double scale_ = 0.0;
  std::vector<int64_t> q_len_, q_start_;  // per sequence: queries and first Q row
  std::vector<std::vector<KeyRow>> key_rows_;
};

// Shapes of a merge: partial O [B, M, G, H, D] and LSE [B, G, H, M], as flat
// row-major vectors of doubles.
struct MergeShape {
  int64_t batch = 0, queries = 0, groups = 1, heads = 1, head_dim = 0;
  int64_t rows() const { return batch * queries * groups * heads; }
};

struct MergeResult {
  std::vector<double> o;    // [B, M, G, H, D]
  std::vector<double> lse;  // [B, G, H, M]
};

// LSE = log sum_i exp(LSE_i), O = sum_i exp(LSE_i - LSE) O_i; rows where every
// LSE_i is -inf give O = 0, LSE = -inf.
MergeResult merge(const MergeShape &shape, const std::vector<std::vector<double>> &o_parts,
                  const std::vector<std::vector<double>> &lse_parts);

struct MergeGradients {
  std::vector<std::vector<double>> grad_o;    // per partial, [B, M, G, H, D]
  std::vector<std::vector<double>> grad_lse;  // per partial, [B, G, H, M]
};

// The formula of DESIGN 5.9 with the given merged (o, lse): w_i = exp(LSE_i -
// LSE), dO_i = w_i dO, dLSE_i = w_i (dLSE + <O_i - O, dO>); rows with LSE =
// -inf get zero gradients. An empty grad_lse means zero.
MergeGradients merge_backward(const MergeShape &shape, const std::vector<std::vector<double>> &o_parts,
                              const std::vector<std::vector<double>> &lse_parts, const std::vector<double> &o,
                              const std::vector<double> &lse, const std::vector<double> &grad_o,
                              const std::vector<double> &grad_lse);

// A tensor's logical elements in row-major order of its shape, as doubles.
std::vector<double> to_doubles(const Tensor &t);
// The same for the sub-tensor t[index] along dim 0 (a stacked partial).
std::vector<double> slice_to_doubles(const Tensor &t, int64_t index);

}  // namespace fmha_oracle

#endif  // FMHA_SPLITK_TESTS_ORACLE_ORACLE_H_
