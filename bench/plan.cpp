#include "plan.h"

#include <stdexcept>

#include "decode_problem.h"
#include "status.h"

namespace fmha_cli {

Plan create_plan(const fmha_splitk_problem &problem, const std::string &backend) {
  fmha_splitk_plan_t plan = nullptr;
  check_status(fmha_splitk_create_plan(&problem, &plan), ("plan on backend " + backend).c_str());
  return Plan(plan, fmha_splitk_destroy_plan);
}

fmha_splitk_plan_info plan_info(const Plan &plan) {
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  check_status(fmha_splitk_get_plan_info(plan.get(), &info), "fmha_splitk_get_plan_info");
  return info;
}

int32_t backend_kind(const std::string &name) {
  if (name == "cpu") return FMHA_BACKEND_CPU;
  if (name == "cuda") return FMHA_BACKEND_CUDA;
  if (name == "hip") return FMHA_BACKEND_HIP;
  return FMHA_BACKEND_AUTO;
}

fmha_splitk_plan_info probe_backend(const std::string &backend) {
  DecodeShape probe;
  probe.batch = 1;
  probe.kv_len = 1;
  probe.heads_q = 8;
  probe.heads_kv = 8;
  probe.head_dim = 128;
  return plan_info(create_plan(make_problem(probe, backend_kind(backend), 0), backend));
}

const char *config_source_name(int32_t source) {
  switch (source) {
    case FMHA_CONFIG_HEURISTIC:
      return "heuristic";
    case FMHA_CONFIG_TUNING_CACHE:
      return "tuning_cache";
    case FMHA_CONFIG_AUTOTUNE:
      return "autotune";
    default:
      return "unknown";
  }
}

size_t load_tuning_cache(const std::string &path) {
  check_status(fmha_tuning_cache_load_file(path.c_str()), ("loading the tuning cache '" + path + "'").c_str());
  size_t entries = 0;
  check_status(fmha_tuning_cache_entries(&entries), "fmha_tuning_cache_entries");
  return entries;
}

std::unique_ptr<Device> device_for(const fmha_splitk_plan_info &info) {
  switch (info.backend) {
    case FMHA_BACKEND_CPU:
      return make_host_device();
    case FMHA_BACKEND_CUDA:
      return make_cuda_device(info.device_id);
    default:
      throw std::runtime_error(std::string("fmha-splitk cannot allocate memory for the ") + info.backend_name +
                               " backend");
  }
}

}  // namespace fmha_cli
