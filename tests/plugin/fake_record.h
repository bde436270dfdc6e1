// What the working fake plugin (fake_backend.cpp) was last given, so that
// tests can check the canonical plan and views the core hands a backend.
// Tests find it with dlsym(handle, FMHA_FAKE_RECORD_SYMBOL).
#ifndef FMHA_SPLITK_TESTS_PLUGIN_FAKE_RECORD_H_
#define FMHA_SPLITK_TESTS_PLUGIN_FAKE_RECORD_H_

#include "core/backend_api.h"

#define FMHA_FAKE_RECORD_SYMBOL "fmha_fake_last_record"
#define FMHA_FAKE_MAX_PARTS 4

typedef struct fmha_fake_record {
  int32_t runs;
  int32_t merges;
  int32_t merge_backwards;
  int32_t zeroes;      /* calls of the zero entry (plan creation: merge counters) */
  size_t zeroed_bytes; /* bytes they zeroed */
  int32_t orders_created;   /* run orders created (plans owning a workspace) */
  int32_t orders_destroyed; /* ... and destroyed */
  fmha_plan_data plan;
  fmha_run_views run;
  fmha_merge_views merge;
  /* The first FMHA_FAKE_MAX_PARTS partials of the last merge. */
  fmha_view merge_o_parts[FMHA_FAKE_MAX_PARTS];
  fmha_view merge_lse_parts[FMHA_FAKE_MAX_PARTS];
} fmha_fake_record;

typedef const fmha_fake_record *(*fmha_fake_record_fn)(void);

#endif  // FMHA_SPLITK_TESTS_PLUGIN_FAKE_RECORD_H_
