// The CPU attention kernel of one work item: every query row of one K/V
// head against one piece of a sequence's keys, online softmax in fp32
// (DESIGN 5.4 - 5.6, 6).
#ifndef FMHA_SPLITK_BACKENDS_CPU_PIECE_ATTENTION_H_
#define FMHA_SPLITK_BACKENDS_CPU_PIECE_ATTENTION_H_

#include <cstdint>

#include "backends/cpu/elements.h"
#include "backends/cpu/quantised.h"
#include "backends/cpu/sequence_map.h"
#include "core/backend_api.h"
#include "core/schedule.h"

namespace fmha::cpu {

// Largest head dim of the CPU kernel (MLA's Dqk; DESIGN 4).
constexpr int64_t kMaxHeadDim = 576;

// Where the rows of one piece (or merge) go: O (or a partial) and LSE of
// one sequence, indexed by (query within the sequence, group, query head).
struct RowTarget {
  uint8_t *o;
  int32_t o_elem;
  int64_t o_stride_q, o_stride_g, o_stride_h;
  float *lse;  // NULL: LSE not wanted
  int64_t lse_stride_q, lse_stride_g, lse_stride_h;
  int64_t q_first;  // index of the sequence's first query in the target

  void *o_row(int64_t i, int64_t g, int64_t hq) const {
    return o +
           ((q_first + i) * o_stride_q + g * o_stride_g + hq * o_stride_h) * static_cast<int64_t>(fmha_elem_bytes(o_elem));
  }
  float *lse_at(int64_t i, int64_t g, int64_t hq) const {
    return lse + (q_first + i) * lse_stride_q + g * lse_stride_g + hq * lse_stride_h;
  }
};

// The run's constants, shared by every work item.
struct AttentionContext {
  AttentionContext(const fmha_plan_data &plan, const fmha_run_views &views, const SequenceMap &sequences);

  const fmha_plan_data &plan;
  const fmha_run_views &views;
  const SequenceMap &sequences;
  int64_t groups;
  int64_t heads_q;
  int64_t heads_kv;
  int64_t heads_per_kv;
  int64_t head_dim_qk;
  int64_t head_dim_v;
  bool softcap;
  float score_scale;  // scale * log2(e): scores go straight to log2 units
  float tanh_scale;   // softcap: scale / cap
  float cap_log2;     // softcap: cap * log2(e)
  int64_t tile_rows;  // query rows per tile in a worker's scratch
  int32_t kv_quant;   // fmha_kv_quant of K and V
  int64_t kv_quant_groups;
  const Fp8Format *fp8;  // fp8 K/V (and Q, P): the problem's format; else NULL
  bool v_from_k;         // V is the first head_dim_v dims of the K rows
  bool fp8_qk;           // Q is fp8 with q_scale
  bool fp8_pv;           // P is quantised to fp8 per row and key block
};

// Computes the query rows of K/V head (g, kv_head) of piece.batch against
// keys [piece.kv_begin, piece.kv_end) and writes them, normalised, to
// `target` (O = 0 and LSE = -inf for a row that sees no key). With
// `first_piece` the sink (if any) joins the denominator. `scratch` is the
// worker's pool scratch.
void attend_piece(const AttentionContext &ctx, void *scratch, const core::Piece &piece, bool first_piece,
                  const RowTarget &target, int64_t g, int64_t kv_head);

}  // namespace fmha::cpu

#endif  // FMHA_SPLITK_BACKENDS_CPU_PIECE_ATTENTION_H_
