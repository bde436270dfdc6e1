// The guard around every exported function: no exception crosses the C
// boundary, each failure becomes a status plus this thread's last-error
// message, and success clears the message.
//
//   fmha_status fmha_something(...) {
//     FMHA_API_BEGIN
//     ...
//     return fmha::api::succeed();
//     FMHA_API_END
//   }
#ifndef FMHA_SPLITK_API_API_GUARD_H_
#define FMHA_SPLITK_API_API_GUARD_H_

#include <exception>
#include <new>

#include "core/error.h"
#include "fmha_splitk/fmha_splitk.h"

namespace fmha::api {

// Records `message` as this thread's last error; returns `status`.
fmha_status fail(fmha_status status, const char *message) noexcept;
// Clears this thread's last error; returns SUCCESS.
fmha_status succeed() noexcept;
// The internal-error status, with the exception's text.
fmha_status internal_error(const char *what) noexcept;

}  // namespace fmha::api

#define FMHA_API_BEGIN try {
#define FMHA_API_END                                                         \
  }                                                                          \
  catch (const fmha::core::Error &error) {                                   \
    return fmha::api::fail(error.status(), error.what());                    \
  }                                                                          \
  catch (const std::bad_alloc &) {                                           \
    return fmha::api::fail(FMHA_STATUS_OUT_OF_MEMORY, "out of host memory"); \
  }                                                                          \
  catch (const std::exception &error) {                                      \
    return fmha::api::internal_error(error.what());                          \
  }                                                                          \
  catch (...) {                                                              \
    return fmha::api::internal_error("unknown exception");                   \
  }

#endif  // FMHA_SPLITK_API_API_GUARD_H_
