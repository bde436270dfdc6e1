// The float64 merge of partial results and its gradients (DESIGN 5.8, 5.9),
// plus the readers that turn test tensors into flat vectors for them.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "oracle/oracle.h"

namespace fmha_oracle {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Flat positions of row (b, m, g, h): its first element in O and its LSE.
struct RowIndex {
  size_t o, lse;
};

template <class F>
void for_each_row(const MergeShape &s, F &&f) {
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t m = 0; m < s.queries; ++m)
      for (int64_t g = 0; g < s.groups; ++g)
        for (int64_t h = 0; h < s.heads; ++h)
          f(RowIndex{static_cast<size_t>((((b * s.queries + m) * s.groups + g) * s.heads + h) * s.head_dim),
                     static_cast<size_t>(((b * s.groups + g) * s.heads + h) * s.queries + m)});
}

void check_sizes(const MergeShape &s, const std::vector<std::vector<double>> &o_parts,
                 const std::vector<std::vector<double>> &lse_parts) {
  if (o_parts.size() != lse_parts.size()) throw std::invalid_argument("oracle merge: o/lse part counts differ");
  for (size_t i = 0; i < o_parts.size(); ++i)
    if (o_parts[i].size() != static_cast<size_t>(s.rows() * s.head_dim) ||
        lse_parts[i].size() != static_cast<size_t>(s.rows()))
      throw std::invalid_argument("oracle merge: a partial has the wrong size");
}

// Appends the elements of t (from dim first_dim on, at element offset base)
// in row-major order of their logical indices.
void append_logical(const Tensor &t, size_t first_dim, int64_t base, std::vector<double> &out) {
  const std::vector<int64_t> &shape = t.shape();
  const size_t rank = shape.size();
  for (size_t d = first_dim; d < rank; ++d)
    if (shape[d] == 0) return;
  std::vector<int64_t> idx(rank, 0);
  for (;;) {
    int64_t off = base;
    for (size_t d = first_dim; d < rank; ++d) off += idx[d] * t.strides()[d];
    out.push_back(t.get_at(off));
    size_t d = rank;
    for (; d > first_dim; --d) {
      if (++idx[d - 1] < shape[d - 1]) break;
      idx[d - 1] = 0;
    }
    if (d == first_dim) return;
  }
}

}  // namespace

MergeResult merge(const MergeShape &shape, const std::vector<std::vector<double>> &o_parts,
                  const std::vector<std::vector<double>> &lse_parts) {
  check_sizes(shape, o_parts, lse_parts);
  MergeResult out;
  out.o.assign(static_cast<size_t>(shape.rows() * shape.head_dim), 0.0);
  out.lse.assign(static_cast<size_t>(shape.rows()), kNegInf);
  for_each_row(shape, [&](RowIndex r) {
    double max_lse = kNegInf;
    for (const auto &lse : lse_parts) max_lse = std::max(max_lse, lse[r.lse]);
    if (max_lse == kNegInf) return;
    double sum = 0.0;
    for (const auto &lse : lse_parts) sum += std::exp(lse[r.lse] - max_lse);
    const double merged_lse = max_lse + std::log(sum);
    out.lse[r.lse] = merged_lse;
    for (size_t i = 0; i < o_parts.size(); ++i) {
      // A partial with LSE = -inf saw no key: it contributes nothing, whatever its O holds.
      if (lse_parts[i][r.lse] == kNegInf) continue;
      const double w = std::exp(lse_parts[i][r.lse] - merged_lse);
      for (int64_t d = 0; d < shape.head_dim; ++d) out.o[r.o + d] += w * o_parts[i][r.o + d];
    }
  });
  return out;
}

MergeGradients merge_backward(const MergeShape &shape, const std::vector<std::vector<double>> &o_parts,
                              const std::vector<std::vector<double>> &lse_parts, const std::vector<double> &o,
                              const std::vector<double> &lse, const std::vector<double> &grad_o,
                              const std::vector<double> &grad_lse) {
  check_sizes(shape, o_parts, lse_parts);
  MergeGradients out;
  out.grad_o.assign(o_parts.size(), std::vector<double>(static_cast<size_t>(shape.rows() * shape.head_dim), 0.0));
  out.grad_lse.assign(o_parts.size(), std::vector<double>(static_cast<size_t>(shape.rows()), 0.0));
  for_each_row(shape, [&](RowIndex r) {
    if (lse[r.lse] == kNegInf) return;
    const double d_lse = grad_lse.empty() ? 0.0 : grad_lse[r.lse];
    for (size_t i = 0; i < o_parts.size(); ++i) {
      if (lse_parts[i][r.lse] == kNegInf) continue;
      const double w = std::exp(lse_parts[i][r.lse] - lse[r.lse]);
      double dot = 0.0;
      for (int64_t d = 0; d < shape.head_dim; ++d) {
        out.grad_o[i][r.o + d] = w * grad_o[r.o + d];
        dot += (o_parts[i][r.o + d] - o[r.o + d]) * grad_o[r.o + d];
      }
      out.grad_lse[i][r.lse] = w * (d_lse + dot);
    }
  });
  return out;
}

std::vector<double> to_doubles(const Tensor &t) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(t.numel()));
  append_logical(t, 0, 0, out);
  return out;
}

std::vector<double> slice_to_doubles(const Tensor &t, int64_t index) {
  if (t.shape().empty() || index < 0 || index >= t.shape()[0])
    throw std::invalid_argument("oracle: slice index outside dim 0");
  std::vector<double> out;
  append_logical(t, 1, index * t.strides()[0], out);
  return out;
}

}  // namespace fmha_oracle
