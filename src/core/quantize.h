// fmha_quantize_kv() inside the core: packs float K/V (or Q) on the host into
// the int4 and fp8 formats of DESIGN 5.6, so that callers and tests do not
// pack bits by hand. Host memory only: a GPU tensor is NOT_SUPPORTED.
#ifndef FMHA_SPLITK_CORE_QUANTIZE_H_
#define FMHA_SPLITK_CORE_QUANTIZE_H_

#include <cstddef>

#include "core/versioned_struct.h"
#include "fmha_splitk/fmha_splitk.h"

namespace fmha::core {

// fmha_quantize_kv_args is versioned like the other public structs; its
// first version ends at reserved0.
template <>
struct StructVersion<fmha_quantize_kv_args> {
  static constexpr const char *name = "fmha_quantize_kv_args";
  static constexpr size_t first_size =
      offsetof(fmha_quantize_kv_args, reserved0) + sizeof(fmha_quantize_kv_args::reserved0);
};

#if UINTPTR_MAX == UINT64_MAX
static_assert(sizeof(fmha_quantize_kv_args) == 56, "fmha_quantize_kv_args layout changed");
#endif

// `args` come from read_versioned. Validates every argument (INVALID_ARGUMENT
// or NOT_SUPPORTED, before anything is written), then writes dst and scale.
void quantize_kv(const fmha_quantize_kv_args &args);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_QUANTIZE_H_
