// One backend the registry considered: the built-in CPU backend or a plugin
// file, with what was found out about it (for fmha_get_backends()).
#ifndef FMHA_SPLITK_CORE_BACKEND_CANDIDATE_H_
#define FMHA_SPLITK_CORE_BACKEND_CANDIDATE_H_

#include <cstdint>
#include <string>

#include "core/backend_api.h"

namespace fmha::core {

struct BackendCandidate {
  // fmha_backend_kind; AUTO while unknown (the plugin's table was not read).
  int32_t kind = FMHA_BACKEND_AUTO;
  bool available = false;
  int32_t score = 0;
  int32_t device_count = 0;
  // The table's name, or the <name> of libfmha_splitk_<name>.so before that.
  std::string name;
  // Shared object path; "" for the built-in CPU backend.
  std::string path;
  // Why it was or was not taken.
  std::string reason;
  std::string device_name;
  // The validated table (NULL when it failed its checks or was retired).
  const fmha_backend_v1 *table = nullptr;
};

// Checks a table (the api_version first: a different version may have a
// different layout) and reads its device count and device 0's name into
// `candidate`. Sets table (when valid), available (when it also has a
// usable device) and reason; `candidate.score` must be set. Returns the
// status of device_props(0) (SUCCESS when it was not called), so that a
// caller can tell a lack of memory from a backend that cannot serve.
fmha_status adopt_table(BackendCandidate &candidate, const fmha_backend_v1 *table);

// Gives up a candidate that will not be used: shuts its table down (if any)
// and records why.
void retire(BackendCandidate &candidate, const std::string &reason);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_BACKEND_CANDIDATE_H_
