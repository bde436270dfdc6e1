// The float64 forward reference: one full score row per (sequence, group,
// query head, query), softmax over it (sink included), then P V.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "oracle/oracle.h"

namespace fmha_oracle {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

[[noreturn]] void fail(const std::string &what) { throw std::invalid_argument("oracle: " + what); }

int64_t read_int(const Tensor &t, std::vector<int64_t> index) {
  for (size_t d = 0; d < index.size(); ++d)
    if (index[d] < 0 || index[d] >= t.shape()[d]) fail("metadata index out of range");
  return static_cast<int64_t>(t.get(index));
}

int64_t rank(const Tensor &t) { return static_cast<int64_t>(t.shape().size()); }

}  // namespace

AttentionOracle::AttentionOracle(const AttentionInputs &inputs) : in_(inputs) {
  if (!in_.q || !in_.k || !in_.v) fail("q, k and v are required");
  const Tensor &q = *in_.q, &k = *in_.k, &v = *in_.v;

  // Queries.
  if (rank(q) != 5 && rank(q) != 4) fail("q must be 4-D or 5-D");
  q_has_g_ = rank(q) == 5;
  groups_ = q_has_g_ ? static_cast<int32_t>(q.shape()[2]) : 1;
  heads_q_ = static_cast<int32_t>(q.shape()[rank(q) - 2]);
  head_dim_qk_ = q.shape()[rank(q) - 1];
  q_rows_b_ = q.shape()[0];
  q_rows_m_ = q.shape()[1];
  if (in_.q_layout == FMHA_Q_FIXED) {
    batch_ = q_rows_b_;
    for (int64_t b = 0; b < batch_; ++b) {
      q_len_.push_back(q_rows_m_);
      q_start_.push_back(b * q_rows_m_);
    }
  } else {
    if (!in_.q_seqstart || q_rows_b_ != 1) fail("VARLEN needs q [1, total_q, ...] and q_seqstart");
    batch_ = in_.q_seqstart->shape()[0] - 1;
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t begin = read_int(*in_.q_seqstart, {b}), end = read_int(*in_.q_seqstart, {b + 1});
      if (begin < 0 || end < begin) fail("q_seqstart must be non-decreasing from 0");
      q_len_.push_back(end - begin);
      q_start_.push_back(begin);
    }
    if (batch_ > 0 && (q_start_[0] != 0 || read_int(*in_.q_seqstart, {batch_}) != q_rows_m_))
      fail("q_seqstart must span the rows of q exactly");
  }

  // Keys: where the rows live and how many rows the tensors hold.
  const bool paged = in_.kv_layout == FMHA_KV_PAGED || in_.kv_layout == FMHA_KV_RAGGED;
  int64_t row_capacity = 0;
  if (!paged) {
    if (rank(k) != 5 && rank(k) != 4) fail("k must be 4-D or 5-D");
    kv_has_g_ = rank(k) == 5;
    kv_two_row_dims_ = true;
  } else {
    if (in_.page_size <= 0) fail("paged layouts need page_size");
    kv_two_row_dims_ = in_.kv_page_dim;
    const int64_t base_rank = in_.kv_page_dim ? 4 : 3;
    if (rank(k) != base_rank && rank(k) != base_rank + 1) fail("k has the wrong rank for a paged layout");
    kv_has_g_ = rank(k) == base_rank + 1;
    if (in_.kv_page_dim && k.shape()[1] != in_.page_size) fail("k's page dim differs from page_size");
    row_capacity = in_.kv_page_dim ? k.shape()[0] * k.shape()[1] : k.shape()[0];
  }
  if (rank(v) != rank(k)) fail("k and v must have the same rank");
  for (int64_t d = 0; d + 1 < rank(k); ++d)
    if (k.shape()[d] != v.shape()[d]) fail("k and v differ in a dim other than the head dim");
  const int64_t kv_g_dim = kv_two_row_dims_ ? 2 : 1;
  if (kv_has_g_ && k.shape()[kv_g_dim] != groups_) fail("k's group count differs from q's");
  if (!kv_has_g_ && groups_ != 1) fail("k without a group dim needs G = 1");
  heads_k_ = k.shape()[rank(k) - 2];
  if (heads_k_ <= 0 || heads_q_ % heads_k_ != 0) fail("Hq must be a multiple of the K/V head count");
  if (k.shape()[rank(k) - 1] != head_dim_qk_) fail("q and k head dims differ");
  head_dim_v_ = v.shape()[rank(v) - 1];

  key_rows_.resize(static_cast<size_t>(batch_));
  for (int64_t b = 0; b < batch_; ++b) {
    std::vector<KeyRow> &rows = key_rows_[static_cast<size_t>(b)];
    switch (in_.kv_layout) {
      case FMHA_KV_DENSE:
      case FMHA_KV_PADDED: {
        if (k.shape()[0] != batch_) fail("dense/padded k needs B rows in dim 0");
        int64_t len = k.shape()[1];
        if (in_.kv_layout == FMHA_KV_PADDED) {
          if (!in_.kv_seqlen) fail("PADDED needs kv_seqlen");
          len = read_int(*in_.kv_seqlen, {b});
          if (len < 0 || len > k.shape()[1]) fail("kv_seqlen exceeds the padded capacity");
        }
        for (int64_t j = 0; j < len; ++j) rows.push_back({b, j});
        break;
      }
      case FMHA_KV_GAPPY: {
        if (!in_.kv_seqlen || !in_.kv_seqstart || k.shape()[0] != 1) fail("GAPPY needs k [1, total, ...]");
        const int64_t start = read_int(*in_.kv_seqstart, {b}), len = read_int(*in_.kv_seqlen, {b});
        if (start < 0 || len < 0 || start + len > k.shape()[1]) fail("gappy keys outside k");
        for (int64_t j = 0; j < len; ++j) rows.push_back({0, start + j});
        break;
      }
      case FMHA_KV_PAGED: {
        if (!in_.kv_seqlen || !in_.block_table) fail("PAGED needs kv_seqlen and block_table");
        const int64_t start = in_.kv_seqstart ? read_int(*in_.kv_seqstart, {b}) : 0;
        const int64_t len = read_int(*in_.kv_seqlen, {b});
        if (start < 0 || len < 0) fail("negative paged start or length");
        for (int64_t j = 0; j < len; ++j) {
          const int64_t p = start + j;
          const int64_t page = read_int(*in_.block_table, {b, p / in_.page_size});
          const int64_t row = page * in_.page_size + p % in_.page_size;
          if (page < 0 || row >= row_capacity) fail("block_table names a page outside k");
          rows.push_back({in_.kv_page_dim ? page : row, p % in_.page_size});
        }
        break;
      }
      case FMHA_KV_RAGGED: {
        if (!in_.kv_indptr || !in_.kv_indices) fail("RAGGED needs kv_indptr and kv_indices");
        const int64_t first = read_int(*in_.kv_indptr, {b}), last = read_int(*in_.kv_indptr, {b + 1});
        if (first < 0 || last < first) fail("kv_indptr must be non-decreasing from 0");
        const int64_t pages = last - first;
        int64_t last_len = in_.page_size;
        if (in_.kv_last_page_len && pages > 0) last_len = read_int(*in_.kv_last_page_len, {b});
        if (last_len < 1 || last_len > in_.page_size) fail("kv_last_page_len outside [1, page_size]");
        const int64_t len = pages == 0 ? 0 : (pages - 1) * in_.page_size + last_len;
        for (int64_t j = 0; j < len; ++j) {
          const int64_t page = read_int(*in_.kv_indices, {first + j / in_.page_size});
          const int64_t row = page * in_.page_size + j % in_.page_size;
          if (page < 0 || row >= row_capacity) fail("kv_indices names a page outside k");
          rows.push_back({in_.kv_page_dim ? page : row, j % in_.page_size});
        }
        break;
      }
      default:
        fail("unknown kv_layout");
    }
  }

  if (in_.bias) {
    const Tensor &bias = *in_.bias;
    const bool with_g = rank(bias) == 5;
    if (rank(bias) != 5 && rank(bias) != 4) fail("bias must be 4-D or 5-D");
    if (bias.shape()[0] != batch_ || (with_g ? bias.shape()[1] : 1) != groups_ ||
        bias.shape()[rank(bias) - 3] != heads_q_)
      fail("bias shape disagrees with B, G, Hq");
    for (int64_t b = 0; b < batch_; ++b)
      if (q_len_[static_cast<size_t>(b)] > bias.shape()[rank(bias) - 2] || keys(b) > bias.shape()[rank(bias) - 1])
        fail("bias is smaller than a sequence's queries x keys");
  }
  if (in_.sinks) {
    const Tensor &sinks = *in_.sinks;
    if (rank(sinks) == 2 ? (sinks.shape()[0] != groups_ || sinks.shape()[1] != heads_q_)
                         : (rank(sinks) != 1 || sinks.shape()[0] != heads_q_ || groups_ != 1))
      fail("sinks must be [G, Hq] or [Hq]");
  }
  scale_ = in_.softmax_scale != 0.0 ? in_.softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim_qk_));
}

int64_t AttentionOracle::kv_row_offset(const Tensor &t, const KeyRow &r) const {
  return r.i0 * t.strides()[0] + (kv_two_row_dims_ ? r.i1 * t.strides()[1] : 0);
}

std::vector<double> AttentionOracle::gather(const Tensor &t, int64_t b, int32_t g, int64_t hk) const {
  const int64_t n = rank(t), dim = t.shape()[n - 1];
  const int64_t g_off = kv_has_g_ ? g * t.strides()[kv_two_row_dims_ ? 2 : 1] : 0;
  const int64_t h_off = hk * t.strides()[n - 2];
  const std::vector<KeyRow> &rows = key_rows_[static_cast<size_t>(b)];
  std::vector<double> out(rows.size() * static_cast<size_t>(dim));
  for (size_t j = 0; j < rows.size(); ++j) {
    const int64_t base = kv_row_offset(t, rows[j]) + g_off + h_off;
    for (int64_t d = 0; d < dim; ++d) out[j * dim + d] = t.get_at(base + d * t.strides()[n - 1]);
  }
  return out;
}

std::vector<double> AttentionOracle::query(int64_t b, int32_t g, int32_t h, int64_t i) const {
  const Tensor &q = *in_.q;
  const int64_t row = q_start_[static_cast<size_t>(b)] + i;
  const std::vector<int64_t> &st = q.strides();
  const int64_t base =
      (row / q_rows_m_) * st[0] + (row % q_rows_m_) * st[1] + (q_has_g_ ? g * st[2] : 0) + h * st[rank(q) - 2];
  std::vector<double> out(static_cast<size_t>(head_dim_qk_));
  for (int64_t d = 0; d < head_dim_qk_; ++d) out[d] = q.get_at(base + d * st[rank(q) - 1]);
  return out;
}

SoftmaxRow AttentionOracle::softmax(int64_t b, int32_t g, int32_t h, int64_t i, const std::vector<double> &q,
                                    const std::vector<double> &k) const {
  const int64_t len = keys(b), mq = queries(b), position = len - mq + i;
  std::vector<double> score(static_cast<size_t>(len), kNegInf);
  for (int64_t j = 0; j < len; ++j) {
    if (j < in_.key_begin || j >= in_.key_end) continue;
    bool visible = true;
    switch (in_.mask) {
      case FMHA_MASK_CAUSAL:
        visible = j <= position;
        break;
      case FMHA_MASK_LOCAL:
        visible = j >= position - in_.window_left && j <= position + in_.window_right;
        break;
      case FMHA_MASK_CAUSAL_LOCAL:
        visible = j >= position - in_.window_left && j <= position;
        break;
      default:
        break;
    }
    if (!visible) continue;
    double s = 0.0;
    for (int64_t d = 0; d < head_dim_qk_; ++d) s += q[d] * k[j * head_dim_qk_ + d];
    s *= scale_;
    if (in_.softcap > 0.0) s = in_.softcap * std::tanh(s / in_.softcap);
    if (in_.bias) {
      const Tensor &bias = *in_.bias;
      s += rank(bias) == 5 ? bias.get({b, g, h, i, j}) : bias.get({b, h, i, j});
    }
    score[j] = s;
  }
  const double sink = in_.sinks ? (rank(*in_.sinks) == 2 ? in_.sinks->get({g, h}) : in_.sinks->get({h})) : kNegInf;

  SoftmaxRow row;
  row.probs.assign(static_cast<size_t>(len), 0.0);
  double max_score = sink;
  for (double s : score) max_score = std::max(max_score, s);
  if (max_score == kNegInf) {
    row.lse = kNegInf;
    return row;
  }
  double denominator = std::exp(sink - max_score);
  for (double s : score) denominator += std::exp(s - max_score);
  row.lse = max_score + std::log(denominator);
  for (int64_t j = 0; j < len; ++j) row.probs[j] = std::exp(score[j] - row.lse);
  row.sink_prob = std::exp(sink - row.lse);
  return row;
}

SoftmaxRow AttentionOracle::softmax_row(int64_t b, int32_t g, int32_t h, int64_t i) const {
  const int64_t hk = h / (heads_q_ / heads_k_);
  return softmax(b, g, h, i, query(b, g, h, i), gather(*in_.k, b, g, hk));
}

AttentionOutput AttentionOracle::forward() const {
  AttentionOutput out;
  out.rows_b = q_rows_b_;
  out.rows_m = q_rows_m_;
  out.groups = groups_;
  out.heads_q = heads_q_;
  out.head_dim_v = head_dim_v_;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  out.o.assign(static_cast<size_t>(q_rows_b_ * q_rows_m_ * groups_ * heads_q_ * head_dim_v_), nan);
  out.lse.assign(static_cast<size_t>(q_rows_b_ * q_rows_m_ * groups_ * heads_q_), nan);
  const int64_t heads_per_kv = heads_q_ / heads_k_;
  for (int64_t b = 0; b < batch_; ++b)
    for (int32_t g = 0; g < groups_; ++g)
      for (int64_t hk = 0; hk < heads_k_; ++hk) {
        if (queries(b) == 0) continue;
        const std::vector<double> k = gather(*in_.k, b, g, hk), v = gather(*in_.v, b, g, hk);
        for (int32_t h = static_cast<int32_t>(hk * heads_per_kv); h < (hk + 1) * heads_per_kv; ++h)
          for (int64_t i = 0; i < queries(b); ++i) {
            const SoftmaxRow row = softmax(b, g, h, i, query(b, g, h, i), k);
            const int64_t flat = q_start_[static_cast<size_t>(b)] + i;
            const int64_t rb = flat / q_rows_m_, rm = flat % q_rows_m_;
            double *o =
                &out.o[static_cast<size_t>((((rb * q_rows_m_ + rm) * groups_ + g) * heads_q_ + h) * head_dim_v_)];
            for (int64_t d = 0; d < head_dim_v_; ++d) o[d] = 0.0;
            for (int64_t j = 0; j < keys(b); ++j) {
              if (row.probs[j] == 0.0) continue;
              for (int64_t d = 0; d < head_dim_v_; ++d) o[d] += row.probs[j] * v[j * head_dim_v_ + d];
            }
            out.lse[static_cast<size_t>(((rb * groups_ + g) * heads_q_ + h) * q_rows_m_ + rm)] = row.lse;
          }
      }
  return out;
}

}  // namespace fmha_oracle
