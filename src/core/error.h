// Errors inside the core: validation and backend failures throw Error, which
// the C API layer (src/api/api_guard.h) turns into a status and the
// thread-local message. Nothing here crosses the C boundary.
#ifndef FMHA_SPLITK_CORE_ERROR_H_
#define FMHA_SPLITK_CORE_ERROR_H_

#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/backend_api.h"

namespace fmha::core {

class Error : public std::runtime_error {
 public:
  Error(fmha_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
  fmha_status status() const { return status_; }

 private:
  fmha_status status_;
};

namespace cat_detail {

// Parts that cat() appends without a stream: text, and integers (not bool or
// the char types, which a stream prints as words or characters), whose
// decimal form std::to_chars writes as a stream with default flags would.
template <class T>
constexpr bool kText = std::is_convertible_v<const T &, std::string_view>;
template <class T>
constexpr bool kInteger = std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char> &&
                          !std::is_same_v<T, signed char> && !std::is_same_v<T, unsigned char> &&
                          !std::is_same_v<T, wchar_t> && !std::is_same_v<T, char16_t> && !std::is_same_v<T, char32_t>;
template <class T>
constexpr bool kDirect = kText<T> || kInteger<T>;

// Enough for any 64-bit integer with its sign.
constexpr size_t kIntegerChars = 24;

template <class T>
size_t length_bound(const T &part) {
  if constexpr (std::is_convertible_v<const T &, const char *>) {
    const char *text = part;
    return text == nullptr ? 0 : std::char_traits<char>::length(text);
  } else if constexpr (kText<T>) {
    return std::string_view(part).size();
  } else {
    return kIntegerChars;
  }
}

template <class T>
void append(std::string &out, const T &part) {
  if constexpr (std::is_convertible_v<const T &, const char *>) {
    // A null pointer adds nothing (a stream would set badbit and throw).
    const char *text = part;
    if (text != nullptr) out += text;
  } else if constexpr (kText<T>) {
    out += std::string_view(part);
  } else {
    char digits[kIntegerChars];
    const std::to_chars_result end = std::to_chars(digits, digits + sizeof(digits), part);
    out.append(digits, end.ptr);
  }
}

}  // namespace cat_detail

// Concatenates the streamed form of every part: cat("problem.batch = ", -1).
// Text and integers only (the common message) skip the stream, whose
// construction (locale, facets) costs microseconds.
template <class... Parts>
std::string cat(const Parts &...parts) {
  if constexpr ((cat_detail::kDirect<Parts> && ...)) {
    std::string out;
    out.reserve((size_t{0} + ... + cat_detail::length_bound(parts)));
    (cat_detail::append(out, parts), ...);
    return out;
  } else {
    std::ostringstream out;
    // Out of memory, a stream only sets badbit and the result is cut short (a
    // wrong plugin path, a truncated message): let std::bad_alloc through.
    out.exceptions(std::ios::badbit);
    (out << ... << parts);
    return out.str();
  }
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
