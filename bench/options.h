// Command-line options of a subcommand: `--name value` or `--name=value`,
// or a bare `--name` for a flag, each at most once, checked against the
// names the subcommand accepts.
#ifndef FMHA_SPLITK_BENCH_OPTIONS_H_
#define FMHA_SPLITK_BENCH_OPTIONS_H_

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace fmha_cli {

// A malformed command line: main() prints the message and the usage, and
// exits with status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Options {
 public:
  // Throws UsageError for a name not in `accepted` or `flags`, a repeated
  // option, a missing value, a value given to a flag or a positional
  // argument. `--help` / `-h` sets help().
  Options(const std::vector<std::string> &args, const std::vector<std::string> &accepted,
          const std::vector<std::string> &flags = {});

  bool help() const { return help_; }
  bool has(const std::string &name) const { return values_.count(name) != 0; }
  // Whether the flag `name` was given.
  bool flag(const std::string &name) const { return flags_.count(name) != 0; }
  std::string text(const std::string &name, const std::string &fallback) const;
  // The value as an integer in [min, max]; `fallback` when absent.
  int64_t integer(const std::string &name, int64_t fallback, int64_t min, int64_t max) const;
  // The value, which must be one of `choices`; `fallback` when absent.
  std::string choice(const std::string &name, const std::string &fallback,
                     const std::vector<std::string> &choices) const;
  // The value as a finite number in [min, max]; `fallback` when absent.
  double number(const std::string &name, double fallback, double min, double max) const;
  // The comma-separated items of the value, empty ones dropped; `fallback`
  // when absent.
  std::vector<std::string> list(const std::string &name, const std::vector<std::string> &fallback = {}) const;
  // list() of integers, each in [min, max]; `fallback` when absent. Throws
  // UsageError for an empty list too.
  std::vector<int64_t> integers(const std::string &name, const std::vector<int64_t> &fallback, int64_t min,
                                int64_t max) const;

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
  bool help_ = false;
};

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_OPTIONS_H_
