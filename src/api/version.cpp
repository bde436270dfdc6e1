// The library's version, from VERSION through the build's compile
// definitions (src/CMakeLists.txt).
#include "fmha_splitk/fmha_splitk.h"

const char *fmha_version(void) { return FMHA_SPLITK_VERSION_STRING; }

int32_t fmha_version_code(void) {
  return FMHA_SPLITK_BUILD_VERSION_MAJOR * 10000 + FMHA_SPLITK_BUILD_VERSION_MINOR * 100 +
         FMHA_SPLITK_BUILD_VERSION_PATCH;
}
