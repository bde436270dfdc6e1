// 64-bit size arithmetic that refuses to overflow: byte counts and offsets
// of caller-described tensors are checked rather than trusted (DESIGN 5.10).
#ifndef FMHA_SPLITK_CORE_CHECKED_INT_H_
#define FMHA_SPLITK_CORE_CHECKED_INT_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace fmha::core {

// What a checked number is, for its message: `prefix` then `subject` ("the
// size of " "args.q"), joined only when a check fails, so that the checks of
// every run build no string. Both texts must outlive the check.
struct Quantity {
  // Implicit: a literal names a quantity, as before Quantity existed.
  Quantity(const char *text) : prefix(text) {}
  Quantity(const char *prefix_text, const char *subject_text) : prefix(prefix_text), subject(subject_text) {}
  const char *prefix;
  const char *subject = "";
};

// INVALID_ARGUMENT "<what> overflows int64"; out of line of the checks.
[[noreturn, gnu::cold, gnu::noinline]] inline void overflows_int64(Quantity what) {
  invalid(cat(what.prefix, what.subject, " overflows int64"));
}

// The product of non-negative factors; INVALID_ARGUMENT "<what> overflows
// int64" when it does not fit.
inline int64_t checked_product(std::initializer_list<int64_t> factors, Quantity what) {
  int64_t product = 1;
  for (int64_t factor : factors)
    if (__builtin_mul_overflow(product, factor, &product)) overflows_int64(what);
  return product;
}

inline int64_t checked_sum(int64_t a, int64_t b, Quantity what) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) overflows_int64(what);
  return sum;
}

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_CHECKED_INT_H_
