/*
 * c_dlopen: the library used the way Python ctypes, Rust or Go use it:
 * dlopen() and dlsym(), no link to it and nothing from it at build time but
 * the header's types. It also shows context parallelism in miniature: the
 * keys of each sequence are cut into two shards (as two GPUs would hold
 * them), attention runs over each shard separately, and fmha_merge()
 * combines the two partial (O, LSE) into attention over all keys, checked
 * against a float64 reference. Exit status 0 when it matches, 1 otherwise.
 *
 * Usage: c_dlopen [LIBRARY]   (default libfmha_splitk.so.0, found by the
 * dynamic loader's usual search: LD_LIBRARY_PATH, ld.so.cache, ...)
 */
#include <dlfcn.h>
#include <fmha_splitk/fmha_splitk.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/example_reference.h"

enum { BATCH = 2, Q_LEN = 2, HEADS_Q = 4, HEADS_KV = 4, HEAD_DIM = 32, KV_LEN = 256, SHARDS = 2 };
enum { SHARD_LEN = KV_LEN / SHARDS };
#define Q_COUNT (BATCH * Q_LEN * HEADS_Q * HEAD_DIM)
#define KV_COUNT (BATCH * KV_LEN * HEADS_KV * HEAD_DIM)
#define LSE_COUNT (BATCH * HEADS_Q * Q_LEN)

/* The entry points this program calls, resolved by name. */
static struct {
  const char *(*version)(void);
  const char *(*status_string)(fmha_status);
  const char *(*last_error_message)(void);
  fmha_status (*create_plan)(const fmha_splitk_problem *, fmha_splitk_plan_t *);
  void (*destroy_plan)(fmha_splitk_plan_t);
  fmha_status (*run)(fmha_splitk_plan_t, const fmha_splitk_args *);
  fmha_status (*merge)(const fmha_merge_args *);
} fmha;

/* ISO C cannot convert dlsym's void * to a function pointer; copying its
 * bytes is POSIX's way. */
static int resolve(void *library, const char *name, void *function_pointer, size_t size) {
  void *symbol = dlsym(library, name);
  if (symbol == NULL) {
    fprintf(stderr, "c_dlopen: dlsym(%s): %s\n", name, dlerror());
    return 0;
  }
  memcpy(function_pointer, &symbol, size);
  return 1;
}
#define RESOLVE(library, name, field) resolve(library, name, &fmha.field, sizeof fmha.field)

static int report(const char *call, fmha_status status) {
  fprintf(stderr, "c_dlopen: %s: %s: %s\n", call, fmha.status_string(status), fmha.last_error_message());
  return 1;
}

int main(int argc, char **argv) {
  static uint16_t q[Q_COUNT], k[KV_COUNT], v[KV_COUNT];
  static float o_shard[SHARDS][Q_COUNT], lse_shard[SHARDS][LSE_COUNT], o[Q_COUNT], lse[LSE_COUNT];
  static double o_ref[Q_COUNT], lse_ref[LSE_COUNT];
  const example_shape shape = {BATCH, Q_LEN, HEADS_Q, HEADS_KV, HEAD_DIM, KV_LEN};
  const char *path = argc > 1 ? argv[1] : "libfmha_splitk.so.0";

  int64_t q_shape[4] = {BATCH, Q_LEN, HEADS_Q, HEAD_DIM};
  int64_t shard_shape[4] = {BATCH, SHARD_LEN, HEADS_KV, HEAD_DIM};
  /* A shard is a strided view of the full cache: the sequence stride stays
   * that of KV_LEN keys. */
  int64_t kv_strides[4] = {(int64_t)KV_LEN * HEADS_KV * HEAD_DIM, HEADS_KV * HEAD_DIM, HEAD_DIM, 1};
  int64_t lse_shape[3] = {BATCH, HEADS_Q, Q_LEN};
  const DLDevice cpu = {kDLCPU, 0};
  const DLDataType bf16 = {kDLBfloat, 16, 1};
  const DLDataType f32 = {kDLFloat, 32, 1};
  DLTensor q_tensor = {q, cpu, 4, bf16, q_shape, NULL, 0};
  DLTensor o_tensor = {o, cpu, 4, f32, q_shape, NULL, 0};
  DLTensor lse_tensor = {lse, cpu, 3, f32, lse_shape, NULL, 0};
  DLTensor k_tensors[SHARDS], v_tensors[SHARDS], o_tensors[SHARDS], lse_tensors[SHARDS];
  const DLTensor *o_list[SHARDS], *lse_list[SHARDS];

  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  fmha_merge_args merge = FMHA_MERGE_ARGS_INIT;
  fmha_splitk_plan_t plan;
  fmha_status status;
  double o_error, lse_error;
  int shard;
  void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);

  if (library == NULL) {
    fprintf(stderr, "c_dlopen: dlopen(%s): %s\n", path, dlerror());
    return 1;
  }
  if (!(RESOLVE(library, "fmha_version", version) && RESOLVE(library, "fmha_status_string", status_string) &&
        RESOLVE(library, "fmha_last_error_message", last_error_message) &&
        RESOLVE(library, "fmha_splitk_create_plan", create_plan) &&
        RESOLVE(library, "fmha_splitk_destroy_plan", destroy_plan) && RESOLVE(library, "fmha_splitk_run", run) &&
        RESOLVE(library, "fmha_merge", merge)))
    return 1;
  printf("c_dlopen: loaded %s, fmha_splitk %s\n", path, fmha.version());

  example_fill_bf16(q, Q_COUNT, 11u);
  example_fill_bf16(k, KV_COUNT, 12u);
  example_fill_bf16(v, KV_COUNT, 13u);

  /* One plan serves both shards: they have the same shape. */
  problem.backend = FMHA_BACKEND_CPU;
  problem.batch = BATCH;
  problem.max_q_seqlen = Q_LEN;
  problem.max_kv_seqlen = SHARD_LEN;
  problem.heads_q = HEADS_Q;
  problem.heads_kv = HEADS_KV;
  problem.head_dim_qk = HEAD_DIM;
  problem.q_dtype = FMHA_DTYPE_BF16;
  problem.o_dtype = FMHA_DTYPE_F32;
  status = fmha.create_plan(&problem, &plan);
  if (status != FMHA_STATUS_SUCCESS) return report("fmha_splitk_create_plan", status);

  for (shard = 0; shard < SHARDS; ++shard) {
    const size_t first_key = (size_t)shard * SHARD_LEN * HEADS_KV * HEAD_DIM;
    fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
    DLTensor k_view = {k + first_key, cpu, 4, bf16, shard_shape, kv_strides, 0};
    DLTensor v_view = {v + first_key, cpu, 4, bf16, shard_shape, kv_strides, 0};
    DLTensor o_view = {o_shard[shard], cpu, 4, f32, q_shape, NULL, 0};
    DLTensor lse_view = {lse_shard[shard], cpu, 3, f32, lse_shape, NULL, 0};
    k_tensors[shard] = k_view;
    v_tensors[shard] = v_view;
    o_tensors[shard] = o_view;
    lse_tensors[shard] = lse_view;
    o_list[shard] = &o_tensors[shard];
    lse_list[shard] = &lse_tensors[shard];

    /* Each run's (O, LSE) is itself a partial result that fmha_merge() takes. */
    args.q = &q_tensor;
    args.k = &k_tensors[shard];
    args.v = &v_tensors[shard];
    args.o = &o_tensors[shard];
    args.lse = &lse_tensors[shard];
    status = fmha.run(plan, &args);
    if (status != FMHA_STATUS_SUCCESS) {
      fmha.destroy_plan(plan);
      return report("fmha_splitk_run", status);
    }
  }
  fmha.destroy_plan(plan);

  merge.num_partials = SHARDS;
  merge.o_list = o_list;
  merge.lse_list = lse_list;
  merge.o = &o_tensor;
  merge.lse = &lse_tensor;
  status = fmha.merge(&merge);
  if (status != FMHA_STATUS_SUCCESS) return report("fmha_merge", status);

  example_reference_attention(&shape, q, k, v, NULL, o_ref, lse_ref);
  o_error = example_relative_error(o, o_ref, Q_COUNT);
  lse_error = example_max_difference(lse, lse_ref, LSE_COUNT);
  printf("c_dlopen: %d shards merged; relative error of O %.2e, largest LSE difference %.2e\n", SHARDS, o_error,
         lse_error);
  if (!(o_error < 1e-4 && lse_error < 1e-4)) {
    fprintf(stderr, "c_dlopen: the result does not match the reference\n");
    return 1;
  }
  /* The library stays loaded: its CPU worker threads live until exit. */
  return 0;
}
