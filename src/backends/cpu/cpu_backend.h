// The built-in CPU backend: the reference every GPU backend is tested
// beside, and the fallback when no GPU is present. Registered by the core
// directly (no dlopen), through the same table the plugins return.
#ifndef FMHA_SPLITK_BACKENDS_CPU_CPU_BACKEND_H_
#define FMHA_SPLITK_BACKENDS_CPU_CPU_BACKEND_H_

#include "core/backend_api.h"

namespace fmha::cpu {

// The CPU backend's table (static storage; never NULL). Its device count is
// 1; its worker count is the thread pool's size (FMHA_SPLITK_NUM_THREADS, or
// std::thread::hardware_concurrency()).
const fmha_backend_v1 *backend_table();

}  // namespace fmha::cpu

#endif  // FMHA_SPLITK_BACKENDS_CPU_CPU_BACKEND_H_
