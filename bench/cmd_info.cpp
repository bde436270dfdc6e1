// `fmha-splitk info`: the library's version and every backend candidate the
// registry considered, with why it was or was not taken.
#include <fmha_splitk/fmha_splitk.h>

#include <cstdio>
#include <string>
#include <vector>

#include "status.h"
#include "subcommand.h"

namespace fmha_cli {
namespace {

int info_main(const Options &) {
  std::printf("fmha_splitk %s (header %d.%d.%d)\n", fmha_version(), FMHA_SPLITK_VERSION_MAJOR,
              FMHA_SPLITK_VERSION_MINOR, FMHA_SPLITK_VERSION_PATCH);
  size_t count = 0;
  check_status(fmha_get_backends(nullptr, 0, &count), "fmha_get_backends");
  const fmha_backend_info blank = FMHA_BACKEND_INFO_INIT;
  std::vector<fmha_backend_info> backends(count, blank);
  check_status(fmha_get_backends(backends.data(), backends.size(), &count), "fmha_get_backends");

  std::printf("backends: %zu candidate%s\n", backends.size(), backends.size() == 1 ? "" : "s");
  for (const fmha_backend_info &backend : backends) {
    std::printf("  %s\n", backend.name);
    std::printf("    available: %s\n", backend.available ? "yes" : "no");
    std::printf("    score:     %d\n", backend.score);
    std::printf("    devices:   %d\n", backend.device_count);
    std::printf("    device:    %s\n", backend.device_name[0] ? backend.device_name : "-");
    std::printf("    path:      %s\n", backend.path[0] ? backend.path : "(built in)");
    std::printf("    reason:    %s\n", backend.reason[0] ? backend.reason : "-");
  }
  return 0;
}

}  // namespace

const Subcommand kInfoSubcommand = {
    /*name=*/"info",
    /*summary=*/"print the library version and the backends it found",
    /*usage=*/
    [] {
      return std::string(
          "usage: fmha-splitk info\n"
          "\n"
          "Prints the library version and, for every backend candidate (the built-in\n"
          "CPU backend and each GPU plugin found), whether it is available, its score,\n"
          "its devices, the shared object it came from and why it was or was not taken.\n");
    },
    /*options=*/{},
    /*main=*/info_main,
    /*flags=*/{},
};

}  // namespace fmha_cli
