// Log-sum-exp merge of partial attention results (DESIGN 5.8, 5.9): the
// public fmha_merge / fmha_merge_backward on the CPU, and the row merge the
// forward uses for its own split partials.
#ifndef FMHA_SPLITK_BACKENDS_CPU_MERGE_H_
#define FMHA_SPLITK_BACKENDS_CPU_MERGE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cpu/elements.h"
#include "core/backend_api.h"

namespace fmha::cpu {

// One partial's row: its values (head_dim elements of type elem) and LSE.
struct PartialRow {
  const void *o;
  int32_t o_elem;
  float lse;
};

// Merges `count` partial rows into one: LSE = log sum_i exp(LSE_i) and
// O = sum_i exp(LSE_i - LSE) O_i, with the largest LSE_i subtracted before
// exponentiating. Rows whose every LSE_i is -inf give O = 0, LSE = -inf;
// partials with LSE_i = -inf contribute nothing (whatever their O_i); NaN
// and +inf propagate. Partials are combined in index order, so the result
// is bitwise reproducible. `partial(i)` returns a PartialRow. Writes
// head_dim elements of o_elem at `o` and returns the merged LSE.
template <class Partial>
float merge_row(Partial &&partial, int64_t count, int64_t head_dim, void *o, int32_t o_elem) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  float lse_max = kMinusInf;
  for (int64_t i = 0; i < count; ++i) {
    const float lse = partial(i).lse;
    if (std::isnan(lse) || lse > lse_max) lse_max = lse;
    if (std::isnan(lse_max)) break;
  }
  constexpr int64_t kChunk = 64;  // head dims are unbounded here: accumulate a chunk at a time
  float accumulator[kChunk];
  float values[kChunk];
  const size_t o_bytes = fmha_elem_bytes(o_elem);
  if (lse_max == kMinusInf) {
    for (int64_t d = 0; d < kChunk; ++d) accumulator[d] = 0.0f;
    for (int64_t d0 = 0; d0 < head_dim; d0 += kChunk)
      store_row(accumulator, std::min(kChunk, head_dim - d0), o_elem, static_cast<uint8_t *>(o) + d0 * o_bytes);
    return kMinusInf;
  }
  float weight_sum = 0.0f;
  for (int64_t i = 0; i < count; ++i) weight_sum += std::exp(partial(i).lse - lse_max);
  const float inverse_sum = 1.0f / weight_sum;
  for (int64_t d0 = 0; d0 < head_dim; d0 += kChunk) {
    const int64_t width = std::min(kChunk, head_dim - d0);
    for (int64_t d = 0; d < width; ++d) accumulator[d] = 0.0f;
    for (int64_t i = 0; i < count; ++i) {
      const PartialRow row = partial(i);
      const float weight = std::exp(row.lse - lse_max) * inverse_sum;
      if (weight == 0.0f) continue;
      load_row(static_cast<const uint8_t *>(row.o) + d0 * fmha_elem_bytes(row.o_elem), row.o_elem, width, values);
      for (int64_t d = 0; d < width; ++d) accumulator[d] += weight * values[d];
    }
    store_row(accumulator, width, o_elem, static_cast<uint8_t *>(o) + d0 * o_bytes);
  }
  return lse_max + std::log(weight_sum);
}

// fmha_merge on host tensors (views as documented in backend_api.h).
fmha_status merge(const fmha_merge_views &views, fmha_msg msg);

// fmha_merge_backward on host tensors.
fmha_status merge_backward(const fmha_merge_backward_views &views, fmha_msg msg);

}  // namespace fmha::cpu

#endif  // FMHA_SPLITK_BACKENDS_CPU_MERGE_H_
