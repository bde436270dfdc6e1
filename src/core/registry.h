// The backend registry: the built-in CPU backend plus the best plugin of
// each GPU kind, loaded once per process on first use (thread safe), and the
// rules that pick the backend of a plan or a merge.
#ifndef FMHA_SPLITK_CORE_REGISTRY_H_
#define FMHA_SPLITK_CORE_REGISTRY_H_

#include <array>
#include <string>
#include <vector>

#include "core/backend_candidate.h"

namespace fmha::core {

// A backend and the device a plan or merge uses on it.
struct BackendChoice {
  const BackendCandidate *backend;
  int32_t device_id;
};

class Registry {
 public:
  // Loads on the first call. Never destroyed: plugins stay loaded until the
  // process exits, so no exit-time teardown can race a GPU runtime's own.
  static const Registry &instance();

  // Every candidate considered: the CPU backend first, then plugin files in
  // search order.
  const std::vector<BackendCandidate> &candidates() const { return candidates_; }

  // The backend of a plan: `requested` is problem.backend (AUTO consults
  // FMHA_SPLITK_BACKEND, then prefers CUDA, HIP, CPU in that order);
  // `device_id` is problem.device_id (ignored, i.e. 0, on the CPU). Throws
  // INVALID_ARGUMENT (bad FMHA_SPLITK_BACKEND, device id out of range) or
  // BACKEND_UNAVAILABLE with the registry's reasons.
  BackendChoice select(int32_t requested, int32_t device_id) const;

  // The backend for tensors on `device` (`tensor` names one in messages).
  BackendChoice for_device(DLDevice device, const char *tensor) const;

 private:
  Registry();
  const BackendCandidate *usable(int32_t kind) const;
  std::string why_unavailable(int32_t kind) const;
  BackendChoice choose_device(const BackendCandidate &backend, int32_t device_id, const std::string &what) const;

  std::vector<BackendCandidate> candidates_;
  // Index into candidates_ of the backend used for each fmha_backend_kind,
  // or -1.
  std::array<int, 4> chosen_ = {-1, -1, -1, -1};
  std::string searched_;
};

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_REGISTRY_H_
