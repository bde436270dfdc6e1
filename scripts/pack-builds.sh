#!/usr/bin/env bash
# Builds the library, the CUDA plugin, the GPU suite and the bench of each
# named git revision in one CUDA build folder (incrementally, one revision
# after the other) and packs each as .device/NAME.tar.xz holding
# build-NAME/{lib,bin,COMMIT}: what a device call unpacks to test or A/B
# several branches without building there (the CUDA runtime is linked
# statically; select a build with LD_LIBRARY_PATH=$PWD/build-NAME/lib, as
# scripts/gpu-ab.sh does). The working tree must be clean; it is left on
# the revision it started on.
#
# Usage: scripts/pack-builds.sh REV:NAME [REV:NAME ...]
#   e.g. scripts/pack-builds.sh main:main wip/row-pairs:pairs
# Environment: BUILD_DIR (default build-gpu, configured for CUDA, e.g.
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release
#         -DFMHA_SPLITK_ENABLE_CUDA=ON -DFMHA_SPLITK_CUDA_ARCHS=90)
set -euo pipefail
# The checkouts below may change or remove this very file: run from a copy.
if [[ -z "${FMHA_PACK_BUILDS_COPY:-}" ]]; then
  copy=$(mktemp)
  cp "$0" "$copy"
  cd "$(dirname "$0")/.."
  FMHA_PACK_BUILDS_COPY=$copy exec bash "$copy" "$@"
fi
trap 'rm -f "$FMHA_PACK_BUILDS_COPY"' EXIT
if [[ $# -eq 0 ]]; then
  sed -n '2,15p' "$0" >&2
  exit 2
fi
for spec in "$@"; do
  if [[ "$spec" != *:* || -z "${spec%%:*}" || ! "${spec##*:}" =~ ^[A-Za-z0-9_.-]+$ ]]; then
    echo "pack-builds.sh: '$spec' is not REV:NAME (NAME of letters, digits, '_', '.', '-')" >&2
    exit 2
  fi
done
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
  echo "pack-builds.sh: the working tree has changes; commit or stash them first" >&2
  exit 2
fi
# Resolve every revision first: a relative one (HEAD, HEAD~1) would
# otherwise name whatever the previous pack checked out.
resolved=()
for spec in "$@"; do
  hash=$(git rev-parse --verify --quiet "${spec%%:*}^{commit}") ||
    { echo "pack-builds.sh: '${spec%%:*}' is not a revision" >&2; exit 2; }
  resolved+=("$hash:${spec##*:}")
done
set -- "${resolved[@]}"
build_dir=${BUILD_DIR:-build-gpu}
start=$(git symbolic-ref --quiet --short HEAD || git rev-parse HEAD)
stage=$(mktemp -d)
trap 'git checkout -q "$start"; rm -rf "$stage" "$FMHA_PACK_BUILDS_COPY"' EXIT
mkdir -p .device
for spec in "$@"; do
  rev=${spec%%:*}
  name=${spec##*:}
  git checkout -q "$rev"
  ninja -C "$build_dir" fmha_splitk fmha_splitk_cuda fmha_gpu_tests fmha-splitk > "$stage/build-$name.log" 2>&1 ||
    { tail -20 "$stage/build-$name.log" >&2; exit 1; }
  mkdir -p "$stage/build-$name/lib" "$stage/build-$name/bin"
  cp -a "$build_dir/lib/." "$stage/build-$name/lib/"
  cp "$build_dir/bin/fmha_gpu_tests" "$build_dir/bin/fmha-splitk" "$stage/build-$name/bin/"
  git rev-parse --short HEAD > "$stage/build-$name/COMMIT"
  tar -C "$stage" -cJf ".device/$name.tar.xz" "build-$name"
  echo "$name: $(git rev-parse --short HEAD), $(du -h ".device/$name.tar.xz" | cut -f1)"
done
