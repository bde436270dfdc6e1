/**
 * @file fmha_splitk.h
 * fmha_splitk: split-K ("flash decoding") attention and log-sum-exp merge.
 *
 * The one public header. Pure C99 (also valid C++); it includes no GPU
 * runtime header: streams are `void*` (a cudaStream_t / hipStream_t, or NULL
 * for the default stream; ignored by the CPU backend).
 *
 * Shape of the API (describe -> plan -> query workspace -> run):
 *   1. fill an fmha_splitk_problem (start from FMHA_SPLITK_PROBLEM_INIT);
 *   2. fmha_splitk_create_plan() validates it, picks backend, device, split
 *      count, kernel and work partition, and sizes the workspace;
 *   3. fmha_splitk_run() launches on the caller's stream; it allocates
 *      nothing, never synchronises the host and is CUDA/HIP-graph capturable;
 *   4. fmha_merge() / fmha_merge_backward() combine partial results.
 *
 * Tensors cross the boundary as DLPack DLTensor (from the system's
 * <dlpack/dlpack.h>). See docs/ for the tensor conventions and the exact
 * semantics of every feature.
 *
 * ABI rules: every struct passed in starts with `struct_size` and is filled
 * by its *_INIT macro; structs are append-only and the library reads only
 * the bytes inside the caller's `struct_size` (bytes past what this build
 * knows must be zero). Enum values are explicit and never renumbered; struct
 * fields that hold enum values are int32_t so their size is fixed.
 */
#ifndef FMHA_SPLITK_FMHA_SPLITK_H_
#define FMHA_SPLITK_FMHA_SPLITK_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

/**
 * @defgroup fmha_version Version
 * The version macros mirror the file VERSION at the root of the source tree;
 * the build refuses to configure when they disagree.
 * @{
 */
/** Major version: changes only with an ABI break; part of the SONAME. */
#define FMHA_SPLITK_VERSION_MAJOR 0
/** Minor version: grows with every release that adds to the API. */
#define FMHA_SPLITK_VERSION_MINOR 1
/** Patch version: fixes that change no interface. */
#define FMHA_SPLITK_VERSION_PATCH 0
/** The version as one integer: major * 10000 + minor * 100 + patch. */
#define FMHA_SPLITK_VERSION_CODE                                      \
  (FMHA_SPLITK_VERSION_MAJOR * 10000 + FMHA_SPLITK_VERSION_MINOR * 100 + \
   FMHA_SPLITK_VERSION_PATCH)
/** @} */

/**
 * @def FMHA_SPLITK_EXPORT
 * Marks the functions the library exports (default visibility; the library
 * is built with hidden visibility and a version script, so only these leave
 * it).
 */
#if defined(_WIN32)
#define FMHA_SPLITK_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define FMHA_SPLITK_EXPORT __attribute__((visibility("default")))
#else
#define FMHA_SPLITK_EXPORT
#endif

/**
 * @def FMHA_SPLITK_STRUCT_INIT
 * Initialiser of a versioned struct: `struct_size` set, every other field
 * zero. C uses a designated initialiser and C++ a value-initialised copy, so
 * that neither warns under -Wmissing-field-initializers.
 */
#ifdef __cplusplus
/** C++ helper behind the *_INIT macros (not part of the ABI: inline). */
template <class T>
inline T fmha_struct_init_() {
  T value = T();
  value.struct_size = sizeof(T);
  return value;
}
#define FMHA_SPLITK_STRUCT_INIT(type) fmha_struct_init_<type>()
#else
#define FMHA_SPLITK_STRUCT_INIT(type) {.struct_size = sizeof(type)}
#endif

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @defgroup fmha_enums Enumerations
 * Every value is explicit and is never renumbered.
 * @{
 */

/** Status returned by every fallible function. */
typedef enum fmha_status {
  /** The call did what it was asked. */
  FMHA_STATUS_SUCCESS = 0,
  /** An argument is malformed (bad shape, dtype, stride, pointer, value);
   *  fmha_last_error_message() names it and the values. */
  FMHA_STATUS_INVALID_ARGUMENT = 1,
  /** A valid request this build or backend cannot do; the message says what
   *  would be needed. */
  FMHA_STATUS_NOT_SUPPORTED = 2,
  /** The requested backend (or any backend able to serve the request) is not
   *  loaded or has no device; fmha_get_backends() says why. */
  FMHA_STATUS_BACKEND_UNAVAILABLE = 3,
  /** The workspace passed to fmha_splitk_run() is smaller than the plan's
   *  fmha_splitk_plan_workspace_size(). */
  FMHA_STATUS_INSUFFICIENT_WORKSPACE = 4,
  /** A host or device allocation failed. */
  FMHA_STATUS_OUT_OF_MEMORY = 5,
  /** The GPU runtime or driver reported an error; the message carries the
   *  driver's text. */
  FMHA_STATUS_DEVICE_ERROR = 6,
  /** A bug in the library; please report the message. */
  FMHA_STATUS_INTERNAL_ERROR = 7
} fmha_status;

/** Backend selection. */
typedef enum fmha_backend_kind {
  /** Pick by device query: CUDA if an NVIDIA GPU is present, else HIP if an
   *  AMD GPU is present, else CPU. The environment variable
   *  FMHA_SPLITK_BACKEND=cpu|cuda|hip overrides AUTO. */
  FMHA_BACKEND_AUTO = 0,
  /** Portable C++ reference backend, multithreaded; always present. */
  FMHA_BACKEND_CPU = 1,
  /** NVIDIA GPUs (plugin libfmha_splitk_cuda.so). */
  FMHA_BACKEND_CUDA = 2,
  /** AMD GPUs (plugin libfmha_splitk_hip.so). */
  FMHA_BACKEND_HIP = 3
} fmha_backend_kind;

/** Element types named in a problem. Tensors carry their own DLPack dtype,
 *  which must agree with the type named here. */
typedef enum fmha_dtype {
  /** Only for fmha_splitk_problem::o_dtype: the dtype of Q (bf16 for fp8 Q). */
  FMHA_DTYPE_DEFAULT = 0,
  /** IEEE binary16 (DLPack kDLFloat, 16 bits). */
  FMHA_DTYPE_F16 = 1,
  /** bfloat16 (DLPack kDLBfloat, 16 bits). */
  FMHA_DTYPE_BF16 = 2,
  /** IEEE binary32 (DLPack kDLFloat, 32 bits). */
  FMHA_DTYPE_F32 = 3,
  /** 8-bit float; the format is fmha_splitk_problem::fp8_format. Tensors may
   *  be DLPack uint8, the DLPack 1.1 fp8 codes (10 = e4m3fn, 11 = e4m3fnuz),
   *  or int32 words holding four values (value 4w+j is byte j of word w). */
  FMHA_DTYPE_FP8 = 4
} fmha_dtype;

/** Quantisation of the K/V cache. */
typedef enum fmha_kv_quant {
  /** K and V are in fmha_splitk_problem::kv_dtype (fp16 or bf16). */
  FMHA_KV_QUANT_NONE = 0,
  /** int4, row-wise or group-wise: int32 words, last dim
   *  `kv_quant_groups + D / 8`. The first `kv_quant_groups` words hold, per
   *  group, an fp16 scale (low 16 bits) and fp16 shift (high 16 bits); then
   *  the packed values: dim d = 8w + j is the unsigned nibble at bits
   *  4j..4j+3 of value word w; value = nibble * scale + shift. */
  FMHA_KV_QUANT_INT4 = 1,
  /** fp8 values with separate scale tensors (see fmha_kv_scale_kind and
   *  fmha_scale_granularity); value = fp8 * scale + shift. */
  FMHA_KV_QUANT_FP8 = 2
} fmha_kv_quant;

/** The two 8-bit float formats; part of the problem, never guessed. */
typedef enum fmha_fp8_format {
  /** OCP E4M3FN: bias 7, no infinities, S.1111.111 is NaN (NVIDIA, gfx950). */
  FMHA_FP8_E4M3FN = 0,
  /** E4M3FNUZ: bias 8, no infinities, no negative zero; 0x80 is NaN (gfx942). */
  FMHA_FP8_E4M3FNUZ = 1
} fmha_fp8_format;

/** How fp8 K/V scales are stored. */
typedef enum fmha_kv_scale_kind {
  /** int32 per scale: fp16 scale in the low 16 bits, fp16 shift in the high. */
  FMHA_KV_SCALE_F16X2_SCALE_SHIFT = 0,
  /** float32 scale, no shift. */
  FMHA_KV_SCALE_F32 = 1
} fmha_kv_scale_kind;

/** Granularity of fp8 scales (K/V scales and fp8 Q scales). */
typedef enum fmha_scale_granularity {
  /** One scale per row: K/V `[B, Mkv, G, Hkv]` (paged: `[rows, G, Hkv]`),
   *  Q `[B, Mq, G, Hq]`. */
  FMHA_SCALE_PER_ROW = 0,
  /** One scale per head: `[G, Hkv]` for K/V, `[G, Hq]` for Q. */
  FMHA_SCALE_PER_HEAD = 1,
  /** One scale for the tensor: shape `[1]` (or 0-d), on the device. */
  FMHA_SCALE_PER_TENSOR = 2
} fmha_scale_granularity;

/** Where the keys of each sequence are. One layout per plan. */
typedef enum fmha_kv_layout {
  /** K/V `[B, Mkv, G, Hkv, D]`: every sequence has Mkv keys. */
  FMHA_KV_DENSE = 0,
  /** K/V `[B, Mkv_max, G, Hkv, D]`; `kv_seqlen[b]` valid keys. */
  FMHA_KV_PADDED = 1,
  /** K/V `[1, total, G, Hkv, D]`; sequence b's keys start at row
   *  `kv_seqstart[b]` and number `kv_seqlen[b]`. */
  FMHA_KV_GAPPY = 2,
  /** K/V `[num_pages * page_size, G, Hkv, D]` or
   *  `[num_pages, page_size, G, Hkv, D]`; logical key i of sequence b is at
   *  physical row `block_table[b, p / page_size] * page_size + p % page_size`
   *  with `p = kv_seqstart[b] + i` (kv_seqstart optional, default 0);
   *  `kv_seqlen[b]` keys (required). */
  FMHA_KV_PAGED = 3,
  /** CSR pages (MLA style): sequence b owns the pages `kv_indices[i]` for
   *  `kv_indptr[b] <= i < kv_indptr[b+1]` and has
   *  `(pages - 1) * page_size + kv_last_page_len[b]` keys
   *  (`kv_last_page_len` optional, default page_size). */
  FMHA_KV_RAGGED = 4
} fmha_kv_layout;

/** Where the queries of each sequence are. */
typedef enum fmha_q_layout {
  /** Q `[B, Mq, G, Hq, D]`: every sequence has Mq queries. */
  FMHA_Q_FIXED = 0,
  /** Q `[1, total_q, G, Hq, D]`; sequence b's queries are rows
   *  `q_seqstart[b]` to `q_seqstart[b+1] - 1`; at most `max_q_seqlen` per
   *  sequence. */
  FMHA_Q_VARLEN = 1
} fmha_q_layout;

/** Structural masks (an additive bias can be combined with any of them).
 *  Query i of a sequence with Mq_b queries and L_b keys sits at position
 *  `p = L_b - Mq_b + i` (bottom-right aligned). */
typedef enum fmha_mask_kind {
  /** Every query sees every key of its sequence. */
  FMHA_MASK_NONE = 0,
  /** Query at position p sees keys j <= p. */
  FMHA_MASK_CAUSAL = 1,
  /** Query at position p sees keys p - window_left <= j <= p + window_right. */
  FMHA_MASK_LOCAL = 2,
  /** Query at position p sees keys p - window_left <= j <= p. */
  FMHA_MASK_CAUSAL_LOCAL = 3
} fmha_mask_kind;

/** Bits of fmha_splitk_problem::flags. */
typedef enum fmha_problem_flags {
  /** Fixed KV chunk size (`kv_chunk_size`, default 256): each sequence's
   *  result is bitwise independent of the rest of the batch. */
  FMHA_FLAG_BATCH_INVARIANT = 1u << 0,
  /** Run writes the un-merged split partials to `o_partial` / `lse_partial`
   *  (fp32, `[split_k, ...]`) instead of O and LSE, for a later fmha_merge().
   *  Needs a forced `split_k`. */
  FMHA_FLAG_WRITE_PARTIALS = 1u << 1,
  /** V is the first `head_dim_v` dims of the K rows (MLA latent cache): one
   *  buffer, read once; fmha_splitk_args::v must be NULL. */
  FMHA_FLAG_V_FROM_K = 1u << 2,
  /** Q is fp8 with `q_scale`; QK^T is computed in fp8. */
  FMHA_FLAG_FP8_QK = 1u << 3,
  /** P is quantised per row to fp8 (`p_scale = rowmax(P) / 448`) for the PV
   *  product with fp8 V. */
  FMHA_FLAG_FP8_PV = 1u << 4,
  /** Validate device-side metadata inside the kernels (lengths against
   *  capacity, page ids against the page count, monotonic offsets): a
   *  sequence that fails is treated as empty and reported by
   *  fmha_splitk_check_status(). Without the flag the checks cost nothing. */
  FMHA_FLAG_CHECKED = 1u << 5,
  /** The plan allocates no workspace of its own: every run of a plan whose
   *  fmha_splitk_plan_workspace_size() is nonzero passes one (workspace
   *  NULL then fails with FMHA_STATUS_INSUFFICIENT_WORKSPACE). For engines
   *  that own their device memory; plan creation then allocates no device
   *  memory at all. */
  FMHA_FLAG_EXTERNAL_WORKSPACE = 1u << 6
} fmha_problem_flags;

/** @} */

/**
 * @defgroup fmha_problem Problem description
 * @{
 */

/**
 * Everything that is fixed for a plan. Fill with FMHA_SPLITK_PROBLEM_INIT,
 * then set the fields; zero means "default" for every field after
 * `struct_size`.
 *
 * Letters: B batch, Mq queries per sequence, Mkv keys per sequence, G groups,
 * Hq query heads per group, Hkv K/V heads per group (Hq % Hkv == 0), Dqk head
 * dim of Q and K, Dv head dim of V and O.
 */
typedef struct fmha_splitk_problem {
  /** sizeof(fmha_splitk_problem) as the caller compiled it. */
  size_t struct_size;
  /** fmha_backend_kind; AUTO picks by device query. */
  int32_t backend;
  /** Device ordinal within the backend (ignored by the CPU backend). */
  int32_t device_id;

  /** B: number of sequences (0 allowed: runs do nothing). */
  int64_t batch;
  /** Mq (FIXED) or the largest per-sequence query count (VARLEN). */
  int64_t max_q_seqlen;
  /** Mkv (DENSE), the padded capacity (PADDED), or the largest sequence
   *  length that any run will see (GAPPY, PAGED, RAGGED). */
  int64_t max_kv_seqlen;
  /** G: independent head groups (1 unless the 5-D forms are used). */
  int32_t groups;
  /** Hq: query heads per group. */
  int32_t heads_q;
  /** Hkv: distinct K/V heads per group. K/V tensors may instead have Hq heads
   *  with head stride 0 when heads_kv == 1. */
  int32_t heads_kv;
  /** Dqk: head dim of Q and K: a multiple of 8 in [16, 256], 512, or 576
   *  (MLA). */
  int32_t head_dim_qk;
  /** Dv: head dim of V and O; 0 means equal to head_dim_qk. */
  int32_t head_dim_v;

  /** fmha_q_layout. */
  int32_t q_layout;
  /** fmha_kv_layout. */
  int32_t kv_layout;
  /** Keys per page for PAGED and RAGGED: a power of two in [1, 256]. */
  int32_t page_size;

  /** fmha_dtype of Q: F16, BF16, or FP8 (with FMHA_FLAG_FP8_QK). */
  int32_t q_dtype;
  /** fmha_dtype of K and V when unquantised: F16 or BF16 (default: q_dtype,
   *  or BF16 for fp8 Q). */
  int32_t kv_dtype;
  /** fmha_dtype of O: F16, BF16 or F32 (DEFAULT: q_dtype; BF16 for fp8 Q). */
  int32_t o_dtype;

  /** fmha_kv_quant. */
  int32_t kv_quant;
  /** int4: number of groups along the head dim (0 or 1 = row-wise; 2, 4, 8). */
  int32_t kv_quant_groups;
  /** fmha_fp8_format of every fp8 tensor (K/V, Q). */
  int32_t fp8_format;
  /** fmha_kv_scale_kind of fp8 K/V scale tensors. */
  int32_t kv_scale_kind;
  /** fmha_scale_granularity of fp8 K/V scale tensors. */
  int32_t kv_scale_granularity;
  /** fmha_scale_granularity of the fp8 Q scale tensor. */
  int32_t q_scale_granularity;

  /** fmha_mask_kind. */
  int32_t mask;
  /** Keys to the left of the query position a LOCAL / CAUSAL_LOCAL query
   *  sees (>= 0). */
  int32_t window_left;
  /** Keys to the right a LOCAL query sees (>= 0). */
  int32_t window_right;
  /** Nonzero: an additive bias tensor `[B, G, Hq, Mq, Mkv]` (or
   *  `[B, Hq, Mq, Mkv]`) is passed to each run, added to the scaled scores
   *  (after soft-capping), indexed by the query's and key's index within
   *  their sequence. Any float dtype. */
  int32_t has_bias;
  /** Nonzero: a float32 sinks tensor `[G, Hq]` (or `[Hq]`) is passed: a
   *  per-head logit that joins the softmax denominator with no value row.
   *  The LSE written includes it. */
  int32_t has_sinks;

  /** Scale applied to QK^T; 0 means 1/sqrt(head_dim_qk). */
  float softmax_scale;
  /** Logit soft-capping: s = cap * tanh(s / cap), applied to the scaled
   *  score before masking and bias; 0 disables. */
  float softcap;

  /** Number of KV chunks per sequence; 0 lets the plan choose (balanced by
   *  actual lengths); >= 1 forces uniform chunks of ceil(max_kv_seqlen /
   *  split_k) keys. 1 writes O directly with no workspace and no merge. */
  int32_t split_k;
  /** Keys per chunk with FMHA_FLAG_BATCH_INVARIANT; 0 = 256. */
  int32_t kv_chunk_size;
  /** Bitwise OR of fmha_problem_flags. */
  uint32_t flags;
  /** Reserved; must be zero. */
  uint32_t reserved0;

  /** Optional host array of `batch` key counts, read only during
   *  fmha_splitk_create_plan() to balance the work partition; runs may pass
   *  other lengths (up to max_kv_seqlen) and stay correct. */
  const int32_t *kv_seqlen_hint;
  /** PAGED: number of pages in the cache (checks K/V shapes); RAGGED: too. */
  int64_t num_pages;
  /** PAGED: columns of `block_table` (pages per sequence at most). */
  int64_t max_pages_per_seq;
} fmha_splitk_problem;

/** Initialiser for fmha_splitk_problem: every field zero (default). */
#define FMHA_SPLITK_PROBLEM_INIT FMHA_SPLITK_STRUCT_INIT(fmha_splitk_problem)

/**
 * Tensors and memory for one run. Pointers to DLTensor are borrowed for the
 * duration of the call (the described memory must stay valid until the work
 * on the stream completes). Optional tensors are NULL when absent. Every
 * tensor must be on the plan's backend and device (kDLCPU, kDLCUDA or
 * kDLROCM with the plan's device id); the last dimension of Q, K, V, O must
 * be contiguous.
 */
typedef struct fmha_splitk_args {
  /** sizeof(fmha_splitk_args) as the caller compiled it. */
  size_t struct_size;
  /** Q `[B, Mq, G, Hq, Dqk]` or `[B, Mq, Hq, Dqk]` (VARLEN: B = 1, Mq =
   *  total_q). */
  const DLTensor *q;
  /** K (see fmha_kv_layout for the shape per layout). */
  const DLTensor *k;
  /** V, shaped like K with Dv; NULL with FMHA_FLAG_V_FROM_K. */
  const DLTensor *v;
  /** O `[B, Mq, G, Hq, Dv]` (or 4-D), in the problem's o_dtype. Written. */
  const DLTensor *o;
  /** Optional LSE `[B, G, Hq, Mq]` (or `[B, Hq, Mq]`), float32. Written. */
  const DLTensor *lse;
  /** Additive bias, when has_bias. */
  const DLTensor *bias;
  /** Sinks `[G, Hq]` / `[Hq]` float32, when has_sinks. */
  const DLTensor *sinks;
  /** int32 `[B]`: keys per sequence (PADDED, GAPPY, PAGED). */
  const DLTensor *kv_seqlen;
  /** int32 `[B]`: first key row (GAPPY) or logical start (PAGED, optional). */
  const DLTensor *kv_seqstart;
  /** int32 `[B + 1]`: query row offsets (VARLEN). */
  const DLTensor *q_seqstart;
  /** int32 `[B, max_pages_per_seq]` (PAGED). */
  const DLTensor *block_table;
  /** int32 `[B + 1]` (RAGGED). */
  const DLTensor *kv_indptr;
  /** int32 `[nnz]` page ids (RAGGED). */
  const DLTensor *kv_indices;
  /** int32 `[B]`, optional (RAGGED). */
  const DLTensor *kv_last_page_len;
  /** fp8 K scales (see fmha_scale_granularity), or the per-tensor scale. */
  const DLTensor *k_scale;
  /** fp8 V scales; NULL with FMHA_FLAG_V_FROM_K (k_scale applies). */
  const DLTensor *v_scale;
  /** fp8 Q scales (FMHA_FLAG_FP8_QK). */
  const DLTensor *q_scale;
  /** FMHA_FLAG_WRITE_PARTIALS: fp32 `[split_k, B, Mq, G, Hq, Dv]` (or
   *  without G). Chunks with no valid key hold O = 0. */
  const DLTensor *o_partial;
  /** FMHA_FLAG_WRITE_PARTIALS: fp32 `[split_k, B, G, Hq, Mq]` (or without
   *  G). Chunks with no valid key hold -inf. */
  const DLTensor *lse_partial;
  /** Workspace of at least fmha_splitk_plan_workspace_size() bytes on the
   *  plan's device, 256-byte aligned; NULL uses memory the plan owns (runs
   *  on it are serialised: see fmha_splitk_run(); not with
   *  FMHA_FLAG_EXTERNAL_WORKSPACE). Contents need not be initialised and
   *  are garbage afterwards. On the CUDA backend a split run on the plan's
   *  own memory may merge its partial results inside the forward kernel
   *  (one kernel launch instead of two, with counters the plan zeroed at
   *  creation and every run leaves zero); its O and LSE may then differ in
   *  the last bits from a run on a caller's workspace (each is
   *  deterministic). */
  void *workspace;
  /** Size of `workspace` in bytes. */
  size_t workspace_size;
  /** cudaStream_t / hipStream_t (NULL: default stream); ignored on CPU. */
  void *stream;
} fmha_splitk_args;

/** Initialiser for fmha_splitk_args. */
#define FMHA_SPLITK_ARGS_INIT FMHA_SPLITK_STRUCT_INIT(fmha_splitk_args)

/** What a plan chose (filled by fmha_splitk_get_plan_info()). */
typedef struct fmha_splitk_plan_info {
  /** Set by the caller to sizeof(fmha_splitk_plan_info) (the INIT macro). */
  size_t struct_size;
  /** fmha_backend_kind the plan runs on. */
  int32_t backend;
  /** Device ordinal. */
  int32_t device_id;
  /** KV chunks per sequence: the forced value, or the largest the plan
   *  expects for the hinted (or maximal) lengths. */
  int32_t split_k;
  /** Keys per chunk (uniform and batch-invariant schedules), or the target
   *  keys per work item (balanced). */
  int32_t kv_chunk_size;
  /** Parallel workers the partition targets (SMs, CUs or threads). */
  int32_t num_workers;
  /** Upper bound of partial rows kept in the workspace, per head. */
  int32_t max_partials;
  /** Workspace bytes a run needs. */
  size_t workspace_size;
  /** Backend name, NUL-terminated ("cpu", "cuda", "hip"). */
  char backend_name[16];
  /** Kernel / schedule chosen, NUL-terminated, for logs. */
  char kernel_name[96];
  /** Device name, NUL-terminated. */
  char device_name[96];
  /** Index of the configuration the plan runs among its candidates (see
   *  fmha_splitk_get_plan_config()). */
  int32_t config_index;
  /** fmha_config_source: where that configuration came from. */
  int32_t config_source;
} fmha_splitk_plan_info;

/** Initialiser for fmha_splitk_plan_info. */
#define FMHA_SPLITK_PLAN_INFO_INIT FMHA_SPLITK_STRUCT_INIT(fmha_splitk_plan_info)

/** Opaque plan handle. */
typedef struct fmha_splitk_plan_s *fmha_splitk_plan_t;

/** @} */

/**
 * @defgroup fmha_merge_api Merge of partial results
 * @{
 */

/**
 * Inputs of fmha_merge(): N partial results (O_i, LSE_i), given either
 * stacked (`o_stacked`, `lse_stacked` with a leading split dimension) or as
 * lists (`o_list`, `lse_list`, `num_partials` entries, each with its own
 * strides). Exactly one form. Computes `LSE = log sum_i exp(LSE_i)`,
 * `O = sum_i exp(LSE_i - LSE) * O_i`; rows where every LSE_i is -inf give
 * O = 0, LSE = -inf. The backend is chosen by the tensors' device type.
 */
typedef struct fmha_merge_args {
  /** sizeof(fmha_merge_args) as the caller compiled it. */
  size_t struct_size;
  /** Stacked partial outputs `[N, B, M, G, H, D]` or `[N, B, M, H, D]`,
   *  any float dtype, any strides (last dim contiguous). */
  const DLTensor *o_stacked;
  /** Stacked partial LSE `[N, B, G, H, M]` or `[N, B, H, M]`, float32. */
  const DLTensor *lse_stacked;
  /** List form: number of partials. */
  size_t num_partials;
  /** List form: `num_partials` tensors `[B, M, G, H, D]` / `[B, M, H, D]`. */
  const DLTensor *const *o_list;
  /** List form: `num_partials` tensors `[B, G, H, M]` / `[B, H, M]`, fp32. */
  const DLTensor *const *lse_list;
  /** Merged output `[B, M, G, H, D]` / `[B, M, H, D]`: fp16, bf16 or fp32. */
  const DLTensor *o;
  /** Optional merged LSE `[B, G, H, M]` / `[B, H, M]`, float32. */
  const DLTensor *lse;
  /** Stream (GPU backends). */
  void *stream;
} fmha_merge_args;

/** Initialiser for fmha_merge_args. */
#define FMHA_MERGE_ARGS_INIT FMHA_SPLITK_STRUCT_INIT(fmha_merge_args)

/**
 * Inputs of fmha_merge_backward(): with `w_i = exp(LSE_i - LSE)`,
 * `dO_i = w_i * dO` and `dLSE_i = w_i * (dLSE + <O_i - O, dO>)` (dot over
 * the head dim). Rows where LSE = -inf give zero gradients. The partials,
 * their gradients, or both may be stacked or lists (same rules as
 * fmha_merge_args).
 */
typedef struct fmha_merge_backward_args {
  /** sizeof(fmha_merge_backward_args) as the caller compiled it. */
  size_t struct_size;
  /** Stacked partial outputs (or NULL with the list form). */
  const DLTensor *o_stacked;
  /** Stacked partial LSE (or NULL with the list form). */
  const DLTensor *lse_stacked;
  /** List form: number of partials. */
  size_t num_partials;
  /** List form partial outputs. */
  const DLTensor *const *o_list;
  /** List form partial LSE. */
  const DLTensor *const *lse_list;
  /** Merged O from the forward merge. */
  const DLTensor *o;
  /** Merged LSE from the forward merge (float32). */
  const DLTensor *lse;
  /** Gradient of the merged O (shape of O). */
  const DLTensor *grad_o;
  /** Gradient of the merged LSE (float32, shape of LSE); NULL means zero. */
  const DLTensor *grad_lse;
  /** Stacked gradients of the partial outputs (written), or NULL. */
  const DLTensor *grad_o_stacked;
  /** Stacked gradients of the partial LSE (written, float32), or NULL. */
  const DLTensor *grad_lse_stacked;
  /** List form gradients of the partial outputs (written). */
  const DLTensor *const *grad_o_list;
  /** List form gradients of the partial LSE (written). */
  const DLTensor *const *grad_lse_list;
  /** Stream (GPU backends). */
  void *stream;
} fmha_merge_backward_args;

/** Initialiser for fmha_merge_backward_args. */
#define FMHA_MERGE_BACKWARD_ARGS_INIT FMHA_SPLITK_STRUCT_INIT(fmha_merge_backward_args)

/** @} */

/**
 * @defgroup fmha_backends Backends
 * @{
 */

/** One backend candidate, as seen by the registry. */
typedef struct fmha_backend_info {
  /** Set by the caller to sizeof(fmha_backend_info) (the INIT macro). */
  size_t struct_size;
  /** fmha_backend_kind. */
  int32_t backend;
  /** Nonzero when loaded and usable. */
  int32_t available;
  /** Score the plugin gave (0 = cannot serve: no driver, device or arch). */
  int32_t score;
  /** Devices the backend can use. */
  int32_t device_count;
  /** Backend name, NUL-terminated. */
  char name[16];
  /** Shared object path ("" for the built-in CPU backend). */
  char path[512];
  /** Why it was or was not taken, NUL-terminated. */
  char reason[256];
  /** Name of device 0, NUL-terminated ("" if none). */
  char device_name[96];
} fmha_backend_info;

/** Initialiser for fmha_backend_info. */
#define FMHA_BACKEND_INFO_INIT FMHA_SPLITK_STRUCT_INIT(fmha_backend_info)

/**
 * Lists the backend candidates the registry considered (loading plugins on
 * first use).
 *
 * @param infos     array of `capacity` entries; each element's struct_size
 *                  must be set (FMHA_BACKEND_INFO_INIT) and all equal; may be
 *                  NULL when capacity is 0.
 * @param capacity  number of entries in `infos`.
 * @param count     receives the number of candidates (may exceed capacity:
 *                  only the first `capacity` are written).
 * @return SUCCESS; INVALID_ARGUMENT if `count` is NULL, `infos` is NULL with
 *         capacity > 0, or a struct_size is too small.
 * Thread safety: safe from any thread.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_get_backends(fmha_backend_info *infos,
                                                 size_t capacity,
                                                 size_t *count);

/** @} */

/**
 * @defgroup fmha_errors Errors and version
 * @{
 */

/**
 * Static text for a status ("success", "invalid argument", ...); never NULL,
 * "unknown status" for values this build does not know.
 */
FMHA_SPLITK_EXPORT const char *fmha_status_string(fmha_status status);

/**
 * The detailed message of the last failed call on this thread (names the
 * argument and the values); "" if the last call succeeded. Valid until the
 * next call into the library on this thread. Thread-local.
 */
FMHA_SPLITK_EXPORT const char *fmha_last_error_message(void);

/** The library's version as "MAJOR.MINOR.PATCH" (static storage). */
FMHA_SPLITK_EXPORT const char *fmha_version(void);

/** The library's version as major * 10000 + minor * 100 + patch; compare
 *  with FMHA_SPLITK_VERSION_CODE to detect a header/library mismatch. */
FMHA_SPLITK_EXPORT int32_t fmha_version_code(void);

/** @} */

/**
 * @defgroup fmha_plan Plans and runs
 * @{
 */

/**
 * Validates a problem and creates a plan: backend, device, split count,
 * kernel configuration, work partition and workspace size. No kernel is
 * launched and the host is not synchronised; a GPU plan may allocate the
 * plan-owned workspace (used when a run passes workspace = NULL) and zero
 * its merge counters (waiting for that alone, on the calling thread's
 * per-thread stream).
 *
 * @param problem  the problem (borrowed for the call; `kv_seqlen_hint` is
 *                 read during the call only).
 * @param plan     receives the plan; untouched on failure.
 * @return SUCCESS; INVALID_ARGUMENT (a field is out of range, inconsistent,
 *         or a pointer is NULL); NOT_SUPPORTED (valid, but this build or
 *         backend cannot do it: the message says what is needed);
 *         BACKEND_UNAVAILABLE (the requested backend is not loaded or has no
 *         such device); OUT_OF_MEMORY; DEVICE_ERROR.
 * Thread safety: safe from any thread.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_splitk_create_plan(
    const fmha_splitk_problem *problem, fmha_splitk_plan_t *plan);

/**
 * Destroys a plan and its owned workspace. NULL is a no-op. The caller must
 * ensure no run using the plan's owned workspace is still in flight.
 */
FMHA_SPLITK_EXPORT void fmha_splitk_destroy_plan(fmha_splitk_plan_t plan);

/**
 * Workspace bytes a run of this plan needs (0 when split_k is 1, unless a
 * GPU plan is FMHA_FLAG_CHECKED: its report lives in the workspace).
 * @return SUCCESS; INVALID_ARGUMENT if `plan` or `size` is NULL.
 * Thread safety: safe; the plan is read-only after creation.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_splitk_plan_workspace_size(
    fmha_splitk_plan_t plan, size_t *size);

/**
 * Reports what the plan chose.
 * @param plan  the plan (read only).
 * @param info  caller's struct with struct_size set (the INIT macro); only
 *              the bytes inside it are written.
 * @return SUCCESS; INVALID_ARGUMENT if a pointer is NULL or struct_size is
 *         too small.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_splitk_get_plan_info(
    fmha_splitk_plan_t plan, fmha_splitk_plan_info *info);

/**
 * Runs the plan on `args->stream`. Allocates nothing, never synchronises the
 * host, capturable in a CUDA/HIP graph (device-side lengths, offsets and
 * block tables may change between graph replays). Results are identical from
 * run to run. The CPU backend computes synchronously on its thread pool.
 *
 * @return SUCCESS; INVALID_ARGUMENT (a tensor's dtype, shape, strides,
 *         alignment or device does not match the plan; the message names the
 *         tensor and the values); INSUFFICIENT_WORKSPACE; NOT_SUPPORTED;
 *         DEVICE_ERROR (launch failure, with the driver's message).
 * Thread safety: one plan may be run from several threads at once, each with
 * its own workspace. Runs on the plan's own workspace (NULL) from any
 * threads and streams are serialised: on the GPU, each waits on the device
 * for the one before it unless both were queued on the same stream. A run
 * captured into a CUDA/HIP graph takes no part in that order (a capture
 * cannot wait for work outside it): replays of one graph run one after
 * another, but keep them from overlapping other runs on the plan's own
 * workspace (other graphs, eager runs on other streams) yourself, or give
 * the captured run a workspace of its own.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_splitk_run(fmha_splitk_plan_t plan,
                                               const fmha_splitk_args *args);

/**
 * Reports what the device-side checks of FMHA_FLAG_CHECKED runs found.
 *
 * A checked run validates the device-side metadata (lengths against the
 * capacity, page ids against the page count, offsets monotonic and in
 * range) inside its kernels, treats every sequence that fails as empty
 * (nothing of it is read or written: its O and LSE rows keep what they
 * held) and records the first failing sequence (the lowest index) in the
 * workspace. This call synchronises `stream`, reads that record, and
 * clears it, so the next call (or the next run) starts clean. Each run
 * zeroes the record before it checks: call this after every run whose
 * metadata you want reported (a later run on the same workspace overwrites
 * the report).
 *
 * @param plan       the plan the run used.
 * @param workspace  the workspace the run used (NULL: the plan's own).
 * @param stream     the run's stream (cudaStream_t / hipStream_t; NULL: the
 *                   default stream); ignored on CPU.
 * @return SUCCESS when the run saw no violation, when the plan is not
 *         checked, or when its backend validates before computing (the CPU
 *         backend's runs already fail with INVALID_ARGUMENT); else
 *         INVALID_ARGUMENT with a message naming the sequence, the field and
 *         the value, e.g. "kv_seqlen[3] = 5000 exceeds the capacity 4096 (k
 *         has 4096 rows per sequence)"; INVALID_ARGUMENT if `plan` is NULL;
 *         DEVICE_ERROR (synchronisation or copy failure, or a fault of the
 *         run itself).
 * Thread safety: as fmha_splitk_run(); with workspace NULL it waits for the
 * plan's own workspace.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_splitk_check_status(fmha_splitk_plan_t plan,
                                                        void *workspace,
                                                        void *stream);

/**
 * Merges partial attention results (see fmha_merge_args). Allocates nothing;
 * on GPU it is stream ordered and graph capturable.
 * @return SUCCESS; INVALID_ARGUMENT (shapes disagree, bad dtype, both or
 *         neither form given, mixed devices); BACKEND_UNAVAILABLE (the
 *         tensors' device type has no loaded backend); DEVICE_ERROR.
 * Thread safety: safe from any thread.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_merge(const fmha_merge_args *args);

/**
 * Gradients of fmha_merge() (see fmha_merge_backward_args).
 * @return as fmha_merge().
 * Thread safety: safe from any thread.
 */
FMHA_SPLITK_EXPORT fmha_status
fmha_merge_backward(const fmha_merge_backward_args *args);

/** @} */

/**
 * @defgroup fmha_quantize Quantisation helpers
 * Packing of K/V (and fp8 Q) into the quantised formats the kernels read,
 * so that callers do not pack bits by hand. They run on the host over
 * kDLCPU tensors: quantise on the host, then copy to the device.
 * @{
 */

/**
 * Inputs of fmha_quantize_kv(). The format fields mirror those of
 * fmha_splitk_problem, so the result feeds a plan with the same values.
 *
 * - `kv_quant = FMHA_KV_QUANT_INT4`: `dst` is int32 `[..., groups + D/8]`.
 *   Per row and group, the fp16 scale (low 16 bits) and shift (high 16 bits)
 *   come from the group's min/max: shift = min rounded down to fp16,
 *   scale = (max - shift) / 15 rounded up to fp16 (so the 16 levels cover the
 *   group despite fp16 storage; a constant group gets scale 0 and nibbles 0);
 *   each nibble is round((x - shift) / scale), clamped to 0..15. `scale`
 *   must be NULL.
 * - `kv_quant = FMHA_KV_QUANT_FP8`: `dst` holds the fp8 codes `[..., D]`
 *   (DLPack uint8, or the fp8 code 10 / 11 matching `fp8_format`, or int32
 *   `[..., D/4]` words of four: dim 4w + j is byte j of word w), and `scale`
 *   receives the scales, shaped by `scale_granularity`: per row, the shape of
 *   `src` without D; per head, the last one or two dims of `src` before D
 *   (`[G, Hkv]` or `[Hkv]`; the rank of `scale` says which); per tensor,
 *   `[1]` or 0-d. scale = amax / fp8_max over the values it covers
 *   (fp8_max = 448 for E4M3FN, 240 for E4M3FNUZ; amax 0 gives scale 1;
 *   infinities and NaN are left out of amax), stored as float32
 *   (`FMHA_KV_SCALE_F32`) or as int32 with the fp16 scale rounded up in the
 *   low 16 bits and a zero shift in the high 16
 *   (`FMHA_KV_SCALE_F16X2_SCALE_SHIFT`). Each code is x / scale rounded to
 *   nearest even, saturated to +-fp8_max (infinities too); NaN becomes the
 *   format's NaN.
 *
 * fp8 Q with per-row, per-head or per-tensor q scales is the same operation:
 * pass Q as `src` with `kv_scale_kind = FMHA_KV_SCALE_F32` (q scales are
 * float32) and `scale_granularity` equal to the problem's
 * q_scale_granularity.
 */
typedef struct fmha_quantize_kv_args {
  /** sizeof(fmha_quantize_kv_args) as the caller compiled it. */
  size_t struct_size;
  /** Values to quantise `[..., D]` (1 to 6 dims), float16, bfloat16 or
   *  float32, on the CPU, any non-negative strides with the last dim
   *  contiguous. Read only. */
  const DLTensor *src;
  /** Packed output (see above): same leading shape as `src`, on the same
   *  CPU device, any strides with the last dim contiguous; written. */
  const DLTensor *dst;
  /** fp8 only: the scales (see above), on the same CPU device, any strides;
   *  written. NULL for int4. */
  const DLTensor *scale;
  /** fmha_kv_quant: INT4 or FP8 (NONE is an error: nothing to pack). */
  int32_t kv_quant;
  /** int4: groups along the head dim, 0 or 1 (row-wise), 2, 4 or 8; D must
   *  be a multiple of 8 * groups. Ignored for fp8. */
  int32_t kv_quant_groups;
  /** fp8: fmha_fp8_format of the codes. */
  int32_t fp8_format;
  /** fp8: fmha_kv_scale_kind of `scale`. */
  int32_t kv_scale_kind;
  /** fp8: fmha_scale_granularity of `scale`. */
  int32_t scale_granularity;
  /** Must be zero. */
  int32_t reserved0;
} fmha_quantize_kv_args;

/** Initialiser for fmha_quantize_kv_args. */
#define FMHA_QUANTIZE_KV_ARGS_INIT FMHA_SPLITK_STRUCT_INIT(fmha_quantize_kv_args)

/**
 * Quantises `args->src` into `args->dst` (and `args->scale`) in the int4 or
 * fp8 format of fmha_quantize_kv_args. Synchronous, on the calling thread;
 * allocates only host scratch. The tensors are borrowed for
 * the call; `dst` and `scale` must not overlap `src` or each other.
 *
 * @param args  the tensors and the format; read only inside its struct_size.
 * @return SUCCESS; INVALID_ARGUMENT (NULL pointer, bad struct_size or
 *         reserved field, enum out of range, dtype, rank, shapes of src /
 *         dst / scale that disagree, D not a multiple of 8 * groups, a last
 *         dim that is not contiguous, negative strides, mixed devices, or
 *         int4 input with NaN, infinity or a range beyond fp16; the message
 *         names the argument and the values; dst and scale are then left
 *         unwritten); NOT_SUPPORTED (a tensor is not on kDLCPU: quantise on
 *         the host, then copy); OUT_OF_MEMORY.
 * Thread safety: safe from any thread; calls writing different tensors may
 * run at once.
 */
FMHA_SPLITK_EXPORT fmha_status
fmha_quantize_kv(const fmha_quantize_kv_args *args);

/** @} */

/**
 * @defgroup fmha_tuning Autotuning and the tuning cache
 * A plan's heuristic picks one kernel configuration (the work partition:
 * how many ranges the batch's keys are cut into, and the shortest piece).
 * fmha_splitk_autotune() times the plan's other valid configurations on the
 * caller's data and keeps the fastest whose output agrees with the
 * heuristic's; the winner also goes into a process-wide tuning cache, keyed
 * by device, problem class and library version, from which later plans of
 * the same class take it at creation with no timing. The cache can be saved
 * to and loaded from a byte buffer or a file, so that a server tunes once
 * and never pays for it again.
 *
 * Plans with a forced `split_k` or FMHA_FLAG_BATCH_INVARIANT have a single
 * configuration: the caller fixed their partition, and batch invariance
 * must not depend on what another plan tuned.
 * @{
 */

/** Where a plan's configuration came from (fmha_splitk_plan_info). */
typedef enum fmha_config_source {
  /** The plan's heuristic. */
  FMHA_CONFIG_HEURISTIC = 0,
  /** A winner found in the tuning cache when the plan was created. */
  FMHA_CONFIG_TUNING_CACHE = 1,
  /** fmha_splitk_autotune() on this plan. */
  FMHA_CONFIG_AUTOTUNE = 2
} fmha_config_source;

/** What the last fmha_splitk_autotune() of the plan did with a candidate. */
typedef enum fmha_tune_state {
  /** Not timed (no autotune of this plan yet). */
  FMHA_TUNE_UNTIMED = 0,
  /** Timed; its output agreed with the heuristic's within the bound. */
  FMHA_TUNE_ACCEPTED = 1,
  /** Its output differed from the heuristic's beyond the bound (see
   *  fmha_splitk_config::error_ratio): never chosen. */
  FMHA_TUNE_REJECTED = 2,
  /** Not timed: the time budget (max_total_ms) ran out first. */
  FMHA_TUNE_SKIPPED = 3,
  /** Its run failed (the message of the failure is not kept). */
  FMHA_TUNE_FAILED = 4
} fmha_tune_state;

/** Bits of fmha_splitk_autotune_options::flags. */
typedef enum fmha_autotune_flags {
  /** Keep the winner in the plan only, not in the tuning cache. */
  FMHA_AUTOTUNE_NO_CACHE_STORE = 1u << 0,
  /** GPU: do not evict the L2 cache before each timed run (by default it is
   *  overwritten, so that a problem smaller than the L2 is timed reading
   *  from memory, as in a serving step). */
  FMHA_AUTOTUNE_KEEP_L2 = 1u << 1
} fmha_autotune_flags;

/** One configuration a plan can run (fmha_splitk_get_plan_config()). */
typedef struct fmha_splitk_config {
  /** Set by the caller to sizeof(fmha_splitk_config) (the INIT macro). */
  size_t struct_size;
  /** Its index among the plan's candidates (0 .. count - 1). */
  int32_t index;
  /** Nonzero for the configuration the heuristic chose. */
  int32_t heuristic;
  /** Nonzero for the configuration the plan runs now. */
  int32_t selected;
  /** Work items per worker the partition aims at: the batch's keys are cut
   *  into about `waves * workers / (groups * heads_kv)` equal ranges; 0 is
   *  one range (no sequence split by the partition); -1 when the schedule
   *  is fixed by the problem (forced split_k, batch invariant). */
  int32_t waves;
  /** Ranges the batch's keys are cut into (0 when fixed by the problem). */
  int32_t num_ranges;
  /** Shortest piece of a split sequence, in keys (the chunk size when the
   *  schedule is fixed by the problem). */
  int32_t min_chunk_keys;
  /** Most chunks a sequence gets for the expected lengths. */
  int32_t split_k;
  /** fmha_tune_state after the last autotune. */
  int32_t tune_state;
  /** Median time of one run in the last autotune, microseconds; -1 if not
   *  timed. */
  double time_us;
  /** Relative difference of its output from the heuristic's, divided by the
   *  bound of the problem's dtypes (> 1 is rejected); -1 if not timed. */
  double error_ratio;
  /** Workspace bytes a run of this configuration needs. */
  size_t workspace_size;
  /** Kernel and schedule, NUL-terminated, for logs. */
  char name[96];
} fmha_splitk_config;

/** Initialiser for fmha_splitk_config. */
#define FMHA_SPLITK_CONFIG_INIT FMHA_SPLITK_STRUCT_INIT(fmha_splitk_config)

/** Options of fmha_splitk_autotune(); NULL means every default. */
typedef struct fmha_splitk_autotune_options {
  /** sizeof(fmha_splitk_autotune_options) as the caller compiled it. */
  size_t struct_size;
  /** Untimed runs before each candidate's timed ones (0: 3). */
  int32_t warmup_runs;
  /** Timed runs per candidate, of which the median counts (0: 20). */
  int32_t timed_runs;
  /** Bound on the whole autotune, milliseconds (0: 2000): candidates not
   *  reached in time are skipped (FMHA_TUNE_SKIPPED). The heuristic's
   *  configuration is always timed. */
  double max_total_ms;
  /** Bitwise OR of fmha_autotune_flags. */
  uint32_t flags;
  /** Reserved; must be zero. */
  uint32_t reserved0;
} fmha_splitk_autotune_options;

/** Initialiser for fmha_splitk_autotune_options. */
#define FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT FMHA_SPLITK_STRUCT_INIT(fmha_splitk_autotune_options)

/**
 * Number of configurations the plan can run (>= 1; 1 for plans whose
 * schedule the problem fixes).
 * @param plan   the plan (its candidates are planned on the first query).
 * @param count  receives the number of candidates.
 * @return SUCCESS; INVALID_ARGUMENT if `plan` or `count` is NULL.
 * Thread safety: safe; not concurrently with fmha_splitk_autotune() of the
 * same plan.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_splitk_plan_config_count(fmha_splitk_plan_t plan,
                                                             int32_t *count);

/**
 * Describes candidate `index` of the plan, with what the last autotune
 * measured for it.
 * @param plan    the plan.
 * @param index   0 (the heuristic's choice) to count - 1.
 * @param config  caller's struct with struct_size set (the INIT macro); only
 *                the bytes inside it are written.
 * @return SUCCESS; INVALID_ARGUMENT if a pointer is NULL, struct_size is too
 *         small or `index` is outside 0 .. count - 1.
 * Thread safety: as fmha_splitk_plan_config_count().
 */
FMHA_SPLITK_EXPORT fmha_status fmha_splitk_get_plan_config(fmha_splitk_plan_t plan,
                                                           int32_t index,
                                                           fmha_splitk_config *config);

/**
 * Times the plan's candidate configurations on `args` (the caller's data
 * and stream), rejects every candidate whose output differs from the
 * heuristic's beyond the bound of the problem's dtypes (relative norm error
 * of O above twice the documented forward bound plus the output rounding,
 * a NaN where the heuristic has none or the reverse, or LSE off by more
 * than 2e-3), and fixes the fastest remaining one in the plan. Unless
 * FMHA_AUTOTUNE_NO_CACHE_STORE is set, the winner is recorded in the tuning
 * cache for its problem class.
 *
 * The runs write O and LSE of `args` (they end holding the winner's
 * result); `args->workspace` is not used (autotune allocates its own, and
 * frees it). Synchronises the host with the stream; not capturable in a
 * CUDA/HIP graph. GPU runs are timed with events, each after the L2 cache
 * was overwritten (see FMHA_AUTOTUNE_KEEP_L2).
 *
 * The winner may need more workspace than the heuristic's choice: query
 * fmha_splitk_plan_workspace_size() again afterwards (a run with the old,
 * smaller size fails with INSUFFICIENT_WORKSPACE; the plan's own workspace
 * is grown).
 *
 * @param plan     the plan to tune (changed: it runs the winner afterwards).
 * @param args     the tensors and stream of a valid run of the plan.
 * @param options  NULL for the defaults.
 * @return SUCCESS; INVALID_ARGUMENT (as fmha_splitk_run(), or bad options);
 *         NOT_SUPPORTED (the plan's backend cannot time runs);
 *         OUT_OF_MEMORY; DEVICE_ERROR; any status of the heuristic's own
 *         run (the plan is then left as it was).
 * Thread safety: no other call may use the same plan meanwhile; other
 * plans, including ones of the same class tuned on other threads, may run
 * and tune at once.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_splitk_autotune(fmha_splitk_plan_t plan,
                                                    const fmha_splitk_args *args,
                                                    const fmha_splitk_autotune_options *options);

/**
 * Writes the tuning cache into `buffer`: a versioned, checksummed byte
 * string that fmha_tuning_cache_load() accepts in a process with the same
 * library version and devices.
 * @param buffer    destination, or NULL with capacity 0 to ask for the size.
 * @param capacity  bytes available at `buffer`.
 * @param size      receives the bytes the cache needs (always written).
 * @return SUCCESS; INVALID_ARGUMENT if `size` is NULL, `buffer` is NULL
 *         with capacity > 0, or capacity is smaller than the size (nothing
 *         is written then).
 * Thread safety: safe from any thread.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_tuning_cache_save(void *buffer, size_t capacity,
                                                      size_t *size);

/**
 * Adds the entries of a saved tuning cache to the process's cache
 * (replacing entries of the same class and device). All or nothing: on any
 * failure the cache is left as it was.
 * @param buffer  bytes written by fmha_tuning_cache_save() (NULL when size
 *                is 0, which is a truncated cache).
 * @param size    their number.
 * @return SUCCESS; INVALID_ARGUMENT (NULL buffer with size > 0, a truncated
 *         or corrupt buffer: bad magic, format, length or checksum);
 *         NOT_SUPPORTED (made by another library version, or for a device
 *         this process does not have: the message names it).
 * Thread safety: safe from any thread.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_tuning_cache_load(const void *buffer, size_t size);

/**
 * fmha_tuning_cache_save() into the file at `path` (created or replaced).
 * @param path  the file's path, NUL-terminated.
 * @return as fmha_tuning_cache_save(); INVALID_ARGUMENT also for a NULL
 *         path or a file that cannot be written (with the system's reason).
 */
FMHA_SPLITK_EXPORT fmha_status fmha_tuning_cache_save_file(const char *path);

/**
 * fmha_tuning_cache_load() from the file at `path`.
 * @param path  the file's path, NUL-terminated.
 * @return as fmha_tuning_cache_load(); INVALID_ARGUMENT also for a NULL
 *         path or a file that cannot be read (with the system's reason).
 */
FMHA_SPLITK_EXPORT fmha_status fmha_tuning_cache_load_file(const char *path);

/**
 * Number of entries in the tuning cache.
 * @param entries  receives the count.
 * @return SUCCESS; INVALID_ARGUMENT if `entries` is NULL.
 */
FMHA_SPLITK_EXPORT fmha_status fmha_tuning_cache_entries(size_t *entries);

/** Empties the tuning cache (plans already created keep their
 *  configuration). */
FMHA_SPLITK_EXPORT void fmha_tuning_cache_clear(void);

/** @} */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FMHA_SPLITK_FMHA_SPLITK_H_ */
