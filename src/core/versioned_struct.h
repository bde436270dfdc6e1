// Reading and writing the public structs that start with struct_size
// (libbpf / ONNX Runtime rules): the library reads only the bytes inside the
// caller's struct_size, accepts a newer caller's larger struct when the bytes
// this build does not know are zero, and writes output structs only up to
// the caller's struct_size.
#ifndef FMHA_SPLITK_CORE_VERSIONED_STRUCT_H_
#define FMHA_SPLITK_CORE_VERSIONED_STRUCT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "fmha_splitk/fmha_splitk.h"

namespace fmha::core {

// Per struct: its C name, and the size of its first version (up to and
// including the last field of version 1; fields appended later lie beyond),
// the smallest struct_size accepted.
template <class T>
struct StructVersion;

#define FMHA_STRUCT_VERSION(type, last_v1_field)                                                      \
  template <>                                                                                         \
  struct StructVersion<type> {                                                                        \
    static constexpr const char *name = #type;                                                        \
    static constexpr size_t first_size = offsetof(type, last_v1_field) + sizeof(type::last_v1_field); \
  }

FMHA_STRUCT_VERSION(fmha_splitk_problem, max_pages_per_seq);
FMHA_STRUCT_VERSION(fmha_splitk_args, stream);
FMHA_STRUCT_VERSION(fmha_splitk_plan_info, device_name);
FMHA_STRUCT_VERSION(fmha_splitk_config, name);
FMHA_STRUCT_VERSION(fmha_splitk_autotune_options, reserved0);
FMHA_STRUCT_VERSION(fmha_merge_args, stream);
FMHA_STRUCT_VERSION(fmha_merge_backward_args, stream);
FMHA_STRUCT_VERSION(fmha_backend_info, device_name);

#undef FMHA_STRUCT_VERSION

// Pinned sizes on LP64 (as ONNX Runtime pins its structs): a change to a
// public struct's size fails the build here instead of breaking callers
// silently; an append updates its number on purpose.
#if UINTPTR_MAX == UINT64_MAX
static_assert(sizeof(fmha_splitk_problem) == 176, "fmha_splitk_problem layout changed");
static_assert(sizeof(fmha_splitk_args) == 184, "fmha_splitk_args layout changed");
static_assert(sizeof(fmha_splitk_plan_info) == 256, "fmha_splitk_plan_info layout changed");
static_assert(sizeof(fmha_splitk_config) == 160, "fmha_splitk_config layout changed");
static_assert(sizeof(fmha_splitk_autotune_options) == 32, "fmha_splitk_autotune_options layout changed");
static_assert(sizeof(fmha_merge_args) == 72, "fmha_merge_args layout changed");
static_assert(sizeof(fmha_merge_backward_args) == 120, "fmha_merge_backward_args layout changed");
static_assert(sizeof(fmha_backend_info) == 904, "fmha_backend_info layout changed");
#endif

// Checks that `struct_size` covers at least the first version of T;
// `argument` names the struct in messages ("problem", "infos[2]"). Enough
// for an output struct, whose trailing bytes are the caller's.
template <class T>
void check_first_version_size(size_t struct_size, const char *argument) {
  if (struct_size < StructVersion<T>::first_size)
    invalid(cat(argument, ".struct_size = ", struct_size, " is smaller than ", StructVersion<T>::first_size,
                ", the size of the first version of ", StructVersion<T>::name,
                " (initialise it with its *_INIT macro)"));
}

// Checks an input struct of type T at `bytes`: its first version is there
// and the bytes past what this build knows are zero.
template <class T>
void check_struct_size(const void *bytes, size_t struct_size, const char *argument) {
  check_first_version_size<T>(struct_size, argument);
  const auto *tail = static_cast<const unsigned char *>(bytes);
  for (size_t offset = sizeof(T); offset < struct_size; ++offset)
    if (tail[offset] != 0)
      invalid(cat(argument, ".struct_size = ", struct_size, " has unknown nonzero fields: byte ", offset,
                  " is nonzero, but this library knows only the first ", sizeof(T), " bytes of ",
                  StructVersion<T>::name));
}

// A copy of the caller's input struct: the known bytes inside its
// struct_size, zero (default) beyond; struct_size set to this build's size.
template <class T>
T read_versioned(const T *user, const char *argument) {
  if (user == nullptr) invalid(cat(argument, " is NULL"));
  check_struct_size<T>(user, user->struct_size, argument);
  T copy;
  std::memset(&copy, 0, sizeof(copy));
  std::memcpy(&copy, user, std::min(user->struct_size, sizeof(T)));
  copy.struct_size = sizeof(T);
  return copy;
}

// Writes `value` into a caller's output struct at `destination` whose
// struct_size passed check_first_version_size: min(struct_size, sizeof(T))
// bytes, struct_size itself left as the caller set it.
template <class T>
void write_versioned(void *destination, size_t struct_size, T value) {
  value.struct_size = struct_size;
  std::memcpy(destination, &value, std::min(struct_size, sizeof(T)));
}

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_VERSIONED_STRUCT_H_
