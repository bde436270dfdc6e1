// `fmha-splitk tune`: autotunes each problem of the benchmark grid (or a
// model preset's shape at several batches and lengths) on one backend, on
// the data `bench` runs, and saves the winners as a tuning cache that
// `bench --tuning-cache`, or any program through
// fmha_tuning_cache_load_file, loads so that its plans start tuned.
#include <fmha_splitk/fmha_splitk.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench_inputs.h"
#include "bench_report.h"
#include "device.h"
#include "plan.h"
#include "problem_grid.h"
#include "problem_selection.h"
#include "status.h"
#include "subcommand.h"

namespace fmha_cli {
namespace {

// The library's own defaults (fmha_splitk_autotune_options), spelled out for the
// usage text and the JSON.
constexpr int64_t kDefaultTimedRuns = 20;
constexpr int64_t kDefaultWarmupRuns = 3;
constexpr double kDefaultMaxMs = 2000.0;
constexpr double kMiB = 1024.0 * 1024.0;

// One problem's autotune; NaN for what was not measured.
struct TuneResult {
  BenchCase bench_case;
  std::string error;  // why it could not be tuned ("" when it was)
  int32_t candidates = 0;
  int32_t rejected = 0;  // output off the heuristic's beyond the bound
  int32_t skipped = 0;   // not reached within --max-ms
  int32_t failed_runs = 0;
  double heuristic_us = NAN;  // candidate 0, the heuristic's choice
  double tuned_us = NAN;      // the candidate the plan runs after autotune
  std::string winner;
  std::string heuristic_kernel;
  // Every candidate, as JSON objects: name, waves, ranges, piece, time, state.
  std::vector<std::string> configs;

  bool failed() const { return !error.empty(); }
  double speedup() const { return heuristic_us / tuned_us; }
};

struct TuneSettings {
  int32_t backend = FMHA_BACKEND_AUTO;
  std::string backend_name;
  fmha_splitk_autotune_options autotune = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
};

struct TuneReport {
  std::string gpu;
  std::string backend;
  std::string commit;  // "" when not given
  std::string date;
  TuneSettings settings;
  std::vector<TuneResult> results;
};

// A time the library reports, -1 when not timed, as NaN then.
double measured_us(double time_us) { return time_us >= 0 ? time_us : NAN; }

void tune_case(Device &device, const TuneSettings &settings, TuneResult &result) {
  const BenchCase &c = result.bench_case;
  const Plan plan = create_plan(c.library_problem(settings.backend), settings.backend_name);
  const fmha_splitk_plan_info info = plan_info(plan);
  const Metadata metadata(device, c);
  // Autotune runs in a workspace of its own; the set's is the plan's, so
  // that its arguments are those of a valid run.
  const DeviceBuffer workspace(device, info.workspace_size);
  // One set: autotune overwrites the L2 before each timed run, so the data
  // come from memory without rotating sets.
  const InputSet set(device, c, 0, metadata, &workspace);
  device.synchronize();
  check_status(fmha_splitk_autotune(plan.get(), &set.args(), &settings.autotune), "fmha_splitk_autotune");

  check_status(fmha_splitk_plan_config_count(plan.get(), &result.candidates), "fmha_splitk_plan_config_count");
  for (int32_t index = 0; index < result.candidates; ++index) {
    fmha_splitk_config config = FMHA_SPLITK_CONFIG_INIT;
    check_status(fmha_splitk_get_plan_config(plan.get(), index, &config), "fmha_splitk_get_plan_config");
    if (index == 0) {
      result.heuristic_us = measured_us(config.time_us);
      result.heuristic_kernel = config.name;
    }
    if (config.selected) {
      result.tuned_us = measured_us(config.time_us);
      result.winner = config.name;
    }
    result.configs.push_back("{\"name\": " + json_string(config.name) + ", \"waves\": " +
                             std::to_string(config.waves) + ", \"num_ranges\": " + std::to_string(config.num_ranges) +
                             ", \"min_chunk_keys\": " + std::to_string(config.min_chunk_keys) +
                             ", \"time_us\": " + json_number(measured_us(config.time_us)) +
                             ", \"tune_state\": " + std::to_string(config.tune_state) + "}");
    result.rejected += config.tune_state == FMHA_TUNE_REJECTED;
    result.skipped += config.tune_state == FMHA_TUNE_SKIPPED;
    result.failed_runs += config.tune_state == FMHA_TUNE_FAILED;
  }
}

void print_tune_header(std::FILE *out) {
  std::fprintf(out, "%-30s %9s %5s %4s %4s %12s %10s %8s  %s\n", "name", "kv MiB", "cands", "rej", "skip",
               "heuristic us", "tuned us", "speedup", "winner (heuristic)");
}

void print_tune_row(std::FILE *out, const TuneResult &r) {
  const BenchCase &c = r.bench_case;
  if (r.failed()) {
    std::fprintf(out, "%-30s %9.1f  error: %s\n", c.spec.name.c_str(), c.kv_bytes() / kMiB, r.error.c_str());
    return;
  }
  std::fprintf(out, "%-30s %9.1f %5d %4d %4d %12.2f %10.2f %7.3fx  %s\n", c.spec.name.c_str(), c.kv_bytes() / kMiB,
               r.candidates, r.rejected, r.skipped, r.heuristic_us, r.tuned_us, r.speedup(), r.winner.c_str());
  if (r.winner != r.heuristic_kernel) std::fprintf(out, "%84s(%s)\n", "", r.heuristic_kernel.c_str());
}

std::string optional_string(const std::string &text) { return text.empty() ? "null" : json_string(text); }

std::string tune_result_json(const TuneResult &r) {
  const BenchCase &c = r.bench_case;
  std::string json = "    {\"name\": " + json_string(c.spec.name) + ", \"kind\": " + json_string(c.spec.kind) +
                     ", \"kv_bytes\": " + json_integer(c.kv_bytes());
  if (c.spec.quant.kv_quant != FMHA_KV_QUANT_NONE) json += ", \"kv_quant\": " + json_string(c.spec.quant.text);
  if (c.layout == FMHA_KV_PAGED) json += ", \"page_size\": " + std::to_string(c.spec.page_size);
  json += ",\n     \"heuristic_us\": " + json_number(r.heuristic_us) + ", \"tuned_us\": " + json_number(r.tuned_us) +
          ", \"speedup\": " + json_number(r.speedup()) + ", \"candidates\": " + std::to_string(r.candidates) +
          ", \"rejected\": " + std::to_string(r.rejected) + ", \"skipped\": " + std::to_string(r.skipped) +
          ", \"failed\": " + std::to_string(r.failed_runs) + ",\n     \"winner\": " + optional_string(r.winner) +
          ", \"heuristic_kernel\": " + optional_string(r.heuristic_kernel);
  if (r.failed()) json += ", \"error\": " + json_string(r.error);
  json += ",\n     \"configs\": [";
  for (size_t i = 0; i < r.configs.size(); ++i) json += (i ? ", " : "") + r.configs[i];
  return json + "]}";
}

void write_tune_json(const std::string &path, const TuneReport &report) {
  const fmha_splitk_autotune_options &autotune = report.settings.autotune;
  std::string json = "{\n  \"gpu\": " + json_string(report.gpu) + ",\n  \"backend\": " + json_string(report.backend) +
                     ",\n  \"commit\": " + optional_string(report.commit) +
                     ",\n  \"date\": " + json_string(report.date) +
                     ",\n  \"timed_runs\": " + std::to_string(autotune.timed_runs) +
                     ",\n  \"warmup_runs\": " + std::to_string(autotune.warmup_runs) +
                     ",\n  \"max_ms\": " + json_number(autotune.max_total_ms) + ",\n  \"problems\": [";
  for (size_t i = 0; i < report.results.size(); ++i) {
    json += (i ? ",\n" : "\n") + tune_result_json(report.results[i]);
  }
  json += report.results.empty() ? "]\n}\n" : "\n  ]\n}\n";
  write_text_file(path, json);
}

size_t tuning_cache_entries() {
  size_t entries = 0;
  check_status(fmha_tuning_cache_entries(&entries), "fmha_tuning_cache_entries");
  return entries;
}

void save_tuning_cache(const std::string &path) {
  check_status(fmha_tuning_cache_save_file(path.c_str()), ("saving the tuning cache to '" + path + "'").c_str());
}

int tune_main(const Options &options) {
  const std::string backend_name = options.choice("backend", "auto", {"auto", "cpu", "cuda"});
  if (!options.has("out")) throw UsageError("--out FILE is required: where the tuning cache goes");
  const std::string out_path = options.text("out", "");
  if (out_path.empty()) throw UsageError("--out needs a file name");
  const std::string cache_path = options.text("tuning-cache", "");
  if (options.has("tuning-cache") && cache_path.empty()) throw UsageError("--tuning-cache needs a file name");
  const std::string json_path = options.text("json", "");
  if (options.has("json") && json_path.empty()) throw UsageError("--json needs a file name");
  TuneSettings settings;
  // At least one warm-up run: the library reads 0 as its default of 3.
  settings.autotune.timed_runs = static_cast<int32_t>(options.integer("timed-runs", kDefaultTimedRuns, 1, 100000));
  settings.autotune.warmup_runs = static_cast<int32_t>(options.integer("warmup-runs", kDefaultWarmupRuns, 1, 100000));
  settings.autotune.max_total_ms = options.number("max-ms", kDefaultMaxMs, 1e-3, 1e9);
  const ProblemSelection selection = select_problems(options);

  // Loaded before any plan, as `bench` does: a plan of a cached class
  // starts from its tuned configuration (autotune then times them all anew).
  const size_t loaded = cache_path.empty() ? 0 : load_tuning_cache(cache_path);
  const fmha_splitk_plan_info probe_info = probe_backend(backend_name);
  settings.backend = probe_info.backend;
  settings.backend_name = probe_info.backend_name;
  const std::unique_ptr<Device> device = device_for(probe_info);

  TuneReport report;
  report.gpu = probe_info.device_name;
  report.backend = probe_info.backend_name;
  report.commit = options.text("commit", "");
  report.date = utc_now();
  report.settings = settings;

  std::printf("device:    %s, device %d (%s)\n", probe_info.backend_name, probe_info.device_id, probe_info.device_name);
  if (!cache_path.empty()) std::printf("tuning:    cache %s loaded (%zu entries)\n", cache_path.c_str(), loaded);
  std::printf(
      "autotune:  per candidate the median of %d timed runs after %d warm-up runs; at most %g ms per "
      "problem\n\n",
      settings.autotune.timed_runs, settings.autotune.warmup_runs, settings.autotune.max_total_ms);
  print_tune_header(stdout);
  std::fflush(stdout);

  bool failed = false;
  for (const GridProblem &spec : selection.selected) {
    TuneResult result;
    try {
      result.bench_case = resolve_case(spec, selection.problems);
      tune_case(*device, settings, result);
    } catch (const std::exception &e) {
      result.bench_case.spec = spec;
      result.error = e.what();
    }
    failed = failed || result.failed();
    print_tune_row(stdout, result);
    std::fflush(stdout);
    report.results.push_back(std::move(result));
    // Saved after every problem, so that a run cut short keeps what it tuned.
    save_tuning_cache(out_path);
    if (!json_path.empty()) write_tune_json(json_path, report);
  }
  std::printf("\ntuning cache: %zu entries saved to %s\n", tuning_cache_entries(), out_path.c_str());
  return failed ? 1 : 0;
}

std::string tune_usage() {
  return "usage: fmha-splitk tune --out FILE [options]\n"
         "\n"
         "Autotunes each problem of the benchmark grid (see bench/problems.txt), or of a\n"
         "model preset at several batches and lengths, on one backend: per problem a\n"
         "plan, one input set of random data as `bench` makes them, and\n"
         "fmha_splitk_autotune, which times every configuration the plan can run (the\n"
         "L2 overwritten before each timed run) and keeps the fastest whose output\n"
         "agrees with the heuristic's. Prints per problem the candidates, those\n"
         "rejected for their output and those skipped for the time budget, the\n"
         "heuristic's time and the winner's, and the winner. The winners, kept in the\n"
         "library's tuning cache by problem class, are saved to FILE after every\n"
         "problem; `fmha-splitk bench --tuning-cache FILE` (or a program calling\n"
         "fmha_tuning_cache_load_file) runs them. A cache holds only for the library\n"
         "version and the devices that made it. Exits 1 if a problem fails to tune.\n"
         "\n"
         "options:\n"
         "  --out FILE         where the tuning cache is saved (required)\n"
         "  --tuning-cache FILE\n"
         "                     load this cache first, so that FILE extends it (the same\n"
         "                     file may be given to both)\n"
         "  --problems FILE    the grid (default bench/problems.txt, from the current directory)\n"
         "  --preset NAME      instead of the grid: the shape of this preset of `run` (bf16),\n"
         "                     dense, at every batch and length below, named\n"
         "                     NAME_b<batch>_l<length>\n"
         "  --batches N,...    batches of --preset (default 1,8,32,128)\n"
         "  --lengths N,...    keys per sequence of --preset (default 4096,32768)\n"
         "  --only NAME,...    tune only these problems (of the grid or the preset)\n"
         "  --backend KIND     auto (default: the GPU when one is found), cpu or cuda\n"
         "  --timed-runs N     timed runs per candidate, of which the median counts (default 20)\n"
         "  --warmup-runs N    untimed runs before them, at least 1 (default 3)\n"
         "  --max-ms X         time budget of one problem's autotune in milliseconds\n"
         "                     (default 2000); the heuristic's configuration is always timed\n"
         "  --json FILE        also write the results as JSON\n"
         "  --commit SHA       the commit measured, recorded in the JSON\n";
}

}  // namespace

const Subcommand kTuneSubcommand = {
    /*name=*/"tune",
    /*summary=*/"autotune problems and save the winners as a tuning cache",
    /*usage=*/tune_usage,
    /*options=*/
    {"out", "tuning-cache", "problems", "preset", "batches", "lengths", "only", "backend", "timed-runs", "warmup-runs",
     "max-ms", "json", "commit"},
    /*main=*/tune_main,
    /*flags=*/{},
};

}  // namespace fmha_cli
