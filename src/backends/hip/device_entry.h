// The contract between the HIP plugin's entry points (plugin.cpp, in
// libfmha_splitk_hip.so, which needs no ROCm library) and the HIP backend
// proper (device_backend.cpp, in fmha_splitk_hip_device.so, linked to the
// HIP runtime, libamdhip64). The plugin dlopens the device library from its
// own directory; the device library exports exactly these two functions,
// with the meaning of fmha_backend_score / fmha_backend_init_v1.
//
// The split keeps the DESIGN's promise for the HIP plugin: it loads, and
// scores 0, on a machine without ROCm (dlopen of the device library fails
// there), as the CUDA plugin does without a driver.
#ifndef FMHA_SPLITK_BACKENDS_HIP_DEVICE_ENTRY_H_
#define FMHA_SPLITK_BACKENDS_HIP_DEVICE_ENTRY_H_

#include <stdint.h>

#include "core/backend_api.h"

#define FMHA_HIP_DEVICE_EXPORT extern "C" __attribute__((visibility("default")))

// The device library's file name; no libfmha_splitk_ prefix, so that the
// core's plugin search never takes it for a plugin.
#define FMHA_HIP_DEVICE_LIBRARY "fmha_splitk_hip_device.so"
#define FMHA_HIP_DEVICE_SCORE "fmha_hip_device_score"
#define FMHA_HIP_DEVICE_INIT "fmha_hip_device_init_v1"

#endif  // FMHA_SPLITK_BACKENDS_HIP_DEVICE_ENTRY_H_
