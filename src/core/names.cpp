#include "core/names.h"

#include "core/error.h"

namespace fmha::core {

namespace {

template <size_t Count>
const char *lookup(const char *const (&names)[Count], int32_t value) {
  return value >= 0 && static_cast<size_t>(value) < Count ? names[value] : "unknown";
}

}  // namespace

const char *backend_kind_name(int32_t kind) {
  static const char *const names[] = {"auto", "cpu", "cuda", "hip"};
  return lookup(names, kind);
}

const char *dtype_name(int32_t dtype) {
  static const char *const names[] = {"FMHA_DTYPE_DEFAULT", "FMHA_DTYPE_F16", "FMHA_DTYPE_BF16", "FMHA_DTYPE_F32",
                                      "FMHA_DTYPE_FP8"};
  return lookup(names, dtype);
}

const char *kv_layout_name(int32_t layout) {
  static const char *const names[] = {"FMHA_KV_DENSE", "FMHA_KV_PADDED", "FMHA_KV_GAPPY", "FMHA_KV_PAGED",
                                      "FMHA_KV_RAGGED"};
  return lookup(names, layout);
}

const char *q_layout_name(int32_t layout) {
  static const char *const names[] = {"FMHA_Q_FIXED", "FMHA_Q_VARLEN"};
  return lookup(names, layout);
}

const char *kv_quant_name(int32_t quant) {
  static const char *const names[] = {"FMHA_KV_QUANT_NONE", "FMHA_KV_QUANT_INT4", "FMHA_KV_QUANT_FP8"};
  return lookup(names, quant);
}

const char *elem_name(int32_t elem) {
  static const char *const names[] = {"none", "float16", "bfloat16", "float32", "fp8", "int32", "float64"};
  return lookup(names, elem);
}

std::string dl_dtype_string(DLDataType dtype) {
  if (dtype.lanes == 1) {
    if (dtype.code == kDLFloat && dtype.bits == 16) return "float16";
    if (dtype.code == kDLFloat && dtype.bits == 32) return "float32";
    if (dtype.code == kDLFloat && dtype.bits == 64) return "float64";
    if (dtype.code == kDLBfloat && dtype.bits == 16) return "bfloat16";
    if (dtype.code == kDLInt && dtype.bits == 32) return "int32";
    if (dtype.code == kDLUInt && dtype.bits == 8) return "uint8";
    if (dtype.code == 10 && dtype.bits == 8) return "float8_e4m3fn (code 10)";
    if (dtype.code == 11 && dtype.bits == 8) return "float8_e4m3fnuz (code 11)";
  }
  return cat("code ", static_cast<int>(dtype.code), ", bits ", static_cast<int>(dtype.bits), ", lanes ",
             static_cast<int>(dtype.lanes));
}

std::string dl_device_string(DLDevice device) {
  switch (device.device_type) {
    case kDLCPU:
      return cat("cpu:", device.device_id);
    case kDLCUDA:
      return cat("cuda:", device.device_id);
    case kDLROCM:
      return cat("rocm:", device.device_id);
    default:
      return cat("device type ", static_cast<int>(device.device_type), ":", device.device_id);
  }
}

std::string shape_string(const int64_t *shape, int32_t ndim) {
  std::string text = "[";
  for (int32_t axis = 0; axis < ndim; ++axis) text += cat(axis ? ", " : "", shape[axis]);
  return text + "]";
}

}  // namespace fmha::core
