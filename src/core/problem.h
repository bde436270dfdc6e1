// Validation of fmha_splitk_problem: every field is checked and every
// default resolved, into the form fmha_plan_data::problem documents.
#ifndef FMHA_SPLITK_CORE_PROBLEM_H_
#define FMHA_SPLITK_CORE_PROBLEM_H_

#include <cstdint>
#include <vector>

#include "core/backend_api.h"

namespace fmha::core {

// The problem with defaults resolved: groups >= 1, head_dim_v, kv_dtype,
// o_dtype, softmax_scale, kv_quant_groups >= 1, kv_chunk_size (256 when
// batch invariant); fields of features not in use (page geometry outside
// PAGED/RAGGED, windows outside local masks, quantisation settings of
// unquantised K/V) are ignored and set to 0; kv_seqlen_hint is NULL.
// Throws INVALID_ARGUMENT naming the field and its value. `problem` comes
// from read_versioned (struct_size already checked).
fmha_splitk_problem resolve_problem(const fmha_splitk_problem &problem);

// A copy of the caller's kv_seqlen_hint (problem.batch entries, each checked
// against problem.max_kv_seqlen; `problem` resolved), or empty when NULL.
std::vector<int32_t> copy_kv_seqlen_hint(const int32_t *kv_seqlen_hint, const fmha_splitk_problem &problem);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_PROBLEM_H_
