/*
 * The private contract between the core library and its backends (the
 * built-in CPU backend and the dlopen'ed GPU plugins). Plain C so a plugin
 * built by any compiler can implement it; no GPU header here.
 *
 * The core validates every user argument and hands backends canonical views:
 * fixed rank, element strides, byte_offset applied, G always present. A
 * backend may trust every view it receives (shapes agree with the problem,
 * last dim contiguous for q, k, v, o, o_partial and merge outputs and
 * partials (other views, e.g. lse and bias, may have any non-negative
 * strides), device and alignment checked). Device-side metadata
 * (lengths, offsets, page ids) is the exception: its values are only known
 * on the device.
 *
 * Versioning: a plugin exports
 *   int32_t fmha_backend_score(void);
 *   const fmha_backend_v1 *fmha_backend_init_v1(uint32_t core_api_version);
 * The core rejects a table whose api_version differs from
 * FMHA_BACKEND_API_VERSION or whose struct_size is smaller than it needs.
 */
#ifndef FMHA_SPLITK_CORE_BACKEND_API_H_
#define FMHA_SPLITK_CORE_BACKEND_API_H_

#include <stddef.h>
#include <stdint.h>

#include "fmha_splitk/fmha_splitk.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FMHA_BACKEND_API_VERSION 3u

/** Largest rank of a canonical view. */
#define FMHA_MAX_VIEW_RANK 6

/** Internal element types of views (a superset of fmha_dtype). */
typedef enum fmha_elem_type {
  FMHA_ELEM_NONE = 0,
  FMHA_ELEM_F16 = 1,
  FMHA_ELEM_BF16 = 2,
  FMHA_ELEM_F32 = 3,
  FMHA_ELEM_FP8 = 4, /* format from the problem; one byte per element */
  FMHA_ELEM_I32 = 5,
  FMHA_ELEM_F64 = 6
} fmha_elem_type;

/** Bytes of one element of type `elem` (fmha_elem_type). */
static inline size_t fmha_elem_bytes(int32_t elem) {
  switch (elem) {
    case FMHA_ELEM_F16:
    case FMHA_ELEM_BF16:
      return 2;
    case FMHA_ELEM_F32:
    case FMHA_ELEM_I32:
      return 4;
    case FMHA_ELEM_F64:
      return 8;
    default:
      return 1;
  }
}

/**
 * A canonical tensor view. `data` already includes DLTensor::byte_offset.
 * Strides are in elements of `elem`. data == NULL means "absent".
 *
 * Canonical forms handed to backends (letters as in the public header):
 *   q, o       [B, Mq, G, Hq, D]     (VARLEN: B = 1, Mq = total_q)
 *   k, v       dense/padded/gappy: [B, Mkv, G, Hkv, D] (gappy: B = 1)
 *              paged/ragged:       [num_pages, page_size, G, Hkv, D]
 *              int4: D is the number of int32 words; fp8 as int32 words is
 *              re-expressed as bytes (elem FP8, D = head dim).
 *              A K/V head stride of 0 with Hq heads becomes Hkv = 1.
 *   lse        [B, G, Hq, Mq]        (VARLEN: [1, G, Hq, total_q])
 *   bias       [B, G, Hq, Mq, Mkv]   (VARLEN: Mq = max_q_seqlen)
 *   sinks      [G, Hq]
 *   kv_seqlen, kv_seqstart, kv_last_page_len  [B]
 *   q_seqstart, kv_indptr                     [B + 1]
 *   block_table [B, max_pages_per_seq]; kv_indices [nnz]
 *   k_scale, v_scale  per row: like k without D; per head [G, Hkv];
 *                     per tensor [1]
 *   q_scale    per row [B, Mq, G, Hq]; per head [G, Hq]; per tensor [1]
 *   o_partial  [S, B, Mq, G, Hq, Dv]; lse_partial [S, B, G, Hq, Mq]
 */
typedef struct fmha_view {
  void *data;
  int32_t elem;
  int32_t ndim;
  int64_t shape[FMHA_MAX_VIEW_RANK];
  int64_t stride[FMHA_MAX_VIEW_RANK];
} fmha_view;

/** What the core needs to know about a device to plan for it. */
typedef struct fmha_device_props {
  int32_t device_id;
  /** SMs (CUDA), CUs (HIP) or worker threads (CPU): the "workers". */
  int32_t num_workers;
  /** e.g. 90 for sm_90; 0 on CPU. */
  int32_t compute_capability;
  /** Required alignment in bytes of every row start of Q/K/V/O (and of each
   *  tensor's data pointer); at least the element size is always checked. */
  int32_t row_alignment;
  /** DLPack device type of tensors this backend accepts. */
  int32_t dl_device_type;
  /** Driver version (e.g. 13000 for CUDA 13.0; 0 on CPU): part of the
   *  device's identity in the tuning cache. */
  int32_t driver_version;
  /** Peak memory bandwidth estimate in GB/s (0 if unknown). */
  double memory_bandwidth_gbps;
  char name[96];
} fmha_device_props;

/** Work partition schedules. */
typedef enum fmha_schedule {
  /** split_k forced: every sequence is cut at multiples of kv_chunk_size
   *  (= ceil(max_kv_seqlen / split_k)); chunk s covers keys
   *  [s * chunk, (s + 1) * chunk). Partial slots: B * split_k. */
  FMHA_SCHEDULE_UNIFORM = 0,
  /** Auto: the keys of the whole batch (actual lengths, read at run time)
   *  are cut into about num_workers equal contiguous ranges; a sequence
   *  crossing a range boundary is split there. Partial slots <= B +
   *  num_workers. */
  FMHA_SCHEDULE_BALANCED = 1,
  /** Batch invariant: sequence b is cut at multiples of kv_chunk_size
   *  regardless of the rest of the batch. Partial slots:
   *  B * ceil(max_kv_seqlen / kv_chunk_size). */
  FMHA_SCHEDULE_FIXED_CHUNK = 2
} fmha_schedule;

/**
 * The plan: plain data, no pointers into device memory, so it can be used
 * with any workspace and any stream. Filled by the core (problem, schedule,
 * sizes), then completed by the backend's plan() (kernel choice, private
 * bytes, extra workspace).
 */
typedef struct fmha_plan_data {
  /** The problem with every default resolved (struct_size = full size,
   *  head_dim_v, kv_dtype, o_dtype, softmax_scale, groups >= 1,
   *  kv_quant_groups >= 1, kv_chunk_size, page_size, kv_seqlen_hint = NULL). */
  fmha_splitk_problem problem;
  fmha_device_props device;
  /** fmha_schedule. */
  int32_t schedule;
  /** Chunks per sequence: forced value, or the expected maximum. */
  int32_t split_k;
  /** Keys per chunk (UNIFORM, FIXED_CHUNK) or minimum keys per piece
   *  (BALANCED). */
  int32_t kv_chunk_size;
  /** BALANCED: number of equal ranges the batch's keys are cut into. */
  int32_t num_ranges;
  /** Upper bound on partial slots (pieces of sequences that do not cover
   *  the whole sequence); one slot holds rows_per_seq partial rows. */
  int64_t max_partials;
  /** Query rows of one sequence for one K/V head (Mq * Hq / Hkv), FIXED. */
  int64_t rows_per_kv_head;
  /** Workspace layout (bytes, from the workspace base, 256-aligned). */
  size_t ws_partial_o_offset;   /* f32 [max_partials, G, Hq, Mq, Dv] */
  size_t ws_partial_lse_offset; /* f32 [max_partials, G, Hq, Mq] */
  size_t ws_meta_offset;        /* backend scheduling metadata */
  size_t ws_meta_size;
  size_t workspace_size;
  /** Counters (uint32) a run needs to merge split sequences inside its
   *  forward kernel (the last CTA of each sequence's row tile merges)
   *  instead of in a second pass; 0: the plan has no such merge. Set by
   *  the backend's plan(); the core allocates them beside the plan's own
   *  workspace, zeroed, and passes them only to runs on that workspace
   *  (fmha_run_views.merge_counters). */
  int64_t merge_counters;
  char kernel_name[96];
  /** Opaque to the core: the backend's kernel configuration. */
  uint8_t backend_private[256];
} fmha_plan_data;

/** Canonical views of one run. */
typedef struct fmha_run_views {
  fmha_view q, k, v, o, lse, bias, sinks;
  fmha_view kv_seqlen, kv_seqstart, q_seqstart, block_table;
  fmha_view kv_indptr, kv_indices, kv_last_page_len;
  fmha_view k_scale, v_scale, q_scale;
  fmha_view o_partial, lse_partial;
  /** Never NULL when workspace_size > 0 (the core substitutes the plan's). */
  void *workspace;
  size_t workspace_size;
  /** plan->merge_counters uint32 counters, zero before the run, which the
   *  run leaves zero again; NULL: merge in a separate pass. Given only to
   *  runs on the plan's own workspace (one run at a time per plan). */
  void *merge_counters;
  void *stream;
  /** The plan's run order (from order_create), given to runs on its own
   *  workspace: such a run must not start on the device before the
   *  previous one (perhaps on another stream) has finished, since they
   *  share the workspace and the counters. The core calls run() for them
   *  one at a time. NULL: nothing to order (a caller's workspace, or a
   *  backend that computes before run() returns). */
  void *run_order;
} fmha_run_views;

/**
 * Canonical merge: N partials, each o [B, M, G, H, D] and lse [B, G, H, M].
 * When `stacked`, o_parts[0] / lse_parts[0] describe partial 0 and the
 * others are at `stacked_o_stride` / `stacked_lse_stride` elements further;
 * the arrays still hold all N views (the core fills them), so a backend may
 * use either description.
 */
typedef struct fmha_merge_views {
  int64_t num_partials;
  const fmha_view *o_parts;
  const fmha_view *lse_parts;
  int32_t stacked;
  int32_t reserved;
  int64_t stacked_o_stride;
  int64_t stacked_lse_stride;
  fmha_view o;   /* [B, M, G, H, D] */
  fmha_view lse; /* [B, G, H, M]; data NULL when not wanted */
  void *stream;
} fmha_merge_views;

/** Canonical merge backward (shapes as fmha_merge_views). */
typedef struct fmha_merge_backward_views {
  int64_t num_partials;
  const fmha_view *o_parts;
  const fmha_view *lse_parts;
  const fmha_view *grad_o_parts;   /* written */
  const fmha_view *grad_lse_parts; /* written */
  fmha_view o, lse, grad_o;
  fmha_view grad_lse; /* data NULL: zero */
  void *stream;
} fmha_merge_backward_views;

/** Message buffer a backend writes its error text into (NUL-terminated). */
typedef struct fmha_msg {
  char *text;
  size_t capacity;
} fmha_msg;

/** The table a backend returns from fmha_backend_init_v1(). */
typedef struct fmha_backend_v1 {
  uint32_t api_version; /* FMHA_BACKEND_API_VERSION */
  uint32_t struct_size; /* sizeof(fmha_backend_v1) */
  int32_t kind;         /* fmha_backend_kind */
  int32_t device_count;
  const char *name;

  /** Properties of device `device_id` (0 <= id < device_count). */
  fmha_status (*device_props)(int32_t device_id, fmha_device_props *out,
                              fmha_msg msg);
  /** Completes a plan: the core has filled problem, device, schedule and
   *  sizes; the backend chooses the kernel, may refuse with NOT_SUPPORTED,
   *  and may grow ws_meta_size / workspace_size (keeping 256 alignment). */
  fmha_status (*plan)(fmha_plan_data *plan, fmha_msg msg);
  /** Launches (or, on CPU, computes) one run. */
  fmha_status (*run)(const fmha_plan_data *plan, const fmha_run_views *views,
                     fmha_msg msg);
  fmha_status (*merge)(const fmha_merge_views *views, fmha_msg msg);
  fmha_status (*merge_backward)(const fmha_merge_backward_views *views,
                                fmha_msg msg);
  /** Device memory for plan-owned workspaces. */
  fmha_status (*alloc)(int32_t device_id, size_t bytes, void **ptr,
                       fmha_msg msg);
  void (*free)(int32_t device_id, void *ptr);
  /** Called once when the core unloads the backend. May be NULL. */
  void (*shutdown)(void);
  /** FMHA_FLAG_CHECKED plans only: waits for `stream`, turns the violation
   *  record a checked run left in `workspace` (never NULL: the core
   *  substitutes the plan's) into INVALID_ARGUMENT with a message naming
   *  the sequence, field and value, and clears it. NULL: the backend
   *  validates before computing and leaves nothing to report (the core
   *  answers SUCCESS). Appended: tables end here from this field on. */
  fmha_status (*check_status)(const fmha_plan_data *plan, void *workspace, void *stream, fmha_msg msg);
  /** Autotuning: `warmup` untimed runs of `plan` on `views` (on
   *  views->stream), then `timed` runs each timed alone (GPU: events, and
   *  before each the L2 cache overwritten unless `keep_l2`); writes the
   *  median in microseconds to *median_us. Synchronises the stream. May
   *  allocate. NULL: the backend cannot time runs. */
  fmha_status (*time_run)(const fmha_plan_data *plan, const fmha_run_views *views, int32_t warmup, int32_t timed,
                          int32_t keep_l2, double *median_us, fmha_msg msg);
  /** Autotuning: copies `bytes` at `src` (memory of device `device_id`) to
   *  the host buffer `dst` once the work queued on `stream` is done;
   *  synchronous. NULL: as time_run. */
  fmha_status (*copy_to_host)(int32_t device_id, void *dst, const void *src, size_t bytes, void *stream,
                              fmha_msg msg);
  /** Sets `bytes` of device `device_id`'s memory at `ptr` (from alloc) to
   *  zero and waits for it, without waiting for other work on the device
   *  (plan creation: the plan's merge counters). NULL: the core gives the
   *  backend no merge counters. */
  fmha_status (*zero)(int32_t device_id, void *ptr, size_t bytes, fmha_msg msg);
  /** Creates the object that orders a plan's runs on its own workspace on
   *  the device (fmha_run_views.run_order), for a plan on `device_id`.
   *  NULL: the backend's runs finish before run() returns (nothing to
   *  order). */
  fmha_status (*order_create)(int32_t device_id, void **order, fmha_msg msg);
  /** Releases an object from order_create (never NULL). */
  void (*order_destroy)(int32_t device_id, void *order);
} fmha_backend_v1;

typedef int32_t (*fmha_backend_score_fn)(void);
typedef const fmha_backend_v1 *(*fmha_backend_init_v1_fn)(
    uint32_t core_api_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FMHA_SPLITK_CORE_BACKEND_API_H_ */
