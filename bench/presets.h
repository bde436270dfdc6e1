// Named attention shapes of common models at decode time, for `run`.
#ifndef FMHA_SPLITK_BENCH_PRESETS_H_
#define FMHA_SPLITK_BENCH_PRESETS_H_

#include <fmha_splitk/fmha_splitk.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fmha_cli {

struct Preset {
  const char *name;
  const char *description;
  int32_t heads_q;
  int32_t heads_kv;
  int32_t head_dim;
  int64_t q_len;
  fmha_dtype dtype;
};

const std::vector<Preset> &presets();
// NULL when there is no preset of that name.
const Preset *find_preset(const std::string &name);

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_PRESETS_H_
