// A subcommand of fmha-splitk. Each lives in its own file (cmd_*.cpp) and is
// listed once in main.cpp's table.
#ifndef FMHA_SPLITK_BENCH_SUBCOMMAND_H_
#define FMHA_SPLITK_BENCH_SUBCOMMAND_H_

#include <string>
#include <vector>

#include "options.h"

namespace fmha_cli {

struct Subcommand {
  const char *name;
  // One line for the program's help.
  const char *summary;
  // The subcommand's help: synopsis and every option.
  std::string (*usage)();
  // Option names accepted (without the leading "--").
  std::vector<std::string> options;
  // Exit status: 0 success, 1 failure (a library error or a failed check).
  // May throw UsageError (status 2) or std::exception (status 1).
  int (*main)(const Options &options);
  // Names of the options that take no value (flags).
  std::vector<std::string> flags;
};

extern const Subcommand kInfoSubcommand;
extern const Subcommand kRunSubcommand;
extern const Subcommand kBenchSubcommand;
extern const Subcommand kTuneSubcommand;

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_SUBCOMMAND_H_
