/*
 * Uses the library the way Python ctypes, Rust or Go do: dlopen by path
 * (argv[1]) and dlsym, with no link to it. Runs a small dense split-K problem
 * on the CPU backend (fp16 inputs built here) and checks O and LSE against a
 * float64 computation here. Exit status 0 on success.
 */
#include <dlfcn.h>
#include <fmha_splitk/fmha_splitk.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 2, Q_LEN = 1, HEADS_Q = 4, HEADS_KV = 2, HEAD_DIM = 64, KV_LEN = 100, SPLIT_K = 4 };
#define Q_ELEMENTS (BATCH * Q_LEN * HEADS_Q * HEAD_DIM)
#define KV_ELEMENTS (BATCH * KV_LEN * HEADS_KV * HEAD_DIM)
#define LSE_ELEMENTS (BATCH * HEADS_Q * Q_LEN)

typedef fmha_status (*create_plan_fn)(const fmha_splitk_problem *, fmha_splitk_plan_t *);
typedef void (*destroy_plan_fn)(fmha_splitk_plan_t);
typedef fmha_status (*workspace_size_fn)(fmha_splitk_plan_t, size_t *);
typedef fmha_status (*get_plan_info_fn)(fmha_splitk_plan_t, fmha_splitk_plan_info *);
typedef fmha_status (*run_fn)(fmha_splitk_plan_t, const fmha_splitk_args *);
typedef const char *(*status_string_fn)(fmha_status);
typedef const char *(*last_error_message_fn)(void);

static void *library;

/* ISO C has no conversion from void * to a function pointer; copying the
 * bytes is the portable POSIX idiom. */
static void resolve(const char *name, void *function_pointer, size_t size) {
  void *symbol = dlsym(library, name);
  if (!symbol) {
    fprintf(stderr, "dlopen_run: dlsym(%s): %s\n", name, dlerror());
    exit(1);
  }
  memcpy(function_pointer, &symbol, size);
}
#define RESOLVE(name, fn) resolve(name, &(fn), sizeof(fn))

static uint16_t float_to_half(float value) {
  uint32_t bits, sign, mantissa, rest, halfway, half;
  int32_t exponent;
  int shift = 13;
  memcpy(&bits, &value, sizeof bits);
  sign = (bits >> 16) & 0x8000u;
  exponent = (int32_t)((bits >> 23) & 0xffu) - 127 + 15;
  mantissa = bits & 0x7fffffu;
  if (exponent >= 31) return (uint16_t)(sign | 0x7c00u); /* inputs here are finite and small */
  half = (uint32_t)exponent << 10;
  if (exponent <= 0) {
    if (exponent < -10) return (uint16_t)sign;
    mantissa |= 0x800000u;
    shift = 14 - exponent;
    half = 0;
  }
  half += mantissa >> shift;
  rest = mantissa & ((1u << shift) - 1u);
  halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half; /* round to nearest even */
  return (uint16_t)(sign | half);
}

static double half_to_double(uint16_t half) {
  const int exponent = (half >> 10) & 0x1f;
  const int mantissa = half & 0x3ff;
  double magnitude;
  if (exponent == 0) {
    magnitude = ldexp((double)mantissa, -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = ldexp((double)(mantissa + 1024), exponent - 25);
  }
  return (half & 0x8000u) ? -magnitude : magnitude;
}

static uint32_t random_state = 12345u;
static uint16_t random_half(void) { /* uniform in [-1, 1) */
  random_state = random_state * 1664525u + 1013904223u;
  return float_to_half((float)(random_state >> 8) * (1.0f / 8388608.0f) - 1.0f);
}

static DLTensor dense_tensor(void *data, DLDataType dtype, int32_t ndim, int64_t *shape, int64_t *strides) {
  DLTensor tensor;
  int64_t stride = 1;
  int32_t d;
  memset(&tensor, 0, sizeof tensor);
  for (d = ndim - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  tensor.data = data;
  tensor.device.device_type = kDLCPU;
  tensor.device.device_id = 0;
  tensor.ndim = ndim;
  tensor.dtype = dtype;
  tensor.shape = shape;
  tensor.strides = strides;
  return tensor;
}

/* O [B, Mq, Hq, D] and LSE [B, Hq, Mq] in float64, from the fp16 inputs. */
static void reference(const uint16_t *q, const uint16_t *k, const uint16_t *v, double *o, double *lse) {
  const double scale = 1.0 / sqrt((double)HEAD_DIM);
  int b, h, j, d;
  for (b = 0; b < BATCH; ++b) {
    for (h = 0; h < HEADS_Q; ++h) {
      const int kv_head = h / (HEADS_Q / HEADS_KV);
      const uint16_t *q_row = q + ((size_t)b * HEADS_Q + h) * HEAD_DIM; /* Q_LEN is 1 */
      double scores[KV_LEN], max_score = -INFINITY, sum = 0.0;
      double *o_row = o + ((size_t)b * HEADS_Q + h) * HEAD_DIM;
      for (j = 0; j < KV_LEN; ++j) {
        const uint16_t *k_row = k + (((size_t)b * KV_LEN + j) * HEADS_KV + kv_head) * HEAD_DIM;
        double dot = 0.0;
        for (d = 0; d < HEAD_DIM; ++d) dot += half_to_double(q_row[d]) * half_to_double(k_row[d]);
        scores[j] = dot * scale;
        if (scores[j] > max_score) max_score = scores[j];
      }
      for (d = 0; d < HEAD_DIM; ++d) o_row[d] = 0.0;
      for (j = 0; j < KV_LEN; ++j) {
        const uint16_t *v_row = v + (((size_t)b * KV_LEN + j) * HEADS_KV + kv_head) * HEAD_DIM;
        const double p = exp(scores[j] - max_score);
        sum += p;
        for (d = 0; d < HEAD_DIM; ++d) o_row[d] += p * half_to_double(v_row[d]);
      }
      for (d = 0; d < HEAD_DIM; ++d) o_row[d] /= sum;
      lse[b * HEADS_Q + h] = max_score + log(sum);
    }
  }
}

int main(int argc, char **argv) {
  create_plan_fn create_plan;
  destroy_plan_fn destroy_plan;
  workspace_size_fn workspace_size;
  get_plan_info_fn get_plan_info;
  run_fn run;
  status_string_fn status_string;
  last_error_message_fn last_error_message;

  static uint16_t q[Q_ELEMENTS], k[KV_ELEMENTS], v[KV_ELEMENTS], o[Q_ELEMENTS];
  static float lse[LSE_ELEMENTS];
  static double o_expected[Q_ELEMENTS], lse_expected[LSE_ELEMENTS];
  int64_t q_shape[4] = {BATCH, Q_LEN, HEADS_Q, HEAD_DIM}, q_strides[4];
  int64_t kv_shape[4] = {BATCH, KV_LEN, HEADS_KV, HEAD_DIM}, k_strides[4], v_strides[4];
  int64_t o_shape[4] = {BATCH, Q_LEN, HEADS_Q, HEAD_DIM}, o_strides[4];
  int64_t lse_shape[3] = {BATCH, HEADS_Q, Q_LEN}, lse_strides[3];
  const DLDataType f16 = {kDLFloat, 16, 1}, f32 = {kDLFloat, 32, 1};
  DLTensor q_tensor, k_tensor, v_tensor, o_tensor, lse_tensor;
  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  fmha_splitk_plan_t plan = NULL;
  fmha_status status;
  size_t bytes = 0, i;
  unsigned char *workspace_memory;
  double error_squared = 0.0, reference_squared = 0.0, o_error, lse_error = 0.0;

  if (argc != 2) {
    fprintf(stderr, "usage: dlopen_run /path/to/libfmha_splitk.so\n");
    return 2;
  }
  library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    fprintf(stderr, "dlopen_run: dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  RESOLVE("fmha_splitk_create_plan", create_plan);
  RESOLVE("fmha_splitk_destroy_plan", destroy_plan);
  RESOLVE("fmha_splitk_plan_workspace_size", workspace_size);
  RESOLVE("fmha_splitk_get_plan_info", get_plan_info);
  RESOLVE("fmha_splitk_run", run);
  RESOLVE("fmha_status_string", status_string);
  RESOLVE("fmha_last_error_message", last_error_message);

  for (i = 0; i < Q_ELEMENTS; ++i) q[i] = random_half();
  for (i = 0; i < KV_ELEMENTS; ++i) k[i] = random_half();
  for (i = 0; i < KV_ELEMENTS; ++i) v[i] = random_half();
  memset(o, 0xff, sizeof o); /* NaN: an output the run misses fails the check */
  for (i = 0; i < LSE_ELEMENTS; ++i) lse[i] = NAN;

  problem.backend = FMHA_BACKEND_CPU;
  problem.batch = BATCH;
  problem.max_q_seqlen = Q_LEN;
  problem.max_kv_seqlen = KV_LEN;
  problem.groups = 1;
  problem.heads_q = HEADS_Q;
  problem.heads_kv = HEADS_KV;
  problem.head_dim_qk = HEAD_DIM;
  problem.q_dtype = FMHA_DTYPE_F16;
  problem.kv_dtype = FMHA_DTYPE_F16;
  problem.o_dtype = FMHA_DTYPE_F16;
  problem.split_k = SPLIT_K;
  status = create_plan(&problem, &plan);
  if (status != FMHA_STATUS_SUCCESS) {
    fprintf(stderr, "dlopen_run: create_plan: %s: %s\n", status_string(status), last_error_message());
    return 1;
  }
  if (get_plan_info(plan, &info) != FMHA_STATUS_SUCCESS || info.backend != FMHA_BACKEND_CPU ||
      info.split_k != SPLIT_K || strcmp(info.backend_name, "cpu") != 0) {
    fprintf(stderr, "dlopen_run: get_plan_info: backend %d (%s), split_k %d; expected cpu, split_k %d: %s\n",
            (int)info.backend, info.backend_name, (int)info.split_k, SPLIT_K, last_error_message());
    return 1;
  }
  if (workspace_size(plan, &bytes) != FMHA_STATUS_SUCCESS) {
    fprintf(stderr, "dlopen_run: workspace_size: %s\n", last_error_message());
    return 1;
  }
  workspace_memory = (unsigned char *)malloc(bytes + 256);
  if (!workspace_memory) return 1;

  q_tensor = dense_tensor(q, f16, 4, q_shape, q_strides);
  k_tensor = dense_tensor(k, f16, 4, kv_shape, k_strides);
  v_tensor = dense_tensor(v, f16, 4, kv_shape, v_strides);
  o_tensor = dense_tensor(o, f16, 4, o_shape, o_strides);
  lse_tensor = dense_tensor(lse, f32, 3, lse_shape, lse_strides);
  args.q = &q_tensor;
  args.k = &k_tensor;
  args.v = &v_tensor;
  args.o = &o_tensor;
  args.lse = &lse_tensor;
  /* Workspaces are 256-byte aligned. */
  args.workspace = workspace_memory + (256 - (uintptr_t)workspace_memory % 256) % 256;
  args.workspace_size = bytes;
  status = run(plan, &args);
  if (status != FMHA_STATUS_SUCCESS) {
    fprintf(stderr, "dlopen_run: run: %s: %s\n", status_string(status), last_error_message());
    return 1;
  }
  destroy_plan(plan);
  free(workspace_memory);

  reference(q, k, v, o_expected, lse_expected);
  for (i = 0; i < Q_ELEMENTS; ++i) {
    const double difference = half_to_double(o[i]) - o_expected[i];
    error_squared += difference * difference;
    reference_squared += o_expected[i] * o_expected[i];
  }
  o_error = sqrt(error_squared / reference_squared);
  for (i = 0; i < LSE_ELEMENTS; ++i) {
    const double difference = fabs((double)lse[i] - lse_expected[i]) / fabs(lse_expected[i]);
    if (difference > lse_error || difference != difference) lse_error = difference; /* NaN sticks */
  }
  printf("dlopen_run: split_k %d, workspace %zu bytes, O relative error %.3e, LSE relative error %.3e\n",
         (int)info.split_k, bytes, o_error, lse_error);
  /* fp16 output: rounding alone gives about 2e-4. */
  if (!(o_error <= 1e-3) || !(lse_error <= 1e-5)) {
    fprintf(stderr, "dlopen_run: FAILED (limits: O 1e-3, LSE 1e-5)\n");
    return 1;
  }
  return 0;
}
