// Entry points of the HIP plugin (libfmha_splitk_hip.so). ROCm has no
// static runtime to link, so this file, which needs only libc, loads the
// backend proper (device_entry.h) on first use: where the ROCm runtime is
// missing, that dlopen fails and the score is 0, and the core carries on
// with its other backends as DESIGN section 3 asks.
#include <dlfcn.h>

#include <cstdint>
#include <string>

#include "backends/hip/device_entry.h"
#include "core/backend_api.h"

namespace fmha::hip {
namespace {

// An object inside this plugin, for dladdr to find the plugin's file.
const char kPluginAnchor = 0;

// The device library, opened once (the core calls score and init from one
// thread, under its registry's one-time initialisation).
class DeviceLibrary {
 public:
  DeviceLibrary() {
    Dl_info info{};
    if (dladdr(&kPluginAnchor, &info) == 0 || info.dli_fname == nullptr) return;
    const std::string plugin = info.dli_fname;
    const size_t slash = plugin.rfind('/');
    const std::string path =
        (slash == std::string::npos ? std::string() : plugin.substr(0, slash + 1)) + FMHA_HIP_DEVICE_LIBRARY;
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return;
    score_ = reinterpret_cast<fmha_backend_score_fn>(dlsym(handle, FMHA_HIP_DEVICE_SCORE));
    init_ = reinterpret_cast<fmha_backend_init_v1_fn>(dlsym(handle, FMHA_HIP_DEVICE_INIT));
    if (score_ == nullptr || init_ == nullptr) {
      // Not this build's device library: none of its entry points has run.
      dlclose(handle);
      score_ = nullptr;
      init_ = nullptr;
    }
  }
  // Once its score has run, the device library stays mapped even when the
  // core unloads this plugin (score 0): the HIP runtime it started may have
  // threads and exit handlers, as a plugin whose init ran may.
  DeviceLibrary(const DeviceLibrary &) = delete;
  DeviceLibrary &operator=(const DeviceLibrary &) = delete;

  int32_t score() const { return score_ != nullptr ? score_() : 0; }
  const fmha_backend_v1 *init(uint32_t core_api_version) const {
    return init_ != nullptr ? init_(core_api_version) : nullptr;
  }

 private:
  fmha_backend_score_fn score_ = nullptr;
  fmha_backend_init_v1_fn init_ = nullptr;
};

DeviceLibrary &device_library() {
  static DeviceLibrary library;
  return library;
}

}  // namespace
}  // namespace fmha::hip

#define FMHA_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

// 0 without the ROCm runtime (the device library does not load), without an
// AMD GPU (hipGetDeviceCount fails with hipErrorNoDevice) or without a GPU
// of an architecture this build has code for; else the device library's
// score.
FMHA_PLUGIN_EXPORT int32_t fmha_backend_score(void) { return fmha::hip::device_library().score(); }

FMHA_PLUGIN_EXPORT const fmha_backend_v1 *fmha_backend_init_v1(uint32_t core_api_version) {
  return fmha::hip::device_library().init(core_api_version);
}
