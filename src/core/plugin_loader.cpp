#include "core/plugin_loader.h"

#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <set>

#include "core/error.h"

namespace fmha::core {

namespace {

constexpr char kPrefix[] = "libfmha_splitk_";
constexpr char kSuffix[] = ".so";
constexpr size_t kPrefixLength = sizeof(kPrefix) - 1;
constexpr size_t kSuffixLength = sizeof(kSuffix) - 1;
// Where `cmake --install` puts the plugins, relative to the core library.
constexpr char kInstalledPluginFolder[] = "fmha_splitk";

// An object inside the core library, for dladdr to find the library's file.
const char kCoreAnchor = 0;

bool is_plugin_name(const std::string &file) {
  return file.size() > kPrefixLength + kSuffixLength && file.compare(0, kPrefixLength, kPrefix) == 0 &&
         file.compare(file.size() - kSuffixLength, kSuffixLength, kSuffix) == 0;
}

std::string real_path(const std::string &path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

std::string dl_error_text() {
  const char *text = dlerror();
  return text != nullptr ? text : "unknown error";
}

// The core library's file, or "" when dladdr cannot say.
std::string core_library_path() {
  Dl_info info{};
  if (dladdr(&kCoreAnchor, &info) == 0 || info.dli_fname == nullptr) return "";
  return real_path(info.dli_fname);
}

// Plugin file names in `directory`, sorted; `error_number` set to the errno
// of the failure when it cannot be read (0 otherwise).
std::vector<std::string> plugin_names_in(const std::string &directory, int &error_number) {
  std::vector<std::string> names;
  error_number = 0;
  DIR *stream = opendir(directory.c_str());
  if (stream == nullptr) {
    error_number = errno;
    return names;
  }
  for (;;) {
    errno = 0;
    const dirent *entry = readdir(stream);
    if (entry == nullptr) {
      error_number = errno;
      break;
    }
    if (is_plugin_name(entry->d_name)) names.emplace_back(entry->d_name);
  }
  if (closedir(stream) != 0 && error_number == 0) error_number = errno;
  std::sort(names.begin(), names.end());
  return names;
}

struct SearchDirectory {
  std::string path;
  // The installed layout's plugin folder is absent from the build tree (and
  // from a CPU-only install): not finding it there is no error worth a note.
  bool may_be_missing;
};

std::vector<SearchDirectory> search_directories(const std::string &core_path) {
  std::vector<SearchDirectory> directories;
  const size_t slash = core_path.rfind('/');
  if (slash != std::string::npos) {
    const std::string core_directory = core_path.substr(0, slash == 0 ? 1 : slash);
    // The build tree puts plugins beside the core library; the install tree
    // keeps them out of the linker's path, in <libdir>/fmha_splitk/.
    directories.push_back({core_directory, false});
    directories.push_back({cat(slash == 0 ? "" : core_directory, "/", kInstalledPluginFolder), true});
  }
  if (const char *plugin_path = std::getenv("FMHA_SPLITK_PLUGIN_PATH")) {
    const std::string list = plugin_path;
    for (size_t begin = 0; begin <= list.size();) {
      const size_t end = std::min(list.find(':', begin), list.size());
      if (end > begin) directories.push_back({list.substr(begin, end - begin), false});
      begin = end + 1;
    }
  }
  return directories;
}

// Closes a plugin whose init has not run; a failure only adds to the reason.
void close_plugin(void *handle, BackendCandidate &candidate) {
  if (dlclose(handle) != 0) candidate.reason += cat("; dlclose failed: ", dl_error_text());
}

}  // namespace

PluginSearch find_plugins() {
  PluginSearch search;
  const std::string core_path = core_library_path();
  if (core_path.empty()) search.searched = "(the core library's directory is unknown: dladdr failed)";
  std::set<std::string> seen = {core_path};
  for (const SearchDirectory &candidate : search_directories(core_path)) {
    const std::string &directory = candidate.path;
    int error_number = 0;
    const std::vector<std::string> names = plugin_names_in(directory, error_number);
    if (candidate.may_be_missing && error_number == ENOENT) continue;
    search.searched += cat(search.searched.empty() ? "" : "; ", directory);
    if (error_number != 0) search.searched += cat(" (cannot read: ", std::strerror(error_number), ")");
    for (const std::string &name : names) {
      const std::string path = cat(directory, "/", name);
      if (seen.insert(real_path(path)).second) search.files.push_back(path);
    }
  }
  return search;
}

BackendCandidate load_plugin(const std::string &path) {
  BackendCandidate candidate;
  candidate.path = path;
  const std::string file = path.substr(path.rfind('/') + 1);
  candidate.name = file.substr(kPrefixLength, file.size() - kPrefixLength - kSuffixLength);

  dlerror();  // clear any stale error so the next dlerror() is ours
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    candidate.reason = cat("dlopen failed: ", dl_error_text());
    return candidate;
  }
  const auto score = reinterpret_cast<fmha_backend_score_fn>(dlsym(handle, "fmha_backend_score"));
  if (score == nullptr) {
    candidate.reason = cat("missing symbol fmha_backend_score: ", dl_error_text());
    close_plugin(handle, candidate);
    return candidate;
  }
  const auto init = reinterpret_cast<fmha_backend_init_v1_fn>(dlsym(handle, "fmha_backend_init_v1"));
  if (init == nullptr) {
    candidate.reason = cat("missing symbol fmha_backend_init_v1: ", dl_error_text());
    close_plugin(handle, candidate);
    return candidate;
  }
  candidate.score = std::max(score(), 0);
  if (candidate.score == 0) {
    candidate.reason = "score 0: no driver/device/arch";
    close_plugin(handle, candidate);
    return candidate;
  }
  adopt_table(candidate, init(FMHA_BACKEND_API_VERSION));
  if (candidate.kind == FMHA_BACKEND_CPU)
    retire(candidate, "kind FMHA_BACKEND_CPU: plugins serve cuda or hip (the CPU backend is built in)");
  return candidate;
}

}  // namespace fmha::core
