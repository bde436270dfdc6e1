// fmha_merge and fmha_merge_backward on the CPU (see merge.h).
#include "backends/cpu/merge.h"

#include "backends/cpu/thread_pool.h"

namespace fmha::cpu {
namespace {

// Output rows per pool item: enough to hide the dispatch, few enough to
// spread small merges over the workers.
constexpr int64_t kRowsPerItem = 16;
constexpr int64_t kChunk = 64;

// One output row of a merge: o [B, M, G, H, D], lse [B, G, H, M].
struct RowIndex {
  int64_t b, m, g, h;
};

int64_t row_count(const fmha_view &o) { return o.shape[0] * o.shape[1] * o.shape[2] * o.shape[3]; }

RowIndex row_index(const fmha_view &o, int64_t row) {
  const int64_t h = row % o.shape[3];
  row /= o.shape[3];
  const int64_t g = row % o.shape[2];
  row /= o.shape[2];
  return {row / o.shape[1], row % o.shape[1], g, h};
}

void *o_row(const fmha_view &view, const RowIndex &r) { return view_ptr(view, {r.b, r.m, r.g, r.h}); }

int64_t lse_offset(const fmha_view &view, const RowIndex &r) { return view_offset(view, {r.b, r.g, r.h, r.m}); }

float load_lse(const fmha_view &view, const RowIndex &r) {
  return load_float(view.data, view.elem, lse_offset(view, r));
}

// Calls row_fn(RowIndex) for every row of `o` on the thread pool.
template <class RowFn>
void for_each_row(const fmha_view &o, RowFn &&row_fn) {
  const int64_t rows = row_count(o);
  ThreadPool::instance().parallel_for((rows + kRowsPerItem - 1) / kRowsPerItem, [&](int32_t, int64_t item) {
    const int64_t end = std::min(rows, (item + 1) * kRowsPerItem);
    for (int64_t row = item * kRowsPerItem; row < end; ++row) row_fn(row_index(o, row));
  });
}

// <O_i - O, dO> over the head dim, in fp32.
float centred_dot(const fmha_view &o_i, const fmha_view &o, const fmha_view &grad_o, const RowIndex &r,
                  int64_t head_dim) {
  float partial_values[kChunk];
  float merged_values[kChunk];
  float grad_values[kChunk];
  float dot = 0.0f;
  for (int64_t d0 = 0; d0 < head_dim; d0 += kChunk) {
    const int64_t width = std::min(kChunk, head_dim - d0);
    load_row(static_cast<const uint8_t *>(o_row(o_i, r)) + d0 * fmha_elem_bytes(o_i.elem), o_i.elem, width, partial_values);
    load_row(static_cast<const uint8_t *>(o_row(o, r)) + d0 * fmha_elem_bytes(o.elem), o.elem, width, merged_values);
    load_row(static_cast<const uint8_t *>(o_row(grad_o, r)) + d0 * fmha_elem_bytes(grad_o.elem), grad_o.elem, width,
             grad_values);
    for (int64_t d = 0; d < width; ++d) dot += (partial_values[d] - merged_values[d]) * grad_values[d];
  }
  return dot;
}

// dO_i = weight * dO (weight 0 writes zeros, whatever dO holds).
void store_scaled(const fmha_view &grad_o, const fmha_view &grad_o_i, const RowIndex &r, float weight,
                  int64_t head_dim) {
  float values[kChunk];
  for (int64_t d0 = 0; d0 < head_dim; d0 += kChunk) {
    const int64_t width = std::min(kChunk, head_dim - d0);
    if (weight == 0.0f) {
      for (int64_t d = 0; d < width; ++d) values[d] = 0.0f;
    } else {
      load_row(static_cast<const uint8_t *>(o_row(grad_o, r)) + d0 * fmha_elem_bytes(grad_o.elem), grad_o.elem, width,
               values);
      for (int64_t d = 0; d < width; ++d) values[d] *= weight;
    }
    store_row(values, width, grad_o_i.elem,
              static_cast<uint8_t *>(o_row(grad_o_i, r)) + d0 * fmha_elem_bytes(grad_o_i.elem));
  }
}

}  // namespace

fmha_status merge(const fmha_merge_views &views, fmha_msg) {
  const int64_t head_dim = views.o.shape[4];
  for_each_row(views.o, [&](const RowIndex &r) {
    const float lse = merge_row(
        [&](int64_t i) {
          return PartialRow{o_row(views.o_parts[i], r), views.o_parts[i].elem, load_lse(views.lse_parts[i], r)};
        },
        views.num_partials, head_dim, o_row(views.o, r), views.o.elem);
    if (views.lse.data != nullptr) store_float(views.lse.data, views.lse.elem, lse_offset(views.lse, r), lse);
  });
  return FMHA_STATUS_SUCCESS;
}

fmha_status merge_backward(const fmha_merge_backward_views &views, fmha_msg) {
  const int64_t head_dim = views.o.shape[4];
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  for_each_row(views.o, [&](const RowIndex &r) {
    const float lse = load_lse(views.lse, r);
    const float grad_lse = views.grad_lse.data != nullptr ? load_lse(views.grad_lse, r) : 0.0f;
    for (int64_t i = 0; i < views.num_partials; ++i) {
      // w_i = exp(LSE_i - LSE); a row whose merged LSE is -inf had no
      // weight anywhere (and -inf - -inf would be NaN).
      const float weight = lse == kMinusInf ? 0.0f : std::exp(load_lse(views.lse_parts[i], r) - lse);
      if (views.grad_o_parts[i].data != nullptr) store_scaled(views.grad_o, views.grad_o_parts[i], r, weight, head_dim);
      const fmha_view &grad_lse_view = views.grad_lse_parts[i];
      if (grad_lse_view.data != nullptr) {
        const float grad_lse_i =
            weight == 0.0f ? 0.0f
                           : weight * (grad_lse + centred_dot(views.o_parts[i], views.o, views.grad_o, r, head_dim));
        store_float(grad_lse_view.data, grad_lse_view.elem, lse_offset(grad_lse_view, r), grad_lse_i);
      }
    }
  });
  return FMHA_STATUS_SUCCESS;
}

}  // namespace fmha::cpu
