/*
 * What the examples share: bf16 conversion, reproducible random inputs, and
 * a plain float64 attention to check the library's answer against. Header
 * only, C99 and C++ (static functions), so each example stays one file plus
 * this.
 *
 * Shapes are those of a dense decode problem with compact row-major tensors:
 * Q [B, Mq, Hq, D], K and V [B, L, Hkv, D] (L keys per sequence, of which a
 * sequence may use only the first kv_len[b]), O [B, Mq, Hq, D], LSE [B, Hq, Mq].
 */
#ifndef FMHA_SPLITK_EXAMPLE_REFERENCE_H_
#define FMHA_SPLITK_EXAMPLE_REFERENCE_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

/* bfloat16 is the top half of a float32; round to nearest even. */
static uint16_t example_bf16_from_float(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

static double example_bf16_to_double(uint16_t value) {
  const uint32_t bits = (uint32_t)value << 16;
  float result;
  memcpy(&result, &bits, sizeof result);
  return result;
}

/* Fills `count` bf16 values uniform in [-1, 1) from a fixed seed. */
static void example_fill_bf16(uint16_t *values, size_t count, uint32_t seed) {
  size_t i;
  for (i = 0; i < count; ++i) {
    seed = seed * 1664525u + 1013904223u; /* LCG: reproducible everywhere */
    values[i] = example_bf16_from_float((float)(seed >> 8) / 8388608.0f - 1.0f);
  }
}

typedef struct example_shape {
  int64_t batch, q_len, heads_q, heads_kv, head_dim, kv_capacity;
} example_shape;

static double example_dot_bf16(const uint16_t *a, const uint16_t *b, int64_t count) {
  double sum = 0.0;
  int64_t i;
  for (i = 0; i < count; ++i) sum += example_bf16_to_double(a[i]) * example_bf16_to_double(b[i]);
  return sum;
}

/* Softmax attention in float64 over keys [0, kv_len[b]) of each sequence
 * (kv_len NULL: all kv_capacity keys), scale 1/sqrt(D), no mask. Query head
 * h reads K/V head h / (Hq / Hkv) (GQA). */
static void example_reference_attention(const example_shape *shape, const uint16_t *q, const uint16_t *k,
                                        const uint16_t *v, const int32_t *kv_len, double *o, double *lse) {
  const int64_t dims = shape->head_dim;
  const double scale = 1.0 / sqrt((double)dims);
  const int64_t heads_per_kv = shape->heads_q / shape->heads_kv;
  int64_t b, m, h, j, d;
  for (b = 0; b < shape->batch; ++b) {
    const int64_t keys = kv_len ? kv_len[b] : shape->kv_capacity;
    for (m = 0; m < shape->q_len; ++m) {
      for (h = 0; h < shape->heads_q; ++h) {
        const int64_t q_row = ((b * shape->q_len + m) * shape->heads_q + h) * dims;
        double max_score = -INFINITY, denominator = 0.0;
        for (d = 0; d < dims; ++d) o[q_row + d] = 0.0;
        /* Two passes (max, then sums) keep exp() in range. */
        for (j = 0; j < keys; ++j) {
          const int64_t kv_row = ((b * shape->kv_capacity + j) * shape->heads_kv + h / heads_per_kv) * dims;
          const double score = scale * example_dot_bf16(q + q_row, k + kv_row, dims);
          if (score > max_score) max_score = score;
        }
        for (j = 0; j < keys; ++j) {
          const int64_t kv_row = ((b * shape->kv_capacity + j) * shape->heads_kv + h / heads_per_kv) * dims;
          const double weight = exp(scale * example_dot_bf16(q + q_row, k + kv_row, dims) - max_score);
          denominator += weight;
          for (d = 0; d < dims; ++d) o[q_row + d] += weight * example_bf16_to_double(v[kv_row + d]);
        }
        /* No key: O = 0 and LSE = -inf, as the library defines it. */
        for (d = 0; d < dims; ++d) o[q_row + d] = keys > 0 ? o[q_row + d] / denominator : 0.0;
        if (lse) lse[(b * shape->heads_q + h) * shape->q_len + m] = keys > 0 ? max_score + log(denominator) : -INFINITY;
      }
    }
  }
}

/* ||out - ref|| / ||ref|| (infinite when out has a NaN). */
static double example_relative_error(const float *out, const double *ref, size_t count) {
  double difference = 0.0, norm = 0.0;
  size_t i;
  for (i = 0; i < count; ++i) {
    if (out[i] != out[i]) return INFINITY;
    difference += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return sqrt(difference) / (norm > 0.0 ? sqrt(norm) : 1.0);
}

/* Largest |out - ref| over finite references; equal infinities match. */
static double example_max_difference(const float *out, const double *ref, size_t count) {
  double worst = 0.0;
  size_t i;
  for (i = 0; i < count; ++i) {
    const double difference = isinf(ref[i]) ? (out[i] == ref[i] ? 0.0 : INFINITY) : fabs(out[i] - ref[i]);
    if (!(difference <= worst)) worst = difference; /* NaN too */
  }
  return worst;
}

#endif /* FMHA_SPLITK_EXAMPLE_REFERENCE_H_ */
