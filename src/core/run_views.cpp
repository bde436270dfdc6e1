#include "core/run_views.h"

#include <string>

#include "core/error.h"
#include "core/names.h"
#include "core/tensor_view.h"

namespace fmha::core {

namespace {

enum class Use { required, optional, unused };

// The accepted element types of a tensor and their text (see TensorRule).
struct Elems {
  uint32_t bits;
  const char *text;
  bool fp8_words;
  // The problem's field that fixed them, named in messages when set.
  const char *field = nullptr;
  int32_t dtype = 0;
};

Elems dtype_elems(int32_t dtype, const char *field) {
  switch (dtype) {
    case FMHA_DTYPE_F16:
      return {elem_bit(FMHA_ELEM_F16), "float16", false, field, dtype};
    case FMHA_DTYPE_BF16:
      return {elem_bit(FMHA_ELEM_BF16), "bfloat16", false, field, dtype};
    case FMHA_DTYPE_F32:
      return {elem_bit(FMHA_ELEM_F32), "float32", false, field, dtype};
    default:
      return {elem_bit(FMHA_ELEM_FP8), "fp8 (uint8, a DLPack fp8 code or int32 words)", true, field, dtype};
  }
}

Elems fixed_elems(fmha_elem_type elem) { return {elem_bit(elem), elem_name(elem), false}; }

// Why a run needs a tensor or leaves it out, for messages: `text` then
// `detail` ("problem.kv_quant = " "FMHA_KV_QUANT_NONE"), joined only when a
// message needs it.
struct Reason {
  Reason(const char *reason_text) : text(reason_text) {}  // implicit: a literal is a reason
  Reason(const char *reason_text, const char *reason_detail) : text(reason_text), detail(reason_detail) {}
  const char *text;
  const char *detail = "";
};

class RunChecker {
 public:
  explicit RunChecker(const fmha_plan_data &plan)
      : p_(plan.problem),
        placement_{plan.device.dl_device_type, plan.device.device_id, plan.device.row_alignment},
        paged_(p_.kv_layout == FMHA_KV_PAGED || p_.kv_layout == FMHA_KV_RAGGED),
        varlen_(p_.q_layout == FMHA_Q_VARLEN),
        split_k_(plan.split_k) {}

  fmha_run_views check(const fmha_splitk_args &args) {
    fmha_run_views views{};
    const bool partials = (p_.flags & FMHA_FLAG_WRITE_PARTIALS) != 0;
    const bool v_from_k = (p_.flags & FMHA_FLAG_V_FROM_K) != 0;
    const bool fp8_kv = p_.kv_quant == FMHA_KV_QUANT_FP8;
    const char *kv_layout = kv_layout_name(p_.kv_layout);
    const char *q_layout = q_layout_name(p_.q_layout);

    views.q = take(args.q, "args.q", Use::required, "every run", [&] { return q_rule(); });
    // The packed totals of VARLEN Q and GAPPY K fix the other tensors' shapes.
    total_q_ = views.q.shape[1];
    views.k = take(args.k, "args.k", Use::required, "every run", [&] { return kv_rule(true); });
    total_kv_ = views.k.shape[1];
    views.v =
        take(args.v, "args.v", v_from_k ? Use::unused : Use::required,
             v_from_k ? "FMHA_FLAG_V_FROM_K" : "a run without FMHA_FLAG_V_FROM_K", [&] { return kv_rule(false); });
    views.o = take(
        args.o, "args.o", partials ? Use::unused : Use::required,
        partials ? "FMHA_FLAG_WRITE_PARTIALS (it writes args.o_partial)" : "a run without FMHA_FLAG_WRITE_PARTIALS",
        [&] { return o_rule(); });
    views.lse = take(args.lse, "args.lse", partials ? Use::unused : Use::optional,
                     "FMHA_FLAG_WRITE_PARTIALS (it writes args.lse_partial)", [&] { return lse_rule(); });
    views.bias = take(args.bias, "args.bias", p_.has_bias ? Use::required : Use::unused,
                      p_.has_bias ? "problem.has_bias" : "a problem with has_bias = 0", [&] { return bias_rule(); });
    views.sinks =
        take(args.sinks, "args.sinks", p_.has_sinks ? Use::required : Use::unused,
             p_.has_sinks ? "problem.has_sinks" : "a problem with has_sinks = 0", [&] { return sinks_rule(); });

    const bool lengths =
        p_.kv_layout == FMHA_KV_PADDED || p_.kv_layout == FMHA_KV_GAPPY || p_.kv_layout == FMHA_KV_PAGED;
    views.kv_seqlen = take(args.kv_seqlen, "args.kv_seqlen", lengths ? Use::required : Use::unused, kv_layout,
                           [&] { return metadata_rule("args.kv_seqlen", "B", p_.batch); });
    const Use seqstart = p_.kv_layout == FMHA_KV_GAPPY   ? Use::required
                         : p_.kv_layout == FMHA_KV_PAGED ? Use::optional
                                                         : Use::unused;
    views.kv_seqstart = take(args.kv_seqstart, "args.kv_seqstart", seqstart, kv_layout,
                             [&] { return metadata_rule("args.kv_seqstart", "B", p_.batch); });
    views.q_seqstart = take(args.q_seqstart, "args.q_seqstart", varlen_ ? Use::required : Use::unused, q_layout,
                            [&] { return metadata_rule("args.q_seqstart", "B+1", p_.batch + 1); });
    views.block_table =
        take(args.block_table, "args.block_table", p_.kv_layout == FMHA_KV_PAGED ? Use::required : Use::unused,
             kv_layout, [&] { return block_table_rule(); });
    const bool ragged = p_.kv_layout == FMHA_KV_RAGGED;
    views.kv_indptr = take(args.kv_indptr, "args.kv_indptr", ragged ? Use::required : Use::unused, kv_layout,
                           [&] { return metadata_rule("args.kv_indptr", "B+1", p_.batch + 1); });
    views.kv_indices = take(args.kv_indices, "args.kv_indices", ragged ? Use::required : Use::unused, kv_layout,
                            [&] { return metadata_rule("args.kv_indices", "nnz", kAnyExtent); });
    views.kv_last_page_len = take(args.kv_last_page_len, "args.kv_last_page_len", ragged ? Use::optional : Use::unused,
                                  kv_layout, [&] { return metadata_rule("args.kv_last_page_len", "B", p_.batch); });

    const Reason unquantised("problem.kv_quant = ", kv_quant_name(p_.kv_quant));
    views.k_scale = take(args.k_scale, "args.k_scale", fp8_kv ? Use::required : Use::unused,
                         fp8_kv ? "fp8 K/V (problem.kv_quant = FMHA_KV_QUANT_FP8)" : unquantised,
                         [&] { return kv_scale_rule("args.k_scale"); });
    views.v_scale = take(args.v_scale, "args.v_scale", fp8_kv && !v_from_k ? Use::required : Use::unused,
                         !fp8_kv    ? unquantised
                         : v_from_k ? Reason("FMHA_FLAG_V_FROM_K (args.k_scale applies)")
                                    : Reason("fp8 K/V (problem.kv_quant = FMHA_KV_QUANT_FP8)"),
                         [&] { return kv_scale_rule("args.v_scale"); });
    const bool fp8_q = (p_.flags & FMHA_FLAG_FP8_QK) != 0;
    views.q_scale =
        take(args.q_scale, "args.q_scale", fp8_q ? Use::required : Use::unused,
             fp8_q ? "FMHA_FLAG_FP8_QK" : "a problem without FMHA_FLAG_FP8_QK", [&] { return q_scale_rule(); });
    const char *partials_context = partials ? "FMHA_FLAG_WRITE_PARTIALS" : "a run without FMHA_FLAG_WRITE_PARTIALS";
    views.o_partial = take(args.o_partial, "args.o_partial", partials ? Use::required : Use::unused, partials_context,
                           [&] { return o_partial_rule(); });
    views.lse_partial = take(args.lse_partial, "args.lse_partial", partials ? Use::required : Use::unused,
                             partials_context, [&] { return lse_partial_rule(); });
    return views;
  }

 private:
  // The view of `tensor` under the rule `make_rule()` builds, after checking
  // that its presence agrees with `use` (`context` says why).
  template <class MakeRule>
  fmha_view take(const DLTensor *tensor, const char *name, Use use, const Reason &context, MakeRule make_rule) {
    if (tensor == nullptr) {
      if (use == Use::required) invalid(cat(name, " is NULL but ", context.text, context.detail, " needs it"));
      return fmha_view{};
    }
    if (use == Use::unused) invalid(cat(name, " must be NULL: ", context.text, context.detail, " does not use it"));
    return canonical_view(*tensor, make_rule(), placement_);
  }

  static TensorRule rule(const char *name, const DimList &dims, const Elems &elems) {
    TensorRule made;
    made.name = name;
    made.dims = dims;
    made.elems = elems.bits;
    made.elems_text = elems.text;
    made.elems_field = elems.field;
    made.elems_dtype = elems.dtype;
    made.fp8_words = elems.fp8_words;
    return made;
  }

  // [B, Mq] or, for VARLEN, [1, total_q] (total_q free for Q itself).
  DimList query_rows(bool free_total) const {
    if (varlen_) return {{"1", 1}, {"total_q", free_total ? kAnyExtent : total_q_}};
    return {{"B", p_.batch}, {"Mq", p_.max_q_seqlen}};
  }

  TensorRule q_rule() const {
    DimList dims = query_rows(true);
    dims.append({{"G", p_.groups}, {"Hq", p_.heads_q}, {"Dqk", p_.head_dim_qk}});
    TensorRule made = rule("args.q", dims, dtype_elems(p_.q_dtype, "q_dtype"));
    made.fp8_format = p_.fp8_format;
    made.g_axis = 2;
    made.contiguous_last = true;
    made.row_aligned = true;
    return made;
  }

  // K/V rows: [B, Mkv], GAPPY [1, total], paged [num_pages, page_size].
  DimList kv_rows(bool free_total) const {
    switch (p_.kv_layout) {
      case FMHA_KV_GAPPY:
        return {{"1", 1}, {"total", free_total ? kAnyExtent : total_kv_}};
      case FMHA_KV_PAGED:
      case FMHA_KV_RAGGED:
        return {{"num_pages", p_.num_pages}, {"page_size", p_.page_size}};
      default:
        return {{"B", p_.batch}, {"Mkv", p_.max_kv_seqlen}};
    }
  }

  // The short forms K/V and their per-row scales may take: without G, with
  // rows for pages, with Hq heads of stride 0 for one head.
  void allow_kv_forms(TensorRule &made, int head_axis) const {
    made.g_axis = head_axis - 1;
    made.rows_may_merge = paged_;
    if (p_.heads_kv == 1) {
      made.broadcast_head_axis = head_axis;
      made.broadcast_heads = p_.heads_q;
    }
  }

  // K (whose GAPPY total is free) or V (whose total is K's).
  TensorRule kv_rule(bool key) const {
    const int32_t head_dim = key ? p_.head_dim_qk : p_.head_dim_v;
    DimList dims = kv_rows(key);
    Elems elems = dtype_elems(p_.kv_dtype, "kv_dtype");
    DimSpec last{key ? "Dqk" : "Dv", head_dim};
    if (p_.kv_quant == FMHA_KV_QUANT_INT4) {
      elems = {elem_bit(FMHA_ELEM_I32), "int32 words (problem.kv_quant = FMHA_KV_QUANT_INT4)", false};
      last = {"kv_quant_groups + D/8 words", p_.kv_quant_groups + head_dim / 8};
    } else if (p_.kv_quant == FMHA_KV_QUANT_FP8) {
      elems = {elem_bit(FMHA_ELEM_FP8),
               "fp8 (uint8, a DLPack fp8 code or int32 words; problem.kv_quant = FMHA_KV_QUANT_FP8)", true};
    }
    dims.append({{"G", p_.groups}, {"Hkv", p_.heads_kv}, last});
    TensorRule made = rule(key ? "args.k" : "args.v", dims, elems);
    made.fp8_format = p_.fp8_format;
    allow_kv_forms(made, 3);
    // int4 rows (kv_quant_groups + D / 8 words) are rarely a multiple of a
    // device's row alignment; their words are aligned as elements.
    made.contiguous_last = true;
    made.row_aligned = p_.kv_quant != FMHA_KV_QUANT_INT4;
    // fp8 rows (Dqk bytes, e.g. 576 plus a pad) that are 4-byte aligned
    // move in 4-byte pieces on the GPU, 16-byte ones where every row allows.
    if (p_.kv_quant == FMHA_KV_QUANT_FP8) made.row_alignment_cap = 4;
    return made;
  }

  TensorRule o_rule() const {
    DimList dims = query_rows(false);
    dims.append({{"G", p_.groups}, {"Hq", p_.heads_q}, {"Dv", p_.head_dim_v}});
    TensorRule made = rule("args.o", dims, dtype_elems(p_.o_dtype, "o_dtype"));
    made.g_axis = 2;
    made.contiguous_last = true;
    made.row_aligned = true;
    return made;
  }

  // [B, G, Hq, Mq] or, for VARLEN, [1, G, Hq, total_q].
  DimList lse_dims() const {
    if (varlen_) return {{"1", 1}, {"G", p_.groups}, {"Hq", p_.heads_q}, {"total_q", total_q_}};
    return {{"B", p_.batch}, {"G", p_.groups}, {"Hq", p_.heads_q}, {"Mq", p_.max_q_seqlen}};
  }

  TensorRule lse_rule() const {
    TensorRule made = rule("args.lse", lse_dims(), fixed_elems(FMHA_ELEM_F32));
    made.g_axis = 1;
    return made;
  }

  TensorRule bias_rule() const {
    TensorRule made = rule(
        "args.bias",
        {{"B", p_.batch}, {"G", p_.groups}, {"Hq", p_.heads_q}, {"Mq", p_.max_q_seqlen}, {"Mkv", p_.max_kv_seqlen}},
        {kFloatElems, "float16, bfloat16 or float32", false});
    made.g_axis = 1;
    return made;
  }

  TensorRule sinks_rule() const {
    TensorRule made = rule("args.sinks", {{"G", p_.groups}, {"Hq", p_.heads_q}}, fixed_elems(FMHA_ELEM_F32));
    made.g_axis = 0;
    return made;
  }

  static TensorRule metadata_rule(const char *name, const char *extent_name, int64_t extent) {
    return rule(name, {{extent_name, extent}}, fixed_elems(FMHA_ELEM_I32));
  }

  TensorRule block_table_rule() const {
    return rule("args.block_table", {{"B", p_.batch}, {"max_pages_per_seq", p_.max_pages_per_seq}},
                fixed_elems(FMHA_ELEM_I32));
  }

  TensorRule kv_scale_rule(const char *name) const {
    const Elems elems =
        p_.kv_scale_kind == FMHA_KV_SCALE_F32
            ? Elems{elem_bit(FMHA_ELEM_F32), "float32 (problem.kv_scale_kind = FMHA_KV_SCALE_F32)", false}
            : Elems{elem_bit(FMHA_ELEM_I32), "int32 (problem.kv_scale_kind = FMHA_KV_SCALE_F16X2_SCALE_SHIFT)", false};
    TensorRule made;
    switch (p_.kv_scale_granularity) {
      case FMHA_SCALE_PER_ROW: {
        DimList dims = kv_rows(false);
        dims.append({{"G", p_.groups}, {"Hkv", p_.heads_kv}});
        made = rule(name, dims, elems);
        allow_kv_forms(made, 3);
        break;
      }
      case FMHA_SCALE_PER_HEAD:
        made = rule(name, {{"G", p_.groups}, {"Hkv", p_.heads_kv}}, elems);
        made.g_axis = 0;
        break;
      default:
        made = rule(name, {{"1", 1}}, elems);
        made.scalar_ok = true;
    }
    return made;
  }

  TensorRule q_scale_rule() const {
    TensorRule made;
    switch (p_.q_scale_granularity) {
      case FMHA_SCALE_PER_ROW: {
        DimList dims = query_rows(false);
        dims.append({{"G", p_.groups}, {"Hq", p_.heads_q}});
        made = rule("args.q_scale", dims, fixed_elems(FMHA_ELEM_F32));
        made.g_axis = 2;
        break;
      }
      case FMHA_SCALE_PER_HEAD:
        made = rule("args.q_scale", {{"G", p_.groups}, {"Hq", p_.heads_q}}, fixed_elems(FMHA_ELEM_F32));
        made.g_axis = 0;
        break;
      default:
        made = rule("args.q_scale", {{"1", 1}}, fixed_elems(FMHA_ELEM_F32));
        made.scalar_ok = true;
    }
    return made;
  }

  TensorRule o_partial_rule() const {
    DimList dims = {{"split_k", split_k_}};
    for (const DimSpec &dim : query_rows(false)) dims.push_back(dim);
    dims.append({{"G", p_.groups}, {"Hq", p_.heads_q}, {"Dv", p_.head_dim_v}});
    TensorRule made = rule("args.o_partial", dims, fixed_elems(FMHA_ELEM_F32));
    made.g_axis = 3;
    made.contiguous_last = true;
    return made;
  }

  TensorRule lse_partial_rule() const {
    DimList dims = {{"split_k", split_k_}};
    for (const DimSpec &dim : lse_dims()) dims.push_back(dim);
    TensorRule made = rule("args.lse_partial", dims, fixed_elems(FMHA_ELEM_F32));
    made.g_axis = 2;
    return made;
  }

  const fmha_splitk_problem &p_;
  const Placement placement_;
  const bool paged_;
  const bool varlen_;
  const int64_t split_k_;
  int64_t total_q_ = 0;
  int64_t total_kv_ = 0;
};

}  // namespace

fmha_run_views run_views(const fmha_plan_data &plan, const fmha_splitk_args &args) {
  return RunChecker(plan).check(args);
}

}  // namespace fmha::core
