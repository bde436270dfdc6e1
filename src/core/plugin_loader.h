// Finding and loading GPU backend plugins (ggml-backend-dl style): shared
// objects named libfmha_splitk_<name>.so in the core library's own
// directory (the build tree's layout), then in its fmha_splitk/
// subdirectory (the install tree's: lib/fmha_splitk/), then in each
// directory of FMHA_SPLITK_PLUGIN_PATH.
#ifndef FMHA_SPLITK_CORE_PLUGIN_LOADER_H_
#define FMHA_SPLITK_CORE_PLUGIN_LOADER_H_

#include <string>
#include <vector>

#include "core/backend_candidate.h"

namespace fmha::core {

struct PluginSearch {
  // Plugin files in search order, each once (by real path), sorted by name
  // within a directory; the core library itself is never among them.
  std::vector<std::string> files;
  // The directories searched, for messages ("/opt/lib; /x (cannot open: ...)").
  std::string searched;
};

PluginSearch find_plugins();

// dlopen(RTLD_NOW | RTLD_LOCAL), score, init and table checks. Never throws
// for a bad plugin: the candidate's reason says what failed. A plugin that
// fails before its init ran is closed again; one whose init ran stays mapped
// (it may have started threads or registered exit handlers).
BackendCandidate load_plugin(const std::string &path);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_PLUGIN_LOADER_H_
