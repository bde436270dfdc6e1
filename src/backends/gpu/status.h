// Turning GPU runtime errors into fmha_status values with a message, for
// both vendors.
//
// Every runtime call of a GPU backend goes through FMHA_GPU_CHECK (or
// status_from) so that a failure reaches the caller as DEVICE_ERROR (or
// OUT_OF_MEMORY for a failed allocation) with the operation that failed and
// the driver's own text, e.g.
//   "cudaMemsetAsync(o) failed: cudaErrorInvalidValue (invalid argument)".
#ifndef FMHA_SPLITK_BACKENDS_GPU_STATUS_H_
#define FMHA_SPLITK_BACKENDS_GPU_STATUS_H_

#include <cstdarg>
#include <cstdio>

#include "backends/gpu/vendor.h"
#include "core/backend_api.h"

namespace fmha::gpu {

// printf-style write into the caller's message buffer (truncated to fit,
// always NUL-terminated). A buffer of capacity 0 or a NULL text is ignored.
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
inline void
write_msg(fmha_msg msg, const char *format, ...) {
  if (msg.text == nullptr || msg.capacity == 0) return;
  va_list args;
  va_start(args, format);
  std::vsnprintf(msg.text, msg.capacity, format, args);
  va_end(args);
}

// The status for `err` (SUCCESS for kSuccess); on failure writes
// "<operation> failed: <error name> (<error text>)" into msg.
//
// Non-sticky errors (bad launch configuration, invalid argument) are cleared
// so that they do not resurface in an unrelated later call of the
// application; sticky errors (e.g. an illegal address) cannot be cleared and
// leave the context unusable, which the message makes visible.
inline fmha_status status_from(Error err, const char *operation, fmha_msg msg) {
  if (err == kSuccess) return FMHA_STATUS_SUCCESS;
  (void)take_last_error();
  write_msg(msg, "%s failed: %s (%s)", operation, error_name(err), error_string(err));
  return is_out_of_memory(err) ? FMHA_STATUS_OUT_OF_MEMORY : FMHA_STATUS_DEVICE_ERROR;
}

// The status of the last kernel launch on this thread: a <<<...>>>
// expression returns nothing, its configuration errors are only reported by
// the runtime's last error.
inline fmha_status launch_status(const char *kernel, fmha_msg msg) {
  return status_from(take_last_error(), kernel, msg);
}

}  // namespace fmha::gpu

// Evaluates a runtime call returning Error; on failure writes the message
// and returns the status from the enclosing function (which must return
// fmha_status).
#define FMHA_GPU_CHECK(call, msg)                                                                             \
  do {                                                                                                        \
    const ::fmha::gpu::Error fmha_gpu_err_ = (call);                                                          \
    if (fmha_gpu_err_ != ::fmha::gpu::kSuccess) return ::fmha::gpu::status_from(fmha_gpu_err_, #call, (msg)); \
  } while (0)

// After a <<<...>>> launch: returns the launch error, if any, naming the
// kernel.
#define FMHA_GPU_CHECK_LAUNCH(kernel_name, msg)                                           \
  do {                                                                                    \
    const fmha_status fmha_launch_st_ = ::fmha::gpu::launch_status((kernel_name), (msg)); \
    if (fmha_launch_st_ != FMHA_STATUS_SUCCESS) return fmha_launch_st_;                   \
  } while (0)

#endif  // FMHA_SPLITK_BACKENDS_GPU_STATUS_H_
