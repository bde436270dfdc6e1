// The C entry points of plans and runs.
#include "api/api_guard.h"
#include "core/plan.h"
#include "core/versioned_struct.h"

using fmha::core::invalid;

fmha_status fmha_splitk_create_plan(const fmha_splitk_problem *problem, fmha_splitk_plan_t *plan) {
  FMHA_API_BEGIN
  const fmha_splitk_problem copy = fmha::core::read_versioned(problem, "problem");
  if (plan == nullptr) invalid("plan is NULL (it receives the created plan)");
  *plan = fmha::core::create_plan(copy).release();
  return fmha::api::succeed();
  FMHA_API_END
}

void fmha_splitk_destroy_plan(fmha_splitk_plan_t plan) { delete plan; }

fmha_status fmha_splitk_plan_workspace_size(fmha_splitk_plan_t plan, size_t *size) {
  FMHA_API_BEGIN
  if (plan == nullptr) invalid("plan is NULL");
  if (size == nullptr) invalid("size is NULL");
  *size = plan->data.workspace_size;
  return fmha::api::succeed();
  FMHA_API_END
}

fmha_status fmha_splitk_get_plan_info(fmha_splitk_plan_t plan, fmha_splitk_plan_info *info) {
  FMHA_API_BEGIN
  if (plan == nullptr) invalid("plan is NULL");
  if (info == nullptr) invalid("info is NULL");
  const size_t struct_size = info->struct_size;
  fmha::core::check_first_version_size<fmha_splitk_plan_info>(struct_size, "info");
  fmha::core::write_versioned(info, struct_size, fmha::core::plan_info(*plan));
  return fmha::api::succeed();
  FMHA_API_END
}

fmha_status fmha_splitk_run(fmha_splitk_plan_t plan, const fmha_splitk_args *args) {
  FMHA_API_BEGIN
  if (plan == nullptr) invalid("plan is NULL");
  fmha::core::run_plan(*plan, fmha::core::read_versioned(args, "args"));
  return fmha::api::succeed();
  FMHA_API_END
}

fmha_status fmha_splitk_check_status(fmha_splitk_plan_t plan, void *workspace, void *stream) {
  FMHA_API_BEGIN
  if (plan == nullptr) invalid("plan is NULL");
  fmha::core::check_plan_status(*plan, workspace, stream);
  return fmha::api::succeed();
  FMHA_API_END
}
