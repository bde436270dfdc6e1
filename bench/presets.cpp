#include "presets.h"

namespace fmha_cli {

const std::vector<Preset> &presets() {
  static const std::vector<Preset> all = {
      {"llama3-8b-decode", "Llama 3 8B: GQA, 32 query heads over 8 K/V heads", 32, 8, 128, 1, FMHA_DTYPE_BF16},
      {"llama3-70b-decode", "Llama 3 70B: GQA, 64 query heads over 8 K/V heads", 64, 8, 128, 1, FMHA_DTYPE_BF16},
      {"mqa-decode", "multi-query: 32 query heads share one K/V head", 32, 1, 128, 1, FMHA_DTYPE_BF16},
      {"mha-decode", "multi-head: 32 query heads, 32 K/V heads", 32, 32, 128, 1, FMHA_DTYPE_BF16},
      {"gemma2-9b-decode", "Gemma 2 9B: 16 query heads over 8 K/V heads, head dim 256", 16, 8, 256, 1,
       FMHA_DTYPE_BF16},
      {"gpt-oss-120b-decode", "gpt-oss-120b: 64 query heads over 8 K/V heads, head dim 64", 64, 8, 64, 1,
       FMHA_DTYPE_BF16},
  };
  return all;
}

const Preset *find_preset(const std::string &name) {
  for (const Preset &preset : presets()) {
    if (name == preset.name) return &preset;
  }
  return nullptr;
}

}  // namespace fmha_cli
