// The CPU split-K attention forward (see forward.h).
#include "backends/cpu/forward.h"

#include <algorithm>
#include <cstdio>

#include "backends/cpu/elements.h"
#include "backends/cpu/merge.h"
#include "backends/cpu/message.h"
#include "backends/cpu/piece_attention.h"
#include "backends/cpu/sequence_map.h"
#include "backends/cpu/thread_pool.h"
#include "core/schedule.h"

namespace fmha::cpu {
namespace {

using core::Piece;

constexpr const char *kKernelName = "cpu_splitk_f32acc";

// A sequence whose pieces took partial slots [first_slot, first_slot +
// slots), merged after the pieces.
struct MergeGroup {
  int32_t batch;
  int32_t first_slot;
  int32_t slots;
};

// The CPU's metadata in the workspace (offsets from ws_meta_offset).
struct MetaLayout {
  size_t pieces;
  size_t kv_len;
  size_t groups;
  size_t bytes;
};

constexpr size_t kMetaAlignment = 64;

size_t align_meta(size_t offset) { return (offset + kMetaAlignment - 1) / kMetaAlignment * kMetaAlignment; }

// Sizes are bounded by the schedule's own overflow checks (max_pieces
// Piece entries fit in size_t; batch < 2^31).
MetaLayout meta_layout(const fmha_plan_data &plan) {
  const auto batch = static_cast<size_t>(plan.problem.batch);
  MetaLayout layout{};
  layout.pieces = 0;
  layout.kv_len = align_meta(static_cast<size_t>(core::max_pieces(plan)) * sizeof(Piece));
  layout.groups = align_meta(layout.kv_len + batch * sizeof(int32_t));
  layout.bytes = layout.groups + batch * sizeof(MergeGroup);
  return layout;
}

RowTarget output_target(const AttentionContext &ctx, int64_t b) {
  const fmha_view &o = ctx.views.o;
  const fmha_view &lse = ctx.views.lse;
  const int64_t qb = ctx.sequences.q_batch(b);
  return RowTarget{static_cast<uint8_t *>(view_ptr(o, {qb})),
                   o.elem,
                   o.stride[1],
                   o.stride[2],
                   o.stride[3],
                   lse.data != nullptr ? static_cast<float *>(view_ptr(lse, {qb})) : nullptr,
                   lse.stride[3],
                   lse.stride[1],
                   lse.stride[2],
                   ctx.sequences.q_first(b)};
}

// FMHA_FLAG_WRITE_PARTIALS: chunk `chunk` of sequence b in o_partial /
// lse_partial ([S, B, Mq, G, Hq, Dv] / [S, B, G, Hq, Mq]).
RowTarget user_partial_target(const AttentionContext &ctx, int64_t chunk, int64_t b) {
  const fmha_view &o = ctx.views.o_partial;
  const fmha_view &lse = ctx.views.lse_partial;
  const int64_t qb = ctx.sequences.q_batch(b);
  return RowTarget{static_cast<uint8_t *>(view_ptr(o, {chunk, qb})),
                   o.elem,
                   o.stride[2],
                   o.stride[3],
                   o.stride[4],
                   lse.data != nullptr ? static_cast<float *>(view_ptr(lse, {chunk, qb})) : nullptr,
                   lse.stride[4],
                   lse.stride[2],
                   lse.stride[3],
                   ctx.sequences.q_first(b)};
}

// Partial slot `slot` of the workspace: f32 [G, Hq, Mq, Dv] and [G, Hq, Mq].
RowTarget slot_target(const AttentionContext &ctx, int64_t slot) {
  const fmha_splitk_problem &problem = ctx.plan.problem;
  const int64_t mq = problem.max_q_seqlen;
  const int64_t dv = ctx.head_dim_v;
  const int64_t slot_rows = ctx.groups * ctx.heads_q * mq;
  auto *workspace = static_cast<uint8_t *>(ctx.views.workspace);
  auto *o = reinterpret_cast<float *>(workspace + ctx.plan.ws_partial_o_offset) + slot * slot_rows * dv;
  auto *lse = reinterpret_cast<float *>(workspace + ctx.plan.ws_partial_lse_offset) + slot * slot_rows;
  return RowTarget{reinterpret_cast<uint8_t *>(o),
                   FMHA_ELEM_F32,
                   dv,
                   ctx.heads_q * mq * dv,
                   mq * dv,
                   lse,
                   1,
                   ctx.heads_q * mq,
                   mq,
                   0};
}

// Merges the partial slots of one split sequence into O / LSE for query
// head (g, hq), in slot (= piece) order.
void merge_group(const AttentionContext &ctx, const MergeGroup &group, int64_t g, int64_t hq) {
  const RowTarget output = output_target(ctx, group.batch);
  const int64_t q_len = ctx.sequences.q_len(group.batch);
  for (int64_t i = 0; i < q_len; ++i) {
    const float lse = merge_row(
        [&](int64_t k) {
          const RowTarget slot = slot_target(ctx, group.first_slot + k);
          return PartialRow{slot.o_row(i, g, hq), FMHA_ELEM_F32, *slot.lse_at(i, g, hq)};
        },
        group.slots, ctx.head_dim_v, output.o_row(i, g, hq), output.o_elem);
    if (output.lse != nullptr) *output.lse_at(i, g, hq) = lse;
  }
}

// Where piece `index` (of sequence piece.batch) writes.
RowTarget piece_target(const AttentionContext &ctx, const Piece &piece, int64_t index) {
  if (ctx.plan.problem.flags & FMHA_FLAG_WRITE_PARTIALS)
    return user_partial_target(ctx, index % ctx.plan.split_k, piece.batch);  // UNIFORM: split_k pieces each
  if (piece.slot >= 0) return slot_target(ctx, piece.slot);
  return output_target(ctx, piece.batch);
}

bool is_supported_kv_dtype(int32_t dtype) { return dtype == FMHA_DTYPE_F16 || dtype == FMHA_DTYPE_BF16; }

}  // namespace

fmha_status plan_forward(fmha_plan_data *plan, fmha_msg msg) {
  const fmha_splitk_problem &problem = plan->problem;
  // Every quantisation (problem.kv_quant), fp8 compute and V_FROM_K the core
  // accepts is computed; FMHA_FLAG_CHECKED needs nothing more, since every
  // CPU run validates the device-side metadata (SequenceMap::validate).
  const bool q_supported = is_supported_kv_dtype(problem.q_dtype) ||
                           (problem.q_dtype == FMHA_DTYPE_FP8 && (problem.flags & FMHA_FLAG_FP8_QK));
  if (!q_supported || !is_supported_kv_dtype(problem.kv_dtype))
    return fail(msg, FMHA_STATUS_NOT_SUPPORTED,
                "problem.q_dtype = %d, problem.kv_dtype = %d: the CPU backend computes fp16, bf16 (or, with "
                "FMHA_FLAG_FP8_QK, fp8) Q and fp16 or bf16 K/V (quantised K/V: problem.kv_quant)",
                problem.q_dtype, problem.kv_dtype);
  if (problem.head_dim_qk > kMaxHeadDim || problem.head_dim_v > kMaxHeadDim)
    return fail(msg, FMHA_STATUS_NOT_SUPPORTED,
                "problem.head_dim_qk = %d, problem.head_dim_v = %d: the CPU backend handles head dims up to %d",
                problem.head_dim_qk, problem.head_dim_v, static_cast<int>(kMaxHeadDim));

  std::snprintf(plan->kernel_name, sizeof plan->kernel_name, "%s", kKernelName);
  // Without partial slots every sequence is one piece, iterated directly:
  // no metadata (and, for split_k == 1, no workspace at all).
  if (plan->max_partials == 0) return FMHA_STATUS_SUCCESS;
  const size_t meta_bytes = meta_layout(*plan).bytes;
  const size_t workspace = plan->ws_meta_offset + (meta_bytes + 255) / 256 * 256;
  if (workspace < plan->ws_meta_offset)
    return fail(msg, FMHA_STATUS_INVALID_ARGUMENT, "workspace for problem.batch = %lld overflows size_t",
                static_cast<long long>(problem.batch));
  plan->ws_meta_size = std::max(plan->ws_meta_size, meta_bytes);
  plan->workspace_size = std::max(plan->workspace_size, workspace);
  return FMHA_STATUS_SUCCESS;
}

fmha_status run_forward(const fmha_plan_data &plan, const fmha_run_views &views, fmha_msg msg) {
  const fmha_splitk_problem &problem = plan.problem;
  if (problem.batch == 0 || problem.max_q_seqlen == 0) return FMHA_STATUS_SUCCESS;
  const SequenceMap sequences(plan, views);
  const bool partitioned = plan.max_partials > 0;
  uint8_t *meta = partitioned ? static_cast<uint8_t *>(views.workspace) + plan.ws_meta_offset : nullptr;
  const MetaLayout layout = meta_layout(plan);
  auto *kv_len = partitioned ? reinterpret_cast<int32_t *>(meta + layout.kv_len) : nullptr;
  if (const fmha_status status = sequences.validate(kv_len, msg); status != FMHA_STATUS_SUCCESS) return status;

  const AttentionContext ctx(plan, views, sequences);
  ThreadPool &pool = ThreadPool::instance();
  // Work items are (piece, group, K/V head), the K/V head fastest.
  const int64_t heads_kv_total = ctx.groups * ctx.heads_kv;
  auto attend = [&](int32_t worker, int64_t item, const Piece &piece, int64_t index, bool first_piece) {
    attend_piece(ctx, pool.scratch(worker), piece, first_piece, piece_target(ctx, piece, index),
                 (item % heads_kv_total) / ctx.heads_kv, item % ctx.heads_kv);
  };
  if (!partitioned) {
    pool.parallel_for(problem.batch * heads_kv_total, [&](int32_t worker, int64_t item) {
      const int64_t b = item / heads_kv_total;
      attend(worker, item, Piece{static_cast<int32_t>(b), 0, sequences.kv_len(b), -1}, 0, true);
    });
    return FMHA_STATUS_SUCCESS;
  }

  auto *pieces = reinterpret_cast<Piece *>(meta + layout.pieces);
  const int64_t piece_count = core::partition(plan, kv_len, pieces);
  pool.parallel_for(piece_count * heads_kv_total, [&](int32_t worker, int64_t item) {
    const int64_t index = item / heads_kv_total;
    attend(worker, item, pieces[index], index, index == 0 || pieces[index - 1].batch != pieces[index].batch);
  });
  if (problem.flags & FMHA_FLAG_WRITE_PARTIALS) return FMHA_STATUS_SUCCESS;

  // Sequences split into several pieces: their slots are consecutive.
  auto *groups = reinterpret_cast<MergeGroup *>(meta + layout.groups);
  int64_t group_count = 0;
  for (int64_t index = 0; index < piece_count; ++index) {
    const Piece &piece = pieces[index];
    if (piece.slot < 0) continue;
    if (group_count > 0 && groups[group_count - 1].batch == piece.batch) {
      ++groups[group_count - 1].slots;
    } else {
      groups[group_count++] = MergeGroup{piece.batch, piece.slot, 1};
    }
  }
  const int64_t heads_q_total = ctx.groups * ctx.heads_q;
  pool.parallel_for(group_count * heads_q_total, [&](int32_t, int64_t item) {
    merge_group(ctx, groups[item / heads_q_total], (item % heads_q_total) / ctx.heads_q, item % ctx.heads_q);
  });
  return FMHA_STATUS_SUCCESS;
}

}  // namespace fmha::cpu
