// The C entry points of merges.
#include "api/api_guard.h"
#include "core/merge.h"
#include "core/versioned_struct.h"

fmha_status fmha_merge(const fmha_merge_args *args) {
  FMHA_API_BEGIN
  fmha::core::merge(fmha::core::read_versioned(args, "args"));
  return fmha::api::succeed();
  FMHA_API_END
}

fmha_status fmha_merge_backward(const fmha_merge_backward_args *args) {
  FMHA_API_BEGIN
  fmha::core::merge_backward(fmha::core::read_versioned(args, "args"));
  return fmha::api::succeed();
  FMHA_API_END
}
