// What `fmha-splitk bench` reports: a table row per problem on stdout, and
// the JSON that bench/merge_results.py merges with the peers' results into
// docs/performance/h200.json.
#ifndef FMHA_SPLITK_BENCH_BENCH_REPORT_H_
#define FMHA_SPLITK_BENCH_BENCH_REPORT_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "problem_grid.h"

namespace fmha_cli {

// The relative error above which a problem fails: the limit bench/peers.py
// holds the peers to, so that every column of a comparison passed the same
// test.
constexpr double kBenchErrorLimit = 2e-2;

// One problem's results; NaN for what was not measured.
struct BenchResult {
  BenchCase bench_case;
  std::string error;         // why it could not run ("" when it ran)
  double time_us = NAN;      // median per call over graph replays
  double host_run_us = NAN;  // mean wall-clock cost of one eager call
  double plan_us = NAN;      // median fmha_splitk_create_plan
  double rel_err = NAN;      // worst of the checked sequences; NaN with --no-check
  // plan_us of the same problem with FMHA_FLAG_EXTERNAL_WORKSPACE: the plan
  // without its own workspace, counters and run order (plan_us minus this
  // is what those allocations cost).
  double plan_external_us = NAN;
  bool checked = false;
  int32_t split_k = 0;
  std::string kernel;
  std::string config_source;  // config_source_name() of the plan's; "" when no plan was made

  bool failed() const { return !error.empty() || (checked && !(rel_err <= kBenchErrorLimit)); }
};

struct BenchReport {
  std::string gpu;     // the device's name, as the plan reports it
  std::string commit;  // "" when not given
  std::string date;    // ISO 8601, UTC
  double copy_bandwidth_gbps = NAN;
  double read_bandwidth_gbps = NAN;
  std::vector<BenchResult> results;
};

// Percent of the read ceiling that the bytes a run must move reach.
double pct_read(const BenchResult &result, double read_bandwidth_gbps);

void print_table_header(std::FILE *out);
void print_table_row(std::FILE *out, const BenchResult &result, double read_bandwidth_gbps);

// Writes `report` as JSON to `path` (replacing it); throws on failure.
void write_report_json(const std::string &path, const BenchReport &report);

// Pieces of the JSON that `bench` and `tune` write: a quoted, escaped
// string; a number (null when not finite: JSON has no NaN); a number
// rounded to an integer.
std::string json_string(const std::string &text);
std::string json_number(double value);
std::string json_integer(double value);
// Writes `text` to `path` (replacing it); throws std::runtime_error on failure.
void write_text_file(const std::string &path, const std::string &text);
// The time now, ISO 8601 in UTC, as reports date themselves.
std::string utc_now();

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_BENCH_REPORT_H_
