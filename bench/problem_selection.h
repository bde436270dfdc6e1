// Which problems `bench` and `tune` run: those of a grid file (--problems,
// --only), or for `tune` a model preset's shape at several batches and
// lengths (--preset, --batches, --lengths).
#ifndef FMHA_SPLITK_BENCH_PROBLEM_SELECTION_H_
#define FMHA_SPLITK_BENCH_PROBLEM_SELECTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "options.h"
#include "presets.h"
#include "problem_grid.h"

namespace fmha_cli {

// Defaults of --batches and --lengths: decode steps from one sequence to a
// full serving batch, at a short and a long context.
inline const std::vector<int64_t> kPresetBatches = {1, 8, 32, 128};
inline const std::vector<int64_t> kPresetLengths = {4096, 32768};

struct ProblemSelection {
  std::string source;                 // the grid file, or "preset NAME": for messages
  std::vector<GridProblem> problems;  // every problem of the source: what equal_to lengths resolve against
  std::vector<GridProblem> selected;  // those to run, in the source's order
};

// The selection the options ask for: --preset NAME (with --batches and
// --lengths) if given, else the grid file --problems (default
// bench/problems.txt, from the current directory); either narrowed by
// --only NAME,... Throws UsageError for a bad combination, a missing grid
// file, an --only name the source lacks or nothing to run;
// std::runtime_error for a malformed grid file.
ProblemSelection select_problems(const Options &options);

// The preset's shape (Q, K, V and O bf16) at every (batch, kv_len) of
// `batches` x `lengths`, in that order, dense with uniform lengths, named
// "<preset>_b<B>_l<L>" (a repeated pair once).
std::vector<GridProblem> preset_problems(const Preset &preset, const std::vector<int64_t> &batches,
                                         const std::vector<int64_t> &lengths);

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_PROBLEM_SELECTION_H_
