// Errors inside the core: validation and backend failures throw Error, which
// the C API layer (src/api/api_guard.h) turns into a status and the
// thread-local message. Nothing here crosses the C boundary.
#ifndef FMHA_SPLITK_CORE_ERROR_H_
#define FMHA_SPLITK_CORE_ERROR_H_

#include <sstream>
#include <stdexcept>
#include <string>

#include "core/backend_api.h"

namespace fmha::core {

class Error : public std::runtime_error {
 public:
  Error(fmha_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
  fmha_status status() const { return status_; }

 private:
  fmha_status status_;
};

// Concatenates the streamed form of every part: cat("problem.batch = ", -1).
template <class... Parts>
std::string cat(const Parts &...parts) {
  std::ostringstream out;
  // Out of memory, a stream only sets badbit and the result is cut short (a
  // wrong plugin path, a truncated message): let std::bad_alloc through.
  out.exceptions(std::ios::badbit);
  (out << ... << parts);
  return out.str();
}

[[noreturn]] inline void fail(fmha_status status, const std::string &message) { throw Error(status, message); }

[[noreturn]] inline void invalid(const std::string &message) { fail(FMHA_STATUS_INVALID_ARGUMENT, message); }

// The buffer a backend writes its error text into.
class BackendMessage {
 public:
  BackendMessage() { text_[0] = '\0'; }
  BackendMessage(const BackendMessage &) = delete;
  BackendMessage &operator=(const BackendMessage &) = delete;
  fmha_msg msg() { return fmha_msg{text_, sizeof(text_)}; }
  // The text, terminated even if the backend filled the whole buffer.
  std::string text() {
    text_[sizeof(text_) - 1] = '\0';
    return text_;
  }

 private:
  char text_[1024];
};

// Throws when a backend call failed: "<backend> backend: <operation>: <text>".
void check_backend(fmha_status status, BackendMessage &message, const char *backend_name, const char *operation);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_ERROR_H_
