#include "problem_selection.h"

#include <algorithm>
#include <fstream>
#include <set>

namespace fmha_cli {
namespace {

// The grid's own bound on a batch or a length (problem_grid.cpp).
constexpr int64_t kMaxExtent = (int64_t{1} << 31) - 1;

}  // namespace

std::vector<GridProblem> preset_problems(const Preset &preset, const std::vector<int64_t> &batches,
                                         const std::vector<int64_t> &lengths) {
  std::vector<GridProblem> problems;
  std::set<std::string> names;
  for (const int64_t batch : batches) {
    for (const int64_t length : lengths) {
      GridProblem problem;
      problem.name = std::string(preset.name) + "_b" + std::to_string(batch) + "_l" + std::to_string(length);
      problem.kind = "decode";
      problem.batch = batch;
      problem.kv_len = length;
      problem.heads_q = preset.heads_q;
      problem.heads_kv = preset.heads_kv;
      problem.head_dim = preset.head_dim;
      problem.q_len = preset.q_len;
      problem.page_size = 0;
      problem.lengths = "uniform";
      if (names.insert(problem.name).second) problems.push_back(problem);
    }
  }
  return problems;
}

ProblemSelection select_problems(const Options &options) {
  ProblemSelection selection;
  if (options.has("preset")) {
    if (options.has("problems")) throw UsageError("--preset and --problems exclude each other");
    const std::string name = options.text("preset", "");
    const Preset *preset = find_preset(name);
    if (!preset) throw UsageError("unknown preset '" + name + "' (`fmha-splitk run --help` lists them)");
    selection.source = "preset " + name;
    selection.problems = preset_problems(*preset, options.integers("batches", kPresetBatches, 1, kMaxExtent),
                                         options.integers("lengths", kPresetLengths, 1, kMaxExtent));
  } else {
    if (options.has("batches") || options.has("lengths")) throw UsageError("--batches and --lengths need --preset");
    const std::string grid_path = options.text("problems", "bench/problems.txt");
    if (!options.has("problems") && !std::ifstream(grid_path)) {
      throw UsageError("no " + grid_path + " here: run from the source tree's root, or pass --problems FILE");
    }
    selection.source = grid_path;
    selection.problems = read_problem_grid(grid_path);
  }
  const std::vector<GridProblem> &pool = selection.problems;
  if (options.has("only")) {
    const std::vector<std::string> only = options.list("only");
    const std::set<std::string> wanted(only.begin(), only.end());
    for (const std::string &name : only) {
      if (std::none_of(pool.begin(), pool.end(), [&](const GridProblem &p) { return p.name == name; })) {
        throw UsageError("--only names '" + name + "', which is not a problem of " + selection.source);
      }
    }
    for (const GridProblem &problem : pool) {
      if (wanted.count(problem.name)) selection.selected.push_back(problem);
    }
  } else {
    selection.selected = pool;
  }
  if (selection.selected.empty()) throw UsageError(selection.source + " has no problems to run");
  return selection;
}

}  // namespace fmha_cli
