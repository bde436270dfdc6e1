// 64-bit size arithmetic that refuses to overflow: byte counts and offsets
// of caller-described tensors are checked rather than trusted (DESIGN 5.10).
#ifndef FMHA_SPLITK_CORE_CHECKED_INT_H_
#define FMHA_SPLITK_CORE_CHECKED_INT_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace fmha::core {

// The product of non-negative factors; INVALID_ARGUMENT "<what> overflows
// int64" when it does not fit.
inline int64_t checked_product(std::initializer_list<int64_t> factors, const char *what) {
  int64_t product = 1;
  for (int64_t factor : factors)
    if (__builtin_mul_overflow(product, factor, &product)) invalid(cat(what, " overflows int64"));
  return product;
}

inline int64_t checked_sum(int64_t a, int64_t b, const char *what) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) invalid(cat(what, " overflows int64"));
  return sum;
}

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_CHECKED_INT_H_
