#include "core/problem.h"

#include <cmath>
#include <limits>

#include "core/checked_int.h"
#include "core/error.h"
#include "core/names.h"

namespace fmha::core {

namespace {

constexpr uint32_t kKnownFlags = FMHA_FLAG_BATCH_INVARIANT | FMHA_FLAG_WRITE_PARTIALS | FMHA_FLAG_V_FROM_K |
                                 FMHA_FLAG_FP8_QK | FMHA_FLAG_FP8_PV | FMHA_FLAG_CHECKED |
                                 FMHA_FLAG_EXTERNAL_WORKSPACE;
constexpr int32_t kMaxSplitK = 4096;
constexpr int32_t kDefaultKvChunkSize = 256;
constexpr int32_t kMaxPageSize = 256;
// Lengths, offsets and page ids reach the device as int32 metadata.
constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

void check_enum(int32_t value, int32_t last, const char *field, const char *type) {
  if (value < 0 || value > last) invalid(cat("problem.", field, " = ", value, " is not a ", type, " (0..", last, ")"));
}

void check_length(int64_t value, const char *field) {
  if (value < 0 || value > kMaxInt32)
    invalid(cat("problem.", field, " = ", value, " is outside [0, ", kMaxInt32, "] (lengths are int32 on the device)"));
}

bool valid_head_dim_qk(int32_t head_dim) {
  return (head_dim >= 16 && head_dim <= 256 && head_dim % 8 == 0) || head_dim == 512 || head_dim == 576;
}

bool is_power_of_two(int64_t value) { return value > 0 && (value & (value - 1)) == 0; }

bool has_flag(const fmha_splitk_problem &problem, uint32_t flag) { return (problem.flags & flag) != 0; }

// Byte size of a tensor described by `extents` (as "[B=2, Mq=1, ...]" in
// the message) must fit int64.
void check_bytes(const char *tensor, std::initializer_list<int64_t> extents, const char *extent_names,
                 int64_t element_bytes) {
  int64_t bytes = element_bytes;
  for (int64_t extent : extents)
    if (__builtin_mul_overflow(bytes, extent, &bytes))
      invalid(cat("the byte size of ", tensor, " (", extent_names, " x ", element_bytes,
                  " bytes) overflows int64; reduce the problem's sizes"));
}

void resolve_shape(fmha_splitk_problem &p) {
  check_length(p.batch, "batch");
  check_length(p.max_q_seqlen, "max_q_seqlen");
  check_length(p.max_kv_seqlen, "max_kv_seqlen");
  if (p.groups < 0) invalid(cat("problem.groups = ", p.groups, " is negative (0 means 1)"));
  if (p.groups == 0) p.groups = 1;
  if (p.heads_q < 1) invalid(cat("problem.heads_q = ", p.heads_q, " must be >= 1"));
  if (p.heads_kv < 1) invalid(cat("problem.heads_kv = ", p.heads_kv, " must be >= 1"));
  if (p.heads_q % p.heads_kv != 0)
    invalid(cat("problem.heads_kv = ", p.heads_kv, " does not divide problem.heads_q = ", p.heads_q));

  if (!valid_head_dim_qk(p.head_dim_qk))
    invalid(cat("problem.head_dim_qk = ", p.head_dim_qk, " is not a multiple of 8 in [16, 256], 512 or 576"));
  if (p.head_dim_v == 0) p.head_dim_v = p.head_dim_qk;
  if (has_flag(p, FMHA_FLAG_V_FROM_K)) {
    if (p.head_dim_v < 8 || p.head_dim_v > p.head_dim_qk || p.head_dim_v % 8 != 0)
      invalid(cat("problem.head_dim_v = ", p.head_dim_v, " must be a multiple of 8 in [8, problem.head_dim_qk = ",
                  p.head_dim_qk, "] with FMHA_FLAG_V_FROM_K"));
  } else if (p.head_dim_v != p.head_dim_qk) {
    invalid(cat("problem.head_dim_v = ", p.head_dim_v, " differs from problem.head_dim_qk = ", p.head_dim_qk,
                " (different head dims need FMHA_FLAG_V_FROM_K)"));
  }
}

void resolve_dtypes(fmha_splitk_problem &p) {
  check_enum(p.q_dtype, FMHA_DTYPE_FP8, "q_dtype", "fmha_dtype");
  check_enum(p.kv_dtype, FMHA_DTYPE_FP8, "kv_dtype", "fmha_dtype");
  check_enum(p.o_dtype, FMHA_DTYPE_FP8, "o_dtype", "fmha_dtype");

  const bool fp8_qk = has_flag(p, FMHA_FLAG_FP8_QK);
  if (p.q_dtype == FMHA_DTYPE_FP8) {
    if (!fp8_qk) invalid("problem.q_dtype = FMHA_DTYPE_FP8 needs FMHA_FLAG_FP8_QK in problem.flags");
  } else if (p.q_dtype != FMHA_DTYPE_F16 && p.q_dtype != FMHA_DTYPE_BF16) {
    invalid(cat("problem.q_dtype = ", p.q_dtype, " (", dtype_name(p.q_dtype),
                ") must be FMHA_DTYPE_F16, FMHA_DTYPE_BF16, or FMHA_DTYPE_FP8 with FMHA_FLAG_FP8_QK"));
  } else if (fp8_qk) {
    invalid(cat("FMHA_FLAG_FP8_QK needs problem.q_dtype = FMHA_DTYPE_FP8, not ", dtype_name(p.q_dtype)));
  }
  const int32_t natural = p.q_dtype == FMHA_DTYPE_FP8 ? FMHA_DTYPE_BF16 : p.q_dtype;

  if (p.kv_dtype == FMHA_DTYPE_DEFAULT) p.kv_dtype = natural;
  if (p.kv_dtype != FMHA_DTYPE_F16 && p.kv_dtype != FMHA_DTYPE_BF16)
    invalid(cat("problem.kv_dtype = ", p.kv_dtype, " (", dtype_name(p.kv_dtype),
                ") must be FMHA_DTYPE_F16 or FMHA_DTYPE_BF16 (quantised K/V is described by problem.kv_quant)"));

  if (p.o_dtype == FMHA_DTYPE_DEFAULT) p.o_dtype = natural;
  if (p.o_dtype == FMHA_DTYPE_FP8)
    invalid(
        "problem.o_dtype = FMHA_DTYPE_FP8 is not an output type (FMHA_DTYPE_F16, FMHA_DTYPE_BF16 or FMHA_DTYPE_F32)");
}

void resolve_quantisation(fmha_splitk_problem &p) {
  check_enum(p.kv_quant, FMHA_KV_QUANT_FP8, "kv_quant", "fmha_kv_quant");
  check_enum(p.fp8_format, FMHA_FP8_E4M3FNUZ, "fp8_format", "fmha_fp8_format");
  check_enum(p.kv_scale_kind, FMHA_KV_SCALE_F32, "kv_scale_kind", "fmha_kv_scale_kind");
  check_enum(p.kv_scale_granularity, FMHA_SCALE_PER_TENSOR, "kv_scale_granularity", "fmha_scale_granularity");
  check_enum(p.q_scale_granularity, FMHA_SCALE_PER_TENSOR, "q_scale_granularity", "fmha_scale_granularity");

  if (p.kv_quant == FMHA_KV_QUANT_INT4) {
    const int32_t groups = p.kv_quant_groups == 0 ? 1 : p.kv_quant_groups;
    if (groups != 1 && groups != 2 && groups != 4 && groups != 8)
      invalid(cat("problem.kv_quant_groups = ", p.kv_quant_groups, " must be 0, 1, 2, 4 or 8"));
    if ((p.head_dim_qk / 8) % groups != 0 || (p.head_dim_v / 8) % groups != 0)
      invalid(cat("problem.kv_quant_groups = ", groups, " does not divide the int4 words of a row (head_dim_qk / 8 = ",
                  p.head_dim_qk / 8, ", head_dim_v / 8 = ", p.head_dim_v / 8, ")"));
    p.kv_quant_groups = groups;
  } else {
    p.kv_quant_groups = 1;
  }

  for (uint32_t flag : {static_cast<uint32_t>(FMHA_FLAG_FP8_QK), static_cast<uint32_t>(FMHA_FLAG_FP8_PV)})
    if (has_flag(p, flag) && p.kv_quant != FMHA_KV_QUANT_FP8)
      invalid(cat(flag == FMHA_FLAG_FP8_QK ? "FMHA_FLAG_FP8_QK" : "FMHA_FLAG_FP8_PV",
                  " needs fp8 K/V (problem.kv_quant = FMHA_KV_QUANT_FP8), not ", kv_quant_name(p.kv_quant)));
  if (p.kv_quant != FMHA_KV_QUANT_FP8) {
    p.fp8_format = 0;
    p.kv_scale_kind = 0;
    p.kv_scale_granularity = 0;
  }
  if (!has_flag(p, FMHA_FLAG_FP8_QK)) p.q_scale_granularity = 0;
}

void resolve_layouts(fmha_splitk_problem &p) {
  check_enum(p.q_layout, FMHA_Q_VARLEN, "q_layout", "fmha_q_layout");
  check_enum(p.kv_layout, FMHA_KV_RAGGED, "kv_layout", "fmha_kv_layout");
  const bool paged = p.kv_layout == FMHA_KV_PAGED;
  if (!paged && p.kv_layout != FMHA_KV_RAGGED) {
    p.page_size = 0;
    p.num_pages = 0;
    p.max_pages_per_seq = 0;
    return;
  }
  if (!is_power_of_two(p.page_size) || p.page_size > kMaxPageSize)
    invalid(cat("problem.page_size = ", p.page_size, " must be a power of two in [1, ", kMaxPageSize, "] for ",
                kv_layout_name(p.kv_layout)));
  if (p.num_pages < 1)
    invalid(cat("problem.num_pages = ", p.num_pages, " must be >= 1 for ", kv_layout_name(p.kv_layout)));
  if (!paged) {
    p.max_pages_per_seq = 0;
    return;
  }
  const int64_t pages_needed = (p.max_kv_seqlen + p.page_size - 1) / p.page_size;
  if (p.max_pages_per_seq < pages_needed)
    invalid(cat("problem.max_pages_per_seq = ", p.max_pages_per_seq, " is less than the ", pages_needed,
                " pages that problem.max_kv_seqlen = ", p.max_kv_seqlen,
                " needs at problem.page_size = ", p.page_size));
}

void resolve_mask(fmha_splitk_problem &p) {
  check_enum(p.mask, FMHA_MASK_CAUSAL_LOCAL, "mask", "fmha_mask_kind");
  const bool local = p.mask == FMHA_MASK_LOCAL || p.mask == FMHA_MASK_CAUSAL_LOCAL;
  if (!local) {
    p.window_left = 0;
    p.window_right = 0;
  } else {
    if (p.window_left < 0) invalid(cat("problem.window_left = ", p.window_left, " must be >= 0 for a local mask"));
    if (p.mask == FMHA_MASK_CAUSAL_LOCAL) p.window_right = 0;
    if (p.window_right < 0)
      invalid(cat("problem.window_right = ", p.window_right, " must be >= 0 for FMHA_MASK_LOCAL"));
  }
  p.has_bias = p.has_bias != 0;
  p.has_sinks = p.has_sinks != 0;

  if (!std::isfinite(p.softmax_scale)) invalid(cat("problem.softmax_scale = ", p.softmax_scale, " is not finite"));
  if (p.softmax_scale == 0.0f) p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim_qk));
  if (!std::isfinite(p.softcap) || p.softcap < 0.0f)
    invalid(cat("problem.softcap = ", p.softcap, " must be finite and >= 0 (0 disables soft-capping)"));
}

void resolve_splits(fmha_splitk_problem &p) {
  if (p.split_k < 0 || p.split_k > kMaxSplitK)
    invalid(cat("problem.split_k = ", p.split_k, " is outside [0, ", kMaxSplitK, "] (0 lets the plan choose)"));
  if (p.kv_chunk_size < 0) invalid(cat("problem.kv_chunk_size = ", p.kv_chunk_size, " is negative (0 means 256)"));
  const bool batch_invariant = has_flag(p, FMHA_FLAG_BATCH_INVARIANT);
  if (!batch_invariant)
    p.kv_chunk_size = 0;
  else if (p.kv_chunk_size == 0)
    p.kv_chunk_size = kDefaultKvChunkSize;
  if (has_flag(p, FMHA_FLAG_WRITE_PARTIALS)) {
    if (p.split_k < 1) invalid(cat("FMHA_FLAG_WRITE_PARTIALS needs a forced problem.split_k >= 1, got ", p.split_k));
    if (batch_invariant) invalid("FMHA_FLAG_WRITE_PARTIALS and FMHA_FLAG_BATCH_INVARIANT are exclusive");
  }
}

void check_sizes(const fmha_splitk_problem &p) {
  const int64_t kv_rows = p.kv_layout == FMHA_KV_PAGED || p.kv_layout == FMHA_KV_RAGGED
                              ? checked_product({p.num_pages, p.page_size}, "problem.num_pages * problem.page_size")
                              : checked_product({p.batch, p.max_kv_seqlen}, "problem.batch * problem.max_kv_seqlen");
  // Upper bounds of element sizes: 2 bytes for Q/K/V, 4 for O and fp32 data.
  check_bytes("Q", {p.batch, p.max_q_seqlen, p.groups, p.heads_q, p.head_dim_qk}, "B * Mq * G * Hq * Dqk", 2);
  check_bytes("O", {p.batch, p.max_q_seqlen, p.groups, p.heads_q, p.head_dim_v}, "B * Mq * G * Hq * Dv", 4);
  check_bytes("K", {kv_rows, p.groups, p.heads_kv, p.head_dim_qk}, "rows * G * Hkv * Dqk", 2);
  if (p.has_bias)
    check_bytes("the bias", {p.batch, p.groups, p.heads_q, p.max_q_seqlen, p.max_kv_seqlen}, "B * G * Hq * Mq * Mkv",
                4);
  check_bytes("the block table", {p.batch, p.max_pages_per_seq}, "B * max_pages_per_seq", 4);
  if (p.split_k > 0)
    check_bytes("the split partials", {p.split_k, p.batch, p.max_q_seqlen, p.groups, p.heads_q, p.head_dim_v},
                "split_k * B * Mq * G * Hq * Dv", 4);
}

}  // namespace

fmha_splitk_problem resolve_problem(const fmha_splitk_problem &problem) {
  fmha_splitk_problem p = problem;
  p.struct_size = sizeof(fmha_splitk_problem);
  check_enum(p.backend, FMHA_BACKEND_HIP, "backend", "fmha_backend_kind");
  if (p.device_id < 0) invalid(cat("problem.device_id = ", p.device_id, " is negative"));
  if ((p.flags & ~kKnownFlags) != 0)
    invalid(cat("problem.flags = 0x", std::hex, p.flags, " has unknown bits 0x", (p.flags & ~kKnownFlags)));
  if (p.reserved0 != 0) invalid(cat("problem.reserved0 = ", p.reserved0, " must be zero"));

  resolve_shape(p);
  resolve_dtypes(p);
  resolve_quantisation(p);
  resolve_layouts(p);
  resolve_mask(p);
  resolve_splits(p);
  check_sizes(p);
  p.kv_seqlen_hint = nullptr;
  return p;
}

std::vector<int32_t> copy_kv_seqlen_hint(const int32_t *kv_seqlen_hint, const fmha_splitk_problem &problem) {
  if (kv_seqlen_hint == nullptr) return {};
  std::vector<int32_t> hint(kv_seqlen_hint, kv_seqlen_hint + problem.batch);
  for (size_t index = 0; index < hint.size(); ++index)
    if (hint[index] < 0 || hint[index] > problem.max_kv_seqlen)
      invalid(cat("problem.kv_seqlen_hint[", index, "] = ", hint[index],
                  " is outside [0, problem.max_kv_seqlen = ", problem.max_kv_seqlen, "]"));
  return hint;
}

}  // namespace fmha::core
