// Error text of the CPU backend, written into the core's message buffer.
#ifndef FMHA_SPLITK_BACKENDS_CPU_MESSAGE_H_
#define FMHA_SPLITK_BACKENDS_CPU_MESSAGE_H_

#include "core/backend_api.h"

namespace fmha::cpu {

// Formats (printf-style) into msg, truncating to its capacity, and returns
// `status` so that failures read `return fail(msg, STATUS, "...", ...)`.
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
fmha_status
fail(fmha_msg msg, fmha_status status, const char *format, ...);

}  // namespace fmha::cpu

#endif  // FMHA_SPLITK_BACKENDS_CPU_MESSAGE_H_
