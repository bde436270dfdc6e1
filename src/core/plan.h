// Plans: creation (validate, choose backend and device, schedule, backend
// plan, plan-owned workspace), runs and what a plan reports about itself.
#ifndef FMHA_SPLITK_CORE_PLAN_H_
#define FMHA_SPLITK_CORE_PLAN_H_

#include <memory>
#include <mutex>

#include "core/backend_api.h"

// The object behind fmha_splitk_plan_t. Read-only after creation except for
// the workspace lock.
struct fmha_splitk_plan_s {
  fmha_splitk_plan_s(const fmha_plan_data &plan_data, const fmha_backend_v1 &backend_table)
      : data(plan_data), backend(backend_table) {}
  fmha_splitk_plan_s(const fmha_splitk_plan_s &) = delete;
  fmha_splitk_plan_s &operator=(const fmha_splitk_plan_s &) = delete;
  ~fmha_splitk_plan_s();

  const fmha_plan_data data;
  const fmha_backend_v1 &backend;
  // Used by runs that pass no workspace; NULL when workspace_size is 0.
  void *owned_workspace = nullptr;
  // Gives the owned workspace to one run at a time.
  std::mutex owned_workspace_lock;
};

namespace fmha::core {

// `problem` comes from read_versioned; its kv_seqlen_hint is the caller's
// and is read here only.
std::unique_ptr<fmha_splitk_plan_s> create_plan(const fmha_splitk_problem &problem);

// `args` come from read_versioned.
void run_plan(fmha_splitk_plan_s &plan, const fmha_splitk_args &args);

fmha_splitk_plan_info plan_info(const fmha_splitk_plan_s &plan);

// fmha_splitk_check_status: nothing to report unless the plan is checked and
// its backend records violations on the device; `workspace` NULL is the
// plan's own.
void check_plan_status(fmha_splitk_plan_s &plan, void *workspace, void *stream);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_PLAN_H_
