// Printable names of enum values, DLPack types and shapes, for error
// messages and backend listings.
#ifndef FMHA_SPLITK_CORE_NAMES_H_
#define FMHA_SPLITK_CORE_NAMES_H_

#include <cstdint>
#include <string>

#include "core/backend_api.h"

namespace fmha::core {

// "cpu", "cuda", "hip" ("auto" for AUTO, "unknown" otherwise).
const char *backend_kind_name(int32_t kind);
// "FMHA_DTYPE_F16", ... ("unknown" outside the enum).
const char *dtype_name(int32_t dtype);
const char *kv_layout_name(int32_t layout);
const char *q_layout_name(int32_t layout);
const char *kv_quant_name(int32_t quant);
// "float16", "bfloat16", "float32", "int32", "fp8", ...
const char *elem_name(int32_t elem);

// "float16", "uint8", "float8_e4m3fn (code 10)", or "code 7, bits 16, lanes 1".
std::string dl_dtype_string(DLDataType dtype);
// "cpu:0", "cuda:1", "rocm:0", or "device type 4:0".
std::string dl_device_string(DLDevice device);
// "[2, 128, 8, 64]".
std::string shape_string(const int64_t *shape, int32_t ndim);

// Copies `text` into a fixed char array of the public structs, truncated to
// fit, always NUL-terminated.
template <size_t Capacity>
void copy_name(char (&destination)[Capacity], const std::string &text) {
  const size_t length = text.size() < Capacity - 1 ? text.size() : Capacity - 1;
  text.copy(destination, length);
  destination[length] = '\0';
}

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_NAMES_H_
