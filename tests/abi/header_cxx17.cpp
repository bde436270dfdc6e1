// The public header compiled as C++17 (-Wall -Wextra -pedantic -Werror) the
// way a C++ user writes against it: it comes first and every INIT macro is
// used. (header_c99.c pins the function signatures.)
#include <fmha_splitk/fmha_splitk.h>

#include <type_traits>

// What crosses the boundary must be trivial and standard layout, so that C
// and C++ callers see the same bytes.
template <typename Struct>
constexpr bool plain_c_struct() {
  return std::is_standard_layout<Struct>::value && std::is_trivial<Struct>::value;
}
static_assert(plain_c_struct<fmha_splitk_problem>(), "fmha_splitk_problem");
static_assert(plain_c_struct<fmha_splitk_args>(), "fmha_splitk_args");
static_assert(plain_c_struct<fmha_splitk_plan_info>(), "fmha_splitk_plan_info");
static_assert(plain_c_struct<fmha_merge_args>(), "fmha_merge_args");
static_assert(plain_c_struct<fmha_merge_backward_args>(), "fmha_merge_backward_args");
static_assert(plain_c_struct<fmha_backend_info>(), "fmha_backend_info");
static_assert(plain_c_struct<fmha_quantize_kv_args>(), "fmha_quantize_kv_args");

void fmha_abi_header_cxx17();

void fmha_abi_header_cxx17() {
  const fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  const fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  const fmha_splitk_plan_info plan_info = FMHA_SPLITK_PLAN_INFO_INIT;
  const fmha_merge_args merge_args = FMHA_MERGE_ARGS_INIT;
  const fmha_merge_backward_args merge_backward_args = FMHA_MERGE_BACKWARD_ARGS_INIT;
  const fmha_backend_info backend_info = FMHA_BACKEND_INFO_INIT;
  const fmha_quantize_kv_args quantize_kv_args = FMHA_QUANTIZE_KV_ARGS_INIT;
  static_cast<void>(problem);
  static_cast<void>(args);
  static_cast<void>(plan_info);
  static_cast<void>(merge_args);
  static_cast<void>(merge_backward_args);
  static_cast<void>(backend_info);
  static_cast<void>(quantize_kv_args);
}
