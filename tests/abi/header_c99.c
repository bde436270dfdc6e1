/*
 * The public header compiled as strict C99 (-std=c99 -Wall -Wextra -pedantic
 * -Werror) the way a C user writes against it: it comes first (so it
 * includes what it needs), every INIT macro is used, and every function is
 * assigned to a pointer of its documented type, so a changed signature or a
 * macro that warns fails the build.
 */
#include <fmha_splitk/fmha_splitk.h>

void fmha_abi_header_c99(void);

void fmha_abi_header_c99(void) {
  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  fmha_splitk_plan_info plan_info = FMHA_SPLITK_PLAN_INFO_INIT;
  fmha_merge_args merge_args = FMHA_MERGE_ARGS_INIT;
  fmha_merge_backward_args merge_backward_args = FMHA_MERGE_BACKWARD_ARGS_INIT;
  fmha_backend_info backend_info = FMHA_BACKEND_INFO_INIT;
  fmha_quantize_kv_args quantize_kv_args = FMHA_QUANTIZE_KV_ARGS_INIT;

  fmha_status (*get_backends)(fmha_backend_info *, size_t, size_t *) = fmha_get_backends;
  const char *(*status_string)(fmha_status) = fmha_status_string;
  const char *(*last_error_message)(void) = fmha_last_error_message;
  const char *(*version)(void) = fmha_version;
  int32_t (*version_code)(void) = fmha_version_code;
  fmha_status (*create_plan)(const fmha_splitk_problem *, fmha_splitk_plan_t *) = fmha_splitk_create_plan;
  void (*destroy_plan)(fmha_splitk_plan_t) = fmha_splitk_destroy_plan;
  fmha_status (*workspace_size)(fmha_splitk_plan_t, size_t *) = fmha_splitk_plan_workspace_size;
  fmha_status (*get_plan_info)(fmha_splitk_plan_t, fmha_splitk_plan_info *) = fmha_splitk_get_plan_info;
  fmha_status (*run)(fmha_splitk_plan_t, const fmha_splitk_args *) = fmha_splitk_run;
  fmha_status (*check_status)(fmha_splitk_plan_t, void *, void *) = fmha_splitk_check_status;
  fmha_status (*merge)(const fmha_merge_args *) = fmha_merge;
  fmha_status (*merge_backward)(const fmha_merge_backward_args *) = fmha_merge_backward;
  fmha_status (*quantize_kv)(const fmha_quantize_kv_args *) = fmha_quantize_kv;

  (void)problem;
  (void)args;
  (void)plan_info;
  (void)merge_args;
  (void)merge_backward_args;
  (void)backend_info;
  (void)quantize_kv_args;
  (void)get_backends;
  (void)status_string;
  (void)last_error_message;
  (void)version;
  (void)version_code;
  (void)create_plan;
  (void)destroy_plan;
  (void)workspace_size;
  (void)get_plan_info;
  (void)check_status;
  (void)run;
  (void)merge;
  (void)merge_backward;
  (void)quantize_kv;
}
