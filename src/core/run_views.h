// Checking the tensors of fmha_splitk_run() against the plan: each tensor
// the problem uses is present and canonicalised, each it does not use is
// NULL.
#ifndef FMHA_SPLITK_CORE_RUN_VIEWS_H_
#define FMHA_SPLITK_CORE_RUN_VIEWS_H_

#include "core/backend_api.h"

namespace fmha::core {

// The canonical views of `args` (workspace and stream are left zero for the
// caller to fill). Throws INVALID_ARGUMENT naming the tensor and the values.
fmha_run_views run_views(const fmha_plan_data &plan, const fmha_splitk_args &args);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_RUN_VIEWS_H_
