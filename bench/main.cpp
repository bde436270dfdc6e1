// fmha-splitk: inspect the library's backends and run attention problems on
// them from the command line.
#include <fmha_splitk/fmha_splitk.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "options.h"
#include "subcommand.h"

namespace {

const fmha_cli::Subcommand *const kSubcommands[] = {
    &fmha_cli::kInfoSubcommand,
    &fmha_cli::kRunSubcommand,
    &fmha_cli::kBenchSubcommand,
    &fmha_cli::kTuneSubcommand,
};

void print_program_usage(std::FILE *out) {
  std::fprintf(out, "usage: fmha-splitk <command> [options]\n\ncommands:\n");
  for (const fmha_cli::Subcommand *command : kSubcommands) {
    std::fprintf(out, "  %-8s %s\n", command->name, command->summary);
  }
  std::fprintf(out, "\n'fmha-splitk <command> --help' describes a command's options.\n");
}

}  // namespace

int main(int argc, char **argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    print_program_usage(stderr);
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_program_usage(stdout);
    return 0;
  }
  if (args[0] == "--version") {
    std::printf("fmha-splitk %s\n", fmha_version());
    return 0;
  }
  for (const fmha_cli::Subcommand *command : kSubcommands) {
    if (args[0] != command->name) continue;
    try {
      const fmha_cli::Options options(std::vector<std::string>(args.begin() + 1, args.end()), command->options,
                                      command->flags);
      if (options.help()) {
        std::fputs(command->usage().c_str(), stdout);
        return 0;
      }
      return command->main(options);
    } catch (const fmha_cli::UsageError &e) {
      std::fprintf(stderr, "fmha-splitk %s: %s\n\n%s", command->name, e.what(), command->usage().c_str());
      return 2;
    } catch (const std::exception &e) {
      std::fprintf(stderr, "fmha-splitk %s: error: %s\n", command->name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "fmha-splitk: unknown command '%s'\n\n", args[0].c_str());
  print_program_usage(stderr);
  return 2;
}
