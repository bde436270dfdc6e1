// fmha_merge() and fmha_merge_backward() inside the core: every tensor is
// checked and canonicalised (fmha_merge_views / fmha_merge_backward_views)
// and the backend is chosen by the tensors' device type.
#ifndef FMHA_SPLITK_CORE_MERGE_H_
#define FMHA_SPLITK_CORE_MERGE_H_

#include "core/backend_api.h"

namespace fmha::core {

// `args` come from read_versioned. Throw INVALID_ARGUMENT,
// BACKEND_UNAVAILABLE or the backend's status.
void merge(const fmha_merge_args &args);
void merge_backward(const fmha_merge_backward_args &args);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_MERGE_H_
