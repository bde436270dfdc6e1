// Turns a failed library call into an exception that carries the status and
// the library's detailed message.
#ifndef FMHA_SPLITK_BENCH_STATUS_H_
#define FMHA_SPLITK_BENCH_STATUS_H_

#include <fmha_splitk/fmha_splitk.h>

#include <stdexcept>
#include <string>

namespace fmha_cli {

class LibraryError : public std::runtime_error {
 public:
  LibraryError(fmha_status status, const std::string &call)
      : std::runtime_error(call + ": " + fmha_status_string(status) + ": " + fmha_last_error_message()),
        status_(status) {}
  fmha_status status() const { return status_; }

 private:
  fmha_status status_;
};

inline void check_status(fmha_status status, const char *call) {
  if (status != FMHA_STATUS_SUCCESS) throw LibraryError(status, call);
}

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_STATUS_H_
