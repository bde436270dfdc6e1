/*
 * Loads an installed core library by path (dlopen only, so that no other
 * copy of the library can stand in for it) and checks that its registry
 * found the plugin at the expected path, i.e. in <libdir>/fmha_splitk/.
 * Usage: plugin_folder_check CORE_LIBRARY EXPECTED_PLUGIN_PATH
 */
#include <dlfcn.h>
#include <fmha_splitk/fmha_splitk.h>
#include <stdio.h>
#include <string.h>

typedef fmha_status (*get_backends_fn)(fmha_backend_info *, size_t, size_t *);

enum { MAX_CANDIDATES = 16 };

int main(int argc, char **argv) {
  void *library;
  get_backends_fn get_backends;
  fmha_backend_info infos[MAX_CANDIDATES];
  size_t count = 0;
  size_t i;

  if (argc != 3) {
    fprintf(stderr, "usage: %s CORE_LIBRARY EXPECTED_PLUGIN_PATH\n", argv[0]);
    return 2;
  }
  library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    fprintf(stderr, "dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  /* POSIX's way to turn dlsym's object pointer into a function pointer. */
  *(void **)&get_backends = dlsym(library, "fmha_get_backends");
  if (get_backends == NULL) {
    fprintf(stderr, "dlsym(fmha_get_backends): %s\n", dlerror());
    return 1;
  }
  for (i = 0; i < MAX_CANDIDATES; ++i) {
    fmha_backend_info init = FMHA_BACKEND_INFO_INIT;
    infos[i] = init;
  }
  if (get_backends(infos, MAX_CANDIDATES, &count) != FMHA_STATUS_SUCCESS) {
    fprintf(stderr, "fmha_get_backends failed\n");
    return 1;
  }
  for (i = 0; i < count && i < MAX_CANDIDATES; ++i) {
    printf("candidate %s: path '%s', available %d: %s\n", infos[i].name, infos[i].path, infos[i].available,
           infos[i].reason);
    if (strcmp(infos[i].path, argv[2]) == 0) {
      if (!infos[i].available) {
        fprintf(stderr, "the plugin was found but not taken\n");
        return 1;
      }
      return 0;
    }
  }
  fprintf(stderr, "no candidate from %s\n", argv[2]);
  return 1;
}
