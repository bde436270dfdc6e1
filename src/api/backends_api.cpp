// The C entry point that lists the backend registry.
#include <cstring>

#include "api/api_guard.h"
#include "core/names.h"
#include "core/registry.h"
#include "core/versioned_struct.h"

namespace {

fmha_backend_info info_of(const fmha::core::BackendCandidate &candidate) {
  fmha_backend_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  info.backend = candidate.kind;
  info.available = candidate.available;
  info.score = candidate.score;
  info.device_count = candidate.device_count;
  fmha::core::copy_name(info.name, candidate.name);
  fmha::core::copy_name(info.path, candidate.path);
  fmha::core::copy_name(info.reason, candidate.reason);
  fmha::core::copy_name(info.device_name, candidate.device_name);
  return info;
}

}  // namespace

fmha_status fmha_get_backends(fmha_backend_info *infos, size_t capacity, size_t *count) {
  FMHA_API_BEGIN
  using fmha::core::cat;
  using fmha::core::invalid;
  if (count == nullptr) invalid("count is NULL");
  if (infos == nullptr && capacity > 0) invalid(cat("infos is NULL but capacity = ", capacity));
  // The caller's struct_size is the element stride, so a newer caller's
  // larger elements are walked correctly; every element must agree.
  auto *bytes = reinterpret_cast<unsigned char *>(infos);
  size_t stride = 0;
  for (size_t index = 0; index < capacity; ++index) {
    size_t struct_size = 0;
    std::memcpy(&struct_size, bytes + index * stride, sizeof(struct_size));
    if (index == 0) {
      fmha::core::check_first_version_size<fmha_backend_info>(struct_size, "infos[0]");
      stride = struct_size;
    } else if (struct_size != stride) {
      invalid(cat("infos[", index, "].struct_size = ", struct_size, " differs from infos[0].struct_size = ", stride));
    }
  }
  const auto &candidates = fmha::core::Registry::instance().candidates();
  for (size_t index = 0; index < capacity && index < candidates.size(); ++index)
    fmha::core::write_versioned(bytes + index * stride, stride, info_of(candidates[index]));
  *count = candidates.size();
  return fmha::api::succeed();
  FMHA_API_END
}
