// Split-K heuristic and work partition (DESIGN 5.1). Pure C++ with no GPU
// header: the core uses it to size plans, the CPU backend to partition each
// run by the actual lengths; GPU plugins compile the same source (it has no
// dependency on the rest of the core) or mirror it in a device-side pass.
#ifndef FMHA_SPLITK_CORE_SCHEDULE_H_
#define FMHA_SPLITK_CORE_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "core/backend_api.h"

namespace fmha::core {

// One contiguous range of one sequence's keys, processed for every K/V head.
struct Piece {
  int32_t batch;     // sequence index
  int32_t kv_begin;  // first key (index within the sequence)
  int32_t kv_end;    // one past the last key
  // Partial slot in the workspace, or -1 when the piece covers the whole
  // sequence and so writes O / LSE directly.
  int32_t slot;
};

// The parameters of a BALANCED partition, the knobs autotuning turns:
// `waves` work items per worker that the ranges aim at (0: a single range,
// no sequence split) and the shortest piece `min_piece` in keys. waves < 0
// asks for the heuristic. Schedules the problem fixes (forced split_k,
// batch invariant) have none: waves = -1 after choose_schedule.
struct ScheduleChoice {
  int32_t waves = -1;
  int32_t min_piece = 0;
};

// Fills plan.schedule, split_k, kv_chunk_size, num_ranges, max_partials,
// rows_per_kv_head and the workspace layout (ws_* and workspace_size) from
// plan.problem (defaults resolved), plan.device and the optional host length
// hint. `choice` (optional) asks for a BALANCED partition's parameters
// (ignored for schedules the problem fixes) and receives the ones used.
// Returns SUCCESS or INVALID_ARGUMENT / NOT_SUPPORTED with `message`.
fmha_status choose_schedule(fmha_plan_data &plan, const int32_t *kv_seqlen_hint, std::string &message,
                            ScheduleChoice *choice = nullptr);

// Ranges of a BALANCED plan a run with `total_keys` keys actually uses (the
// plan's num_ranges, but none shorter than its minimum piece).
int64_t effective_ranges(const fmha_plan_data &plan, int64_t total_keys);

// Whether the CUDA plugin runs this plan's forward pass in row pairs (the
// tile kernel with 32 query rows per CTA: native K/V, head dims up to 128,
// more than 16 query rows per K/V head, not MLA). One rule for the
// heuristic's CTA count here and the plugin's kernel choice.
bool uses_row_pairs(const fmha_plan_data &plan);

// Number of pieces partition() can produce at most for this plan.
int64_t max_pieces(const fmha_plan_data &plan);

// Cuts the batch into pieces by the actual lengths kv_len[0..B) (each in
// [0, max_kv_seqlen]); writes at most max_pieces(plan) entries ordered by
// (batch, kv_begin) and returns their count. Sequences of length 0 get one
// piece with kv_begin == kv_end (writes O = 0, LSE = -inf). Deterministic:
// depends only on the plan and the lengths (FIXED_CHUNK: on the sequence's
// own length only). Slots are numbered densely from 0 in piece order and
// never exceed plan.max_partials.
int64_t partition(const fmha_plan_data &plan, const int32_t *kv_len, Piece *pieces);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_SCHEDULE_H_
