// Autotuning (fmha_splitk_autotune) and the process-wide tuning cache.
//
// A plan's candidates are the BALANCED partitions the heuristic could have
// chosen: every (waves, min_piece) of a small grid, re-planned by the core
// and the backend, with those that behave alike for the expected lengths
// (same ranges, same effective ranges) dropped; the heuristic's own choice
// is candidate 0. Schedules the problem fixes have that one candidate only.
//
// The cache maps a TuningKey (device identity and problem class, see
// make_tuning_key) to the winning ScheduleChoice. Its byte form, all
// little-endian:
//   "FMHATUNE" | u32 format | u32 library version code | u32 entries |
//   u32 key fields | entries (key fields x i32, device name 96 bytes,
//   i32 waves, i32 min_piece, f32 tuned time, f32 heuristic time; waves -1
//   with min_piece 0: the heuristic's own partition won) |
//   u64 FNV-1a of every byte before it.
#ifndef FMHA_SPLITK_CORE_TUNING_H_
#define FMHA_SPLITK_CORE_TUNING_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/backend_api.h"
#include "core/schedule.h"

struct fmha_splitk_plan_s;

namespace fmha::core {

// One configuration of a plan and what the last autotune measured for it.
struct Candidate {
  fmha_plan_data data;
  ScheduleChoice choice;
  int32_t tune_state = FMHA_TUNE_UNTIMED;
  double time_us = -1;
  double error_ratio = -1;
};

// The device identity and problem class a tuned winner applies to.
struct TuningKey {
  static constexpr int kFields = 31;
  std::array<int32_t, kFields> fields{};
  std::array<char, 96> device_name{};
  bool operator<(const TuningKey &other) const {
    return fields != other.fields ? fields < other.fields : device_name < other.device_name;
  }
  bool operator==(const TuningKey &other) const {
    return fields == other.fields && device_name == other.device_name;
  }
};

struct TunedEntry {
  ScheduleChoice choice;
  float time_us = 0;
  float heuristic_time_us = 0;
};

// The class of a plan (its problem with defaults resolved, its device, and
// the expected lengths: the hint, or max_kv_seqlen for every sequence):
// backend, device, dtypes, quantisation, head dims, layouts, page size,
// mask, bias, sinks, soft-capping, the flags that change the kernel, Mq,
// groups, heads, and power-of-two buckets of the batch and the mean length.
TuningKey make_tuning_key(const fmha_plan_data &plan, const std::vector<int32_t> &kv_seqlen_hint);

// Thread-safe process-wide cache.
class TuningCache {
 public:
  static TuningCache &instance();
  std::optional<TunedEntry> find(const TuningKey &key) const;
  void store(const TuningKey &key, const TunedEntry &entry);
  std::vector<uint8_t> save() const;
  // All or nothing; throws INVALID_ARGUMENT (corrupt) or NOT_SUPPORTED
  // (other library version, absent device).
  void load(const uint8_t *bytes, size_t size);
  size_t entries() const;
  void clear();
};

// Plan-time use of the cache: the winner stored for the plan's class, if
// its schedule can take one.
std::optional<ScheduleChoice> cached_choice(const fmha_plan_data &plan, const std::vector<int32_t> &kv_seqlen_hint);

// The plan's candidates (computed on first use; plan.tuning_lock held by
// the caller).
std::vector<Candidate> &plan_candidates(fmha_splitk_plan_s &plan);

// Index of the candidate the plan runs now (plan.tuning_lock held).
int32_t selected_candidate(fmha_splitk_plan_s &plan);

fmha_splitk_config candidate_config(fmha_splitk_plan_s &plan, int32_t index);

void autotune(fmha_splitk_plan_s &plan, const fmha_splitk_args &args, const fmha_splitk_autotune_options &options);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_TUNING_H_
