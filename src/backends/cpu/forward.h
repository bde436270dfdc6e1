// The CPU split-K attention forward (DESIGN 5.1 - 5.5): online softmax in
// fp32 over the pieces of the schedule, then the merge of split partials.
#ifndef FMHA_SPLITK_BACKENDS_CPU_FORWARD_H_
#define FMHA_SPLITK_BACKENDS_CPU_FORWARD_H_

#include "core/backend_api.h"

namespace fmha::cpu {

// Plan-time: refuses (NOT_SUPPORTED, with a message) what the CPU forward
// does not implement, names the kernel, and grows the workspace metadata to
// hold the per-run partition (pieces, key counts, merge groups).
fmha_status plan_forward(fmha_plan_data *plan, fmha_msg msg);

// Run-time: checks the run's metadata, partitions the batch into the
// workspace and computes synchronously on the thread pool. Results do not
// depend on the number of threads or on which thread ran what.
fmha_status run_forward(const fmha_plan_data &plan, const fmha_run_views &views, fmha_msg msg);

}  // namespace fmha::cpu

#endif  // FMHA_SPLITK_BACKENDS_CPU_FORWARD_H_
