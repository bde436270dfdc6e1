// The C entry points of autotuning and the tuning cache.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "api/api_guard.h"
#include "core/plan.h"
#include "core/tuning.h"
#include "core/versioned_struct.h"

using fmha::core::cat;
using fmha::core::invalid;

fmha_status fmha_splitk_plan_config_count(fmha_splitk_plan_t plan, int32_t *count) {
  FMHA_API_BEGIN
  if (plan == nullptr) invalid("plan is NULL");
  if (count == nullptr) invalid("count is NULL");
  std::lock_guard<std::mutex> lock(plan->tuning_lock);
  *count = static_cast<int32_t>(fmha::core::plan_candidates(*plan).size());
  return fmha::api::succeed();
  FMHA_API_END
}

fmha_status fmha_splitk_get_plan_config(fmha_splitk_plan_t plan, int32_t index, fmha_splitk_config *config) {
  FMHA_API_BEGIN
  if (plan == nullptr) invalid("plan is NULL");
  if (config == nullptr) invalid("config is NULL");
  const size_t struct_size = config->struct_size;
  fmha::core::check_first_version_size<fmha_splitk_config>(struct_size, "config");
  std::lock_guard<std::mutex> lock(plan->tuning_lock);
  fmha::core::write_versioned(config, struct_size, fmha::core::candidate_config(*plan, index));
  return fmha::api::succeed();
  FMHA_API_END
}

fmha_status fmha_splitk_autotune(fmha_splitk_plan_t plan, const fmha_splitk_args *args,
                                 const fmha_splitk_autotune_options *options) {
  FMHA_API_BEGIN
  if (plan == nullptr) invalid("plan is NULL");
  const fmha_splitk_args args_copy = fmha::core::read_versioned(args, "args");
  fmha_splitk_autotune_options options_copy = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  if (options != nullptr) options_copy = fmha::core::read_versioned(options, "options");
  fmha::core::autotune(*plan, args_copy, options_copy);
  return fmha::api::succeed();
  FMHA_API_END
}

fmha_status fmha_tuning_cache_save(void *buffer, size_t capacity, size_t *size) {
  FMHA_API_BEGIN
  if (size == nullptr) invalid("size is NULL (it receives the bytes the cache needs)");
  if (buffer == nullptr && capacity > 0) invalid(cat("buffer is NULL with capacity = ", capacity));
  const std::vector<uint8_t> bytes = fmha::core::TuningCache::instance().save();
  *size = bytes.size();
  if (buffer == nullptr) return fmha::api::succeed();
  if (capacity < bytes.size())
    invalid(cat("capacity = ", capacity, " is smaller than the ", bytes.size(), " bytes the tuning cache needs"));
  std::memcpy(buffer, bytes.data(), bytes.size());
  return fmha::api::succeed();
  FMHA_API_END
}

fmha_status fmha_tuning_cache_load(const void *buffer, size_t size) {
  FMHA_API_BEGIN
  if (buffer == nullptr && size > 0) invalid(cat("buffer is NULL with size = ", size));
  static const uint8_t kNothing = 0;
  fmha::core::TuningCache::instance().load(buffer != nullptr ? static_cast<const uint8_t *>(buffer) : &kNothing,
                                           size);
  return fmha::api::succeed();
  FMHA_API_END
}

namespace {

// Closes the file on every exit.
struct File {
  std::FILE *handle;
  ~File() {
    if (handle != nullptr) std::fclose(handle);
  }
};

}  // namespace

fmha_status fmha_tuning_cache_save_file(const char *path) {
  FMHA_API_BEGIN
  if (path == nullptr) invalid("path is NULL");
  const std::vector<uint8_t> bytes = fmha::core::TuningCache::instance().save();
  File file{std::fopen(path, "wb")};
  if (file.handle == nullptr) invalid(cat("path = \"", path, "\": cannot create the file: ", std::strerror(errno)));
  if (std::fwrite(bytes.data(), 1, bytes.size(), file.handle) != bytes.size())
    invalid(cat("path = \"", path, "\": writing failed: ", std::strerror(errno)));
  const int closed = std::fclose(file.handle);
  file.handle = nullptr;
  if (closed != 0) invalid(cat("path = \"", path, "\": writing failed: ", std::strerror(errno)));
  return fmha::api::succeed();
  FMHA_API_END
}

fmha_status fmha_tuning_cache_load_file(const char *path) {
  FMHA_API_BEGIN
  if (path == nullptr) invalid("path is NULL");
  File file{std::fopen(path, "rb")};
  if (file.handle == nullptr) invalid(cat("path = \"", path, "\": cannot open the file: ", std::strerror(errno)));
  std::vector<uint8_t> bytes;
  uint8_t chunk[65536];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof(chunk), file.handle)) > 0) bytes.insert(bytes.end(), chunk, chunk + got);
  if (std::ferror(file.handle)) invalid(cat("path = \"", path, "\": reading failed: ", std::strerror(errno)));
  static const uint8_t kNothing = 0;
  fmha::core::TuningCache::instance().load(bytes.empty() ? &kNothing : bytes.data(), bytes.size());
  return fmha::api::succeed();
  FMHA_API_END
}

fmha_status fmha_tuning_cache_entries(size_t *entries) {
  FMHA_API_BEGIN
  if (entries == nullptr) invalid("entries is NULL");
  *entries = fmha::core::TuningCache::instance().entries();
  return fmha::api::succeed();
  FMHA_API_END
}

void fmha_tuning_cache_clear(void) { fmha::core::TuningCache::instance().clear(); }
