/*
 * The header a program was compiled with and the library it runs with agree
 * on the version: FMHA_SPLITK_VERSION_* against fmha_version() and
 * fmha_version_code(). Exit status 0 when they agree.
 */
#include <fmha_splitk/fmha_splitk.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  char expected[32];
  const char *version = fmha_version();
  const int32_t code = fmha_version_code();
  int failed = 0;

  snprintf(expected, sizeof expected, "%d.%d.%d", FMHA_SPLITK_VERSION_MAJOR, FMHA_SPLITK_VERSION_MINOR,
           FMHA_SPLITK_VERSION_PATCH);
  if (!version || strcmp(version, expected) != 0) {
    fprintf(stderr, "version_check: fmha_version() is \"%s\", the header says \"%s\"\n", version ? version : "(null)",
            expected);
    failed = 1;
  }
  if (code != FMHA_SPLITK_VERSION_CODE) {
    fprintf(stderr, "version_check: fmha_version_code() is %d, the header says %d\n", (int)code,
            (int)FMHA_SPLITK_VERSION_CODE);
    failed = 1;
  }
  if (!failed) printf("version_check: header and library are both %s (%d)\n", version, (int)code);
  return failed;
}
