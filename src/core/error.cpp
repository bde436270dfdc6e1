#include "core/error.h"

namespace fmha::core {

void check_backend(fmha_status status, BackendMessage &message, const char *backend_name, const char *operation) {
  if (status == FMHA_STATUS_SUCCESS) return;
  std::string text = message.text();
  if (text.empty()) text = cat("failed with status ", static_cast<int>(status));
  // A status this build does not know is the backend's bug, not the caller's.
  const bool known = status > FMHA_STATUS_SUCCESS && status <= FMHA_STATUS_INTERNAL_ERROR;
  fail(known ? status : FMHA_STATUS_INTERNAL_ERROR, cat(backend_name, " backend: ", operation, ": ", text));
}

}  // namespace fmha::core
