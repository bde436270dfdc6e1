// Status strings and the thread-local last-error message.
#include <string>

#include "api/api_guard.h"

namespace fmha::api {

namespace {

thread_local std::string last_error;

}  // namespace

fmha_status fail(fmha_status status, const char *message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();  // no memory for the text: the status still says what happened
  }
  return status;
}

fmha_status succeed() noexcept {
  last_error.clear();
  return FMHA_STATUS_SUCCESS;
}

fmha_status internal_error(const char *what) noexcept {
  try {
    return fail(FMHA_STATUS_INTERNAL_ERROR, ("internal error (please report): " + std::string(what)).c_str());
  } catch (...) {
    return fail(FMHA_STATUS_INTERNAL_ERROR, what);
  }
}

}  // namespace fmha::api

// Neither query below touches the last error, so that a caller can print
// fmha_status_string(status) and fmha_last_error_message() in any order.

const char *fmha_status_string(fmha_status status) {
  switch (status) {
    case FMHA_STATUS_SUCCESS:
      return "success";
    case FMHA_STATUS_INVALID_ARGUMENT:
      return "invalid argument";
    case FMHA_STATUS_NOT_SUPPORTED:
      return "not supported";
    case FMHA_STATUS_BACKEND_UNAVAILABLE:
      return "backend unavailable";
    case FMHA_STATUS_INSUFFICIENT_WORKSPACE:
      return "insufficient workspace";
    case FMHA_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case FMHA_STATUS_DEVICE_ERROR:
      return "device error";
    case FMHA_STATUS_INTERNAL_ERROR:
      return "internal error";
  }
  return "unknown status";
}

const char *fmha_last_error_message(void) { return fmha::api::last_error.c_str(); }
