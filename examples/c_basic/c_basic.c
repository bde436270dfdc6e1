/*
 * c_basic: the library linked as usual (-lfmha_splitk, or CMake's
 * fmha_splitk::fmha_splitk). Decode attention for a small GQA batch on the
 * CPU backend: bf16 Q, K and V, float32 O and LSE, the plan choosing the
 * split count; the result is checked against a float64 reference. Exit
 * status 0 when it matches, 1 otherwise.
 */
#include <fmha_splitk/fmha_splitk.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/example_reference.h"

enum { BATCH = 3, Q_LEN = 1, HEADS_Q = 8, HEADS_KV = 2, HEAD_DIM = 64, KV_LEN = 300 };
#define Q_COUNT (BATCH * Q_LEN * HEADS_Q * HEAD_DIM)
#define KV_COUNT (BATCH * KV_LEN * HEADS_KV * HEAD_DIM)
#define LSE_COUNT (BATCH * HEADS_Q * Q_LEN)

/* Prints the library's message for a failed call; returns 1 for main. */
static int report(const char *call, fmha_status status) {
  fprintf(stderr, "c_basic: %s: %s: %s\n", call, fmha_status_string(status), fmha_last_error_message());
  return 1;
}

int main(void) {
  static uint16_t q[Q_COUNT], k[KV_COUNT], v[KV_COUNT];
  static float o[Q_COUNT], lse[LSE_COUNT];
  static double o_ref[Q_COUNT], lse_ref[LSE_COUNT];
  const example_shape shape = {BATCH, Q_LEN, HEADS_Q, HEADS_KV, HEAD_DIM, KV_LEN};

  /* Tensors: compact row-major DLPack views of host memory. */
  int64_t q_shape[4] = {BATCH, Q_LEN, HEADS_Q, HEAD_DIM};
  int64_t kv_shape[4] = {BATCH, KV_LEN, HEADS_KV, HEAD_DIM};
  int64_t lse_shape[3] = {BATCH, HEADS_Q, Q_LEN};
  const DLDevice cpu = {kDLCPU, 0};
  const DLDataType bf16 = {kDLBfloat, 16, 1};
  const DLDataType f32 = {kDLFloat, 32, 1};
  DLTensor q_tensor = {q, cpu, 4, bf16, q_shape, NULL, 0};
  DLTensor k_tensor = {k, cpu, 4, bf16, kv_shape, NULL, 0};
  DLTensor v_tensor = {v, cpu, 4, bf16, kv_shape, NULL, 0};
  DLTensor o_tensor = {o, cpu, 4, f32, q_shape, NULL, 0};
  DLTensor lse_tensor = {lse, cpu, 3, f32, lse_shape, NULL, 0};

  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT; /* every field zero: its default */
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  fmha_splitk_plan_t plan;
  fmha_status status;
  double o_error, lse_error;

  example_fill_bf16(q, Q_COUNT, 1u);
  example_fill_bf16(k, KV_COUNT, 2u);
  example_fill_bf16(v, KV_COUNT, 3u);

  problem.backend = FMHA_BACKEND_CPU; /* host memory; AUTO would pick a GPU if one is present */
  problem.batch = BATCH;
  problem.max_q_seqlen = Q_LEN;
  problem.max_kv_seqlen = KV_LEN;
  problem.heads_q = HEADS_Q;
  problem.heads_kv = HEADS_KV;
  problem.head_dim_qk = HEAD_DIM;
  problem.q_dtype = FMHA_DTYPE_BF16;
  problem.o_dtype = FMHA_DTYPE_F32;

  status = fmha_splitk_create_plan(&problem, &plan);
  if (status != FMHA_STATUS_SUCCESS) return report("fmha_splitk_create_plan", status);
  status = fmha_splitk_get_plan_info(plan, &info);
  if (status != FMHA_STATUS_SUCCESS) {
    fmha_splitk_destroy_plan(plan);
    return report("fmha_splitk_get_plan_info", status);
  }
  printf("c_basic: fmha_splitk %s, backend %s, split_k %d, kernel %s\n", fmha_version(), info.backend_name,
         (int)info.split_k, info.kernel_name);

  args.q = &q_tensor;
  args.k = &k_tensor;
  args.v = &v_tensor;
  args.o = &o_tensor;
  args.lse = &lse_tensor;
  args.workspace = NULL; /* the plan's own workspace: one run at a time per plan */
  status = fmha_splitk_run(plan, &args);
  fmha_splitk_destroy_plan(plan);
  if (status != FMHA_STATUS_SUCCESS) return report("fmha_splitk_run", status);

  example_reference_attention(&shape, q, k, v, NULL, o_ref, lse_ref);
  o_error = example_relative_error(o, o_ref, Q_COUNT);
  lse_error = example_max_difference(lse, lse_ref, LSE_COUNT);
  printf("c_basic: relative error of O %.2e, largest LSE difference %.2e\n", o_error, lse_error);
  /* fp32 accumulation of exactly representable bf16 inputs: far below 1e-4. */
  if (!(o_error < 1e-4 && lse_error < 1e-4)) {
    fprintf(stderr, "c_basic: the result does not match the reference\n");
    return 1;
  }
  return 0;
}
