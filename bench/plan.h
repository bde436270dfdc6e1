// Plans as owning handles, and the Device that serves a plan's backend: what
// every subcommand that runs problems needs.
#ifndef FMHA_SPLITK_BENCH_PLAN_H_
#define FMHA_SPLITK_BENCH_PLAN_H_

#include <fmha_splitk/fmha_splitk.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device.h"

namespace fmha_cli {

using Plan = std::unique_ptr<fmha_splitk_plan_s, void (*)(fmha_splitk_plan_t)>;

// Throws LibraryError naming `backend` when the library refuses the problem.
Plan create_plan(const fmha_splitk_problem &problem, const std::string &backend);
fmha_splitk_plan_info plan_info(const Plan &plan);

// The fmha_backend_kind of a --backend value (cpu, cuda, hip); AUTO otherwise.
int32_t backend_kind(const std::string &name);

// The plan of a plain shape (one key, 8 heads of 128; not a problem of a
// grid, which may be one the library refuses) on the --backend value
// `backend`: which backend and device serve the request, cheaply (planning
// launches nothing).
fmha_splitk_plan_info probe_backend(const std::string &backend);

// "heuristic", "tuning_cache" or "autotune": an fmha_config_source as
// reports write it.
const char *config_source_name(int32_t source);

// Adds the tuning cache saved in the file at `path` to the process's cache
// and returns its entries then; throws LibraryError naming the file.
size_t load_tuning_cache(const std::string &path);

// Memory, stream and timer for the plan's backend and device; throws for a
// backend the CLI cannot allocate for.
std::unique_ptr<Device> device_for(const fmha_splitk_plan_info &info);

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_PLAN_H_
