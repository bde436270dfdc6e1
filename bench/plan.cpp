#include "plan.h"

#include <stdexcept>

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
