#!/usr/bin/env bash
# The ABI guard: compares the ABI of a built libfmha_splitk.so (which needs
# DWARF: build with -g, e.g. RelWithDebInfo) against the baseline of the
# current major version, tests/abi/libfmha_splitk.abi, with libabigail's
# abidiff (Debian: abigail-tools).
#
#   tests/abi/check_abi.sh LIBRARY            compare; exit 1 on an
#                                             incompatible change
#   tests/abi/check_abi.sh --update LIBRARY   write a new baseline
#
# New functions pass as they are. Any other difference from the baseline
# fails while the major version in VERSION equals the baseline's SONAME
# major: a function removed or its signature changed, a field moved,
# resized or inserted, an enum renumbered, and also a field appended at the
# end of a struct. That last one is compatible (structs carry struct_size),
# but it is recorded on purpose: append the field's PIN_FIELD to
# struct_layout.c, then refresh the baseline with --update in the same
# change. (libabigail's "inserted at end" suppression also hides moved and
# retyped fields, so it is not used.) When the major version changed, the
# old baseline no longer applies: the check passes and says to write the
# new one.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
baseline=$here/libfmha_splitk.abi
suppressions=$here/fmha_splitk.abignore
headers=$root/include/fmha_splitk

update=0
if [ "${1:-}" = "--update" ]; then
  update=1
  shift
fi
if [ $# -ne 1 ]; then
  echo "usage: $0 [--update] LIBRARY" >&2
  exit 2
fi
library=$1
for tool in abidw abidiff readelf; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "check_abi: $tool not found (Debian: abigail-tools, binutils)" >&2
    exit 2
  fi
done
if ! readelf --sections "$library" | grep -q '\.debug_info'; then
  echo "check_abi: $library has no DWARF; build it with -g (e.g. CMAKE_BUILD_TYPE=RelWithDebInfo)" >&2
  exit 2
fi

# Only what the public header declares, reached from the exported fmha_*
# functions; no path of this machine, so the baseline is the same anywhere.
dump() {
  abidw --exported-interfaces-only --headers-dir "$headers" --drop-private-types --no-corpus-path --no-comp-dir-path --short-locs \
    --suppressions "$suppressions" --out-file "$1" "$library"
}

if [ "$update" -eq 1 ]; then
  dump "$baseline"
  echo "check_abi: wrote $baseline from $library"
  exit 0
fi

major=$(sed -n '1s/^\([0-9]*\)\..*/\1/p' "$root/VERSION")
baseline_major=$(sed -n "1s/.* soname='libfmha_splitk\.so\.\([0-9]*\)'.*/\1/p" "$baseline")
current=$(mktemp --suffix=.abi)
trap 'rm -f "$current"' EXIT
dump "$current"

status=0
abidiff --no-added-syms --suppressions "$suppressions" "$baseline" "$current" || status=$?
if [ "$status" -eq 0 ]; then
  echo "check_abi: the ABI matches the ${baseline_major}.x baseline (functions added since are allowed)"
  exit 0
fi
# abidiff's status is a bit mask: 1 error, 2 usage, 4 ABI change, 8 incompatible.
if [ $((status & 3)) -ne 0 ]; then
  echo "check_abi: abidiff failed (status $status)" >&2
  exit 1
fi
if [ "$major" != "$baseline_major" ]; then
  echo "check_abi: the changes above come with major version $major (baseline: $baseline_major);"
  echo "check_abi: write the new baseline with: tests/abi/check_abi.sh --update $library"
  exit 0
fi
if [ $((status & 8)) -ne 0 ]; then
  echo "check_abi: the ABI changed incompatibly (abidiff status $status: something was removed) within major" \
    "version $major. Keep it, or raise the major version (VERSION and the header's FMHA_SPLITK_VERSION_MAJOR)" \
    "and refresh the baseline (tests/abi/README.md)." >&2
else
  echo "check_abi: the ABI differs from the baseline (abidiff status $status, above) within major version $major." \
    "If every change is a field appended at the end of a struct (pinned in struct_layout.c), refresh the" \
    "baseline: tests/abi/check_abi.sh --update $library. Otherwise undo it, or raise the major version" \
    "(tests/abi/README.md)." >&2
fi
exit 1
