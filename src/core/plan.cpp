#include "core/plan.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/names.h"
#include "core/problem.h"
#include "core/registry.h"
#include "core/run_views.h"
#include "core/schedule.h"
#include "core/tuning.h"

namespace {

constexpr uintptr_t kWorkspaceAlignment = 256;

}  // namespace

fmha_splitk_plan_s::~fmha_splitk_plan_s() {
  if (owned_workspace != nullptr) backend.free(data.device.device_id, owned_workspace);
  if (merge_counters != nullptr) backend.free(data.device.device_id, merge_counters);
  if (run_order != nullptr) backend.order_destroy(data.device.device_id, run_order);
}

namespace fmha::core {

void give_merge_counters(fmha_splitk_plan_s &plan, const fmha_plan_data &data) {
  const fmha_backend_v1 &backend = plan.backend;
  if (data.merge_counters <= plan.merge_counters_capacity || backend.zero == nullptr ||
      (data.problem.flags & FMHA_FLAG_EXTERNAL_WORKSPACE))
    return;
  const size_t bytes = static_cast<size_t>(data.merge_counters) * sizeof(uint32_t);
  void *counters = nullptr;
  BackendMessage message;
  check_backend(backend.alloc(data.device.device_id, bytes, &counters, message.msg()), message, backend.name,
                cat("allocating the plan's ", bytes, " bytes of merge counters").c_str());
  BackendMessage zero_message;
  const fmha_status zeroed = backend.zero(data.device.device_id, counters, bytes, zero_message.msg());
  if (zeroed != FMHA_STATUS_SUCCESS) backend.free(data.device.device_id, counters);
  check_backend(zeroed, zero_message, backend.name, "zeroing the plan's merge counters");
  std::lock_guard<std::mutex> workspace_lock(plan.owned_workspace_lock);
  if (plan.merge_counters != nullptr) backend.free(data.device.device_id, plan.merge_counters);
  plan.merge_counters = counters;
  plan.merge_counters_capacity = data.merge_counters;
}

void give_run_order(fmha_splitk_plan_s &plan) {
  const fmha_backend_v1 &backend = plan.backend;
  if (plan.run_order != nullptr || plan.owned_workspace == nullptr || backend.order_create == nullptr) return;
  void *order = nullptr;
  BackendMessage message;
  check_backend(backend.order_create(plan.data.device.device_id, &order, message.msg()), message, backend.name,
                "creating the order of the runs on the plan's own workspace");
  plan.run_order = order;
}

void *alloc_owned_workspace(const fmha_backend_v1 &backend, const fmha_plan_data &data) {
  const int32_t device = data.device.device_id;
  // Kept only on success: a failed alloc may leave anything in `workspace`.
  void *workspace = nullptr;
  BackendMessage alloc_message;
  check_backend(backend.alloc(device, data.workspace_size, &workspace, alloc_message.msg()), alloc_message,
                backend.name, cat("allocating the plan's ", data.workspace_size, "-byte workspace").c_str());
  if ((data.problem.flags & FMHA_FLAG_CHECKED) && backend.zero != nullptr) {
    BackendMessage zero_message;
    const fmha_status zeroed = backend.zero(device, workspace, data.workspace_size, zero_message.msg());
    if (zeroed != FMHA_STATUS_SUCCESS) backend.free(device, workspace);
    check_backend(zeroed, zero_message, backend.name, "zeroing the checked plan's workspace");
  }
  return workspace;
}

std::unique_ptr<fmha_splitk_plan_s> create_plan(const fmha_splitk_problem &problem) {
  fmha_plan_data data;
  std::memset(&data, 0, sizeof(data));
  data.problem = resolve_problem(problem);
  std::vector<int32_t> hint = copy_kv_seqlen_hint(problem.kv_seqlen_hint, data.problem);

  const BackendChoice choice = Registry::instance().select(data.problem.backend, data.problem.device_id);
  const fmha_backend_v1 &table = *choice.backend->table;
  data.problem.backend = table.kind;
  data.problem.device_id = choice.device_id;
  BackendMessage props_message;
  check_backend(table.device_props(choice.device_id, &data.device, props_message.msg()), props_message, table.name,
                "device_props");
  data.device.device_id = choice.device_id;
  data.device.name[sizeof(data.device.name) - 1] = '\0';

  // The heuristic, then the winner the tuning cache holds for the class, if
  // any: a cached choice the backend cannot plan leaves the heuristic's.
  const fmha_plan_data unplanned = data;
  ScheduleChoice schedule_choice;
  plan_with_choice(data, table, hint, schedule_choice);
  int32_t source = FMHA_CONFIG_HEURISTIC;
  if (data.schedule == FMHA_SCHEDULE_BALANCED) {
    if (const std::optional<ScheduleChoice> cached = cached_choice(data, hint)) {
      fmha_plan_data tuned = unplanned;
      ScheduleChoice tuned_choice = *cached;
      try {
        plan_with_choice(tuned, table, hint, tuned_choice);
        data = tuned;
        schedule_choice = tuned_choice;
        source = FMHA_CONFIG_TUNING_CACHE;
      } catch (const Error &) {
      }
    }
  }

  auto plan = std::make_unique<fmha_splitk_plan_s>(data, table);
  plan->kv_seqlen_hint = std::move(hint);
  plan->choice = schedule_choice;
  plan->config_source = source;
  if (data.workspace_size > 0 && !(data.problem.flags & FMHA_FLAG_EXTERNAL_WORKSPACE)) {
    plan->owned_workspace = alloc_owned_workspace(table, data);
    give_merge_counters(*plan, data);
    give_run_order(*plan);
  }
  return plan;
}

void plan_with_choice(fmha_plan_data &data, const fmha_backend_v1 &backend, const std::vector<int32_t> &kv_seqlen_hint,
                      ScheduleChoice &choice) {
  std::string schedule_message;
  const fmha_status scheduled =
      choose_schedule(data, kv_seqlen_hint.empty() ? nullptr : kv_seqlen_hint.data(), schedule_message, &choice);
  if (scheduled != FMHA_STATUS_SUCCESS)
    fail(scheduled, schedule_message.empty() ? std::string("the schedule could not be chosen") : schedule_message);

  BackendMessage plan_message;
  check_backend(backend.plan(&data, plan_message.msg()), plan_message, backend.name, "plan");
  data.kernel_name[sizeof(data.kernel_name) - 1] = '\0';
}

void run_plan(fmha_splitk_plan_s &plan, const fmha_splitk_args &args) {
  fmha_run_views views = run_views(plan.data, args);
  views.stream = args.stream;
  const bool owned = args.workspace == nullptr;
  if (owned && plan.owned_workspace == nullptr && plan.data.workspace_size > 0)
    fail(FMHA_STATUS_INSUFFICIENT_WORKSPACE,
         cat("args.workspace is NULL, but the plan needs ", plan.data.workspace_size,
             " bytes of workspace and was created with FMHA_FLAG_EXTERNAL_WORKSPACE: pass one"));
  if (owned) {
    views.workspace = plan.owned_workspace;
    views.workspace_size = plan.data.workspace_size;
    // One run at a time on the owned workspace (the lock below): its merge
    // counters, zero between runs, are this run's.
    if (plan.data.merge_counters > 0 && plan.merge_counters_capacity >= plan.data.merge_counters)
      views.merge_counters = plan.merge_counters;
    // ... and on the device the previous one's work comes first.
    views.run_order = plan.run_order;
  } else {
    if (args.workspace_size < plan.data.workspace_size)
      fail(FMHA_STATUS_INSUFFICIENT_WORKSPACE,
           cat("args.workspace_size = ", args.workspace_size, " is less than the plan's workspace size ",
               plan.data.workspace_size, " (fmha_splitk_plan_workspace_size)"));
    const auto address = reinterpret_cast<uintptr_t>(args.workspace);
    if (address % kWorkspaceAlignment != 0)
      invalid(
          cat("args.workspace = 0x", std::hex, address, std::dec, " is not ", kWorkspaceAlignment, "-byte aligned"));
    views.workspace = args.workspace;
    views.workspace_size = args.workspace_size;
  }
  const fmha_splitk_problem &problem = plan.data.problem;
  if (problem.batch == 0 || problem.max_q_seqlen == 0) return;

  std::unique_lock<std::mutex> lock(plan.owned_workspace_lock, std::defer_lock);
  if (owned && plan.owned_workspace != nullptr) lock.lock();
  BackendMessage message;
  check_backend(plan.backend.run(&plan.data, &views, message.msg()), message, plan.backend.name, "run");
}

void check_plan_status(fmha_splitk_plan_s &plan, void *workspace, void *stream) {
  if (!(plan.data.problem.flags & FMHA_FLAG_CHECKED) || plan.backend.check_status == nullptr) return;
  const bool owned = workspace == nullptr;
  if (owned && plan.owned_workspace == nullptr && plan.data.workspace_size > 0)
    invalid("workspace is NULL, but the plan owns none (FMHA_FLAG_EXTERNAL_WORKSPACE): pass the run's workspace");
  if (owned) workspace = plan.owned_workspace;
  // No workspace: no run of this plan can have recorded anything.
  if (workspace == nullptr) return;
  // The plan's own workspace may be in use by a run on another thread.
  std::unique_lock<std::mutex> lock(plan.owned_workspace_lock, std::defer_lock);
  if (owned) lock.lock();
  BackendMessage message;
  check_backend(plan.backend.check_status(&plan.data, workspace, stream, message.msg()), message, plan.backend.name,
                "check_status");
}

fmha_splitk_plan_info plan_info(fmha_splitk_plan_s &plan) {
  const fmha_plan_data &data = plan.data;
  fmha_splitk_plan_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  info.backend = data.problem.backend;
  info.device_id = data.device.device_id;
  info.split_k = data.split_k;
  info.kv_chunk_size = data.kv_chunk_size;
  info.num_workers = data.device.num_workers;
  info.max_partials = static_cast<int32_t>(std::min<int64_t>(data.max_partials, std::numeric_limits<int32_t>::max()));
  info.workspace_size = data.workspace_size;
  copy_name(info.backend_name, plan.backend.name);
  copy_name(info.kernel_name, data.kernel_name);
  copy_name(info.device_name, data.device.name);
  info.config_source = plan.config_source;
  if (plan.config_source == FMHA_CONFIG_HEURISTIC) {
    info.config_index = 0;  // the heuristic is candidate 0: no need to enumerate
  } else {
    std::lock_guard<std::mutex> lock(plan.tuning_lock);
    info.config_index = selected_candidate(plan);
  }
  return info;
}

}  // namespace fmha::core
