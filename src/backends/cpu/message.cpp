// Error text of the CPU backend (see message.h).
#include "backends/cpu/message.h"

#include <cstdarg>
#include <cstdio>

namespace fmha::cpu {

fmha_status fail(fmha_msg msg, fmha_status status, const char *format, ...) {
  if (msg.text == nullptr || msg.capacity == 0) return status;
  va_list arguments;
  va_start(arguments, format);
  // A negative result (encoding error) leaves no usable text.
  if (std::vsnprintf(msg.text, msg.capacity, format, arguments) < 0) msg.text[0] = '\0';
  va_end(arguments);
  return status;
}

}  // namespace fmha::cpu
