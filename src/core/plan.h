// Plans: creation (validate, choose backend and device, schedule, backend
// plan, plan-owned workspace), runs and what a plan reports about itself.
#ifndef FMHA_SPLITK_CORE_PLAN_H_
#define FMHA_SPLITK_CORE_PLAN_H_

#include <memory>
#include <mutex>
#include <vector>

#include "core/backend_api.h"
#include "core/schedule.h"
#include "core/tuning.h"

// The object behind fmha_splitk_plan_t. Read-only after creation except for
// the workspace lock, the lazily computed candidates, and what
// fmha_splitk_autotune() changes (which no other call on the plan may
// overlap).
struct fmha_splitk_plan_s {
  fmha_splitk_plan_s(const fmha_plan_data &plan_data, const fmha_backend_v1 &backend_table)
      : data(plan_data), backend(backend_table) {}
  fmha_splitk_plan_s(const fmha_splitk_plan_s &) = delete;
  fmha_splitk_plan_s &operator=(const fmha_splitk_plan_s &) = delete;
  ~fmha_splitk_plan_s();

  fmha_plan_data data;
  const fmha_backend_v1 &backend;
  // The expected lengths given at creation (empty: max_kv_seqlen each), kept
  // to plan the candidates and key the tuning cache.
  std::vector<int32_t> kv_seqlen_hint;
  // The partition parameters `data` was planned with, and where they came
  // from (fmha_config_source).
  fmha::core::ScheduleChoice choice;
  int32_t config_source = FMHA_CONFIG_HEURISTIC;
  // Used by runs that pass no workspace; NULL when workspace_size is 0.
  void *owned_workspace = nullptr;
  // Gives the owned workspace to one run at a time.
  std::mutex owned_workspace_lock;
  // data.merge_counters (or more) zeroed counters for the runs on the
  // owned workspace (fmha_run_views.merge_counters); NULL when the plan
  // needs none, owns no workspace or the backend cannot zero memory.
  void *merge_counters = nullptr;
  int64_t merge_counters_capacity = 0;
  // Orders the runs on the owned workspace on the device (the lock orders
  // only their launches, and runs on different streams would overlap);
  // NULL when the plan owns no workspace or its backend computes before a
  // run returns.
  void *run_order = nullptr;
  // Guards `candidates` (computed on first use by the config queries).
  std::mutex tuning_lock;
  std::vector<fmha::core::Candidate> candidates;
};

namespace fmha::core {

// `problem` comes from read_versioned; its kv_seqlen_hint is the caller's
// and is read here only.
std::unique_ptr<fmha_splitk_plan_s> create_plan(const fmha_splitk_problem &problem);

// `args` come from read_versioned.
void run_plan(fmha_splitk_plan_s &plan, const fmha_splitk_args &args);

fmha_splitk_plan_info plan_info(fmha_splitk_plan_s &plan);

// Gives `plan` zeroed merge counters for `data` (data.merge_counters of
// them, kept if it has enough) where it owns a workspace and its backend
// can zero memory. Throws as plan creation does; on failure the plan keeps
// what it had.
void give_merge_counters(fmha_splitk_plan_s &plan, const fmha_plan_data &data);

// Gives `plan`, which owns a workspace, the backend's run order for it
// (once; none where the backend has no order_create). Throws as plan
// creation does; on failure the plan has none.
void give_run_order(fmha_splitk_plan_s &plan);

// Allocates a plan's own workspace of data.workspace_size bytes on
// `backend`. A checked plan's is zeroed where the backend can: its status
// may be read before any run, and must then read a clean record (not
// uninitialised memory). Throws as plan creation does, allocating nothing.
void *alloc_owned_workspace(const fmha_backend_v1 &backend, const fmha_plan_data &data);

// Plans `data` (problem, device and the expected lengths already in place)
// with the partition `choice` (waves < 0: the heuristic; receives the
// parameters used) through the core's schedule and the backend's plan().
// Throws as plan creation does.
void plan_with_choice(fmha_plan_data &data, const fmha_backend_v1 &backend,
                      const std::vector<int32_t> &kv_seqlen_hint, ScheduleChoice &choice);

// fmha_splitk_check_status: nothing to report unless the plan is checked and
// its backend records violations on the device; `workspace` NULL is the
// plan's own.
void check_plan_status(fmha_splitk_plan_s &plan, void *workspace, void *stream);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_PLAN_H_
