// The C entry point of the quantisation helper.
#include "api/api_guard.h"
#include "core/quantize.h"

fmha_status fmha_quantize_kv(const fmha_quantize_kv_args *args) {
  FMHA_API_BEGIN
  fmha::core::quantize_kv(fmha::core::read_versioned(args, "args"));
  return fmha::api::succeed();
  FMHA_API_END
}
