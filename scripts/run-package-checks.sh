#!/usr/bin/env bash
# The packaging checks (issue 7): builds the library with debug info, builds
# the API reference (Doxygen, warnings are errors), runs the ABI guard
# (tests/abi/check_abi.sh), installs into a scratch prefix, and builds and
# runs the consumer project of tests/package/consumer against it once
# through CMake's find_package and once through pkg-config; then makes the
# .deb and .tar.gz with CPack, unpacks each into a scratch root (dpkg-deb -x:
# no change to this system) and runs the consumer against them again, plus
# the installed fmha-splitk program and the examples built on their own.
# Everything runs on the CPU backend.
#
#   scripts/run-package-checks.sh [BUILD_DIR]
#
# BUILD_DIR (default build-package) is configured here when it has no
# CMakeCache.txt: RelWithDebInfo (abidw needs DWARF), CPU only, without the
# test suites (the main build runs those). An existing build folder is
# reused as it is configured (its GPU plugins get packaged too); the ABI
# guard then needs it built with -g. FMHA_SPLITK_JOBS sets the build's
# parallelism (default 2); FMHA_SPLITK_PACKAGE_OUT, when set, is a folder
# that receives the .deb and .tar.gz (otherwise they are deleted at exit).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

build=${1:-build-package}
jobs=${FMHA_SPLITK_JOBS:-2}
started=$SECONDS
step() { echo "== package-checks ($((SECONDS - started)) s): $*"; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

if [ ! -f "$build/CMakeCache.txt" ]; then
  step "configure $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFMHA_SPLITK_ENABLE_CUDA=OFF \
    -DFMHA_SPLITK_BUILD_TESTS=OFF -DFMHA_SPLITK_WARNINGS_AS_ERRORS=ON
fi
step "build $build"
cmake --build "$build" -j "$jobs"

step "docs: Doxygen over the public header, warnings are errors"
cmake --build "$build" --target docs

step "ABI guard against tests/abi/libfmha_splitk.abi"
tests/abi/check_abi.sh "$build/lib/libfmha_splitk.so"

# Builds the consumer against the package under PREFIX (whose libdir is
# LIBDIR) through CMake and through pkg-config, and runs both; each must
# resolve the library from PREFIX, not from the build tree or the system.
check_consumer() {
  local prefix=$1 libdir=$2 name=$3
  local out=$scratch/consumer-$name
  step "consumer against $name ($prefix), CMake find_package"
  cmake -S tests/package/consumer -B "$out/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_BUILD_TYPE=Release >"$out.cmake.log"
  cmake --build "$out/cmake" >>"$out.cmake.log"
  check_resolves "$out/cmake/consumer" "$prefix"
  "$out/cmake/consumer"

  step "consumer against $name, pkg-config"
  local cflags libs
  cflags=$(PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" pkg-config --cflags fmha_splitk)
  libs=$(PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" pkg-config --libs fmha_splitk)
  local pc_libdir
  pc_libdir=$(PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" pkg-config --variable=libdir fmha_splitk)
  # shellcheck disable=SC2086  # the flags are words
  c++ -std=c++17 -Wall -Wextra -Werror tests/package/consumer/consumer.cpp $cflags $libs \
    -Wl,-rpath,"$pc_libdir" -o "$out/consumer-pkgconfig"
  check_resolves "$out/consumer-pkgconfig" "$prefix"
  "$out/consumer-pkgconfig"
}

check_resolves() {
  local program=$1 prefix=$2 resolved
  resolved=$(ldd "$program" | sed -n 's/.*libfmha_splitk\.so[.0-9]* => \([^ ]*\).*/\1/p')
  case "$(realpath "$resolved")" in
    "$(realpath "$prefix")"/*) ;;
    *)
      echo "package-checks: $program loads libfmha_splitk from '$resolved', not from $prefix" >&2
      exit 1
      ;;
  esac
}

libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")

step "cmake --install into a scratch prefix"
prefix=$scratch/prefix
cmake --install "$build" --prefix "$prefix" >"$scratch/install.log"
for file in "$libdir/libfmha_splitk.so" "$libdir/libfmha_splitk.so.0" "include/fmha_splitk/fmha_splitk.h" \
  "$libdir/cmake/fmha_splitk/fmha_splitkConfig.cmake" "$libdir/cmake/fmha_splitk/fmha_splitkConfigVersion.cmake" \
  "$libdir/pkgconfig/fmha_splitk.pc" "bin/fmha-splitk" "share/doc/fmha_splitk/README.md" \
  "share/doc/fmha_splitk/api/html/index.html"; do
  if [ ! -e "$prefix/$file" ]; then
    echo "package-checks: the install lacks $file" >&2
    exit 1
  fi
done
check_consumer "$prefix" "$libdir" install

step "installed fmha-splitk: info and a checked run"
info=$("$prefix/bin/fmha-splitk" info)
echo "$info"
for plugin in "$prefix/$libdir"/fmha_splitk/libfmha_splitk_*.so; do
  [ -e "$plugin" ] || continue
  # The installed core finds its plugins in <libdir>/fmha_splitk/.
  grep -qF "$plugin" <<<"$info" || { echo "package-checks: fmha-splitk info does not list $plugin" >&2; exit 1; }
done
"$prefix/bin/fmha-splitk" run --preset mha-decode --backend cpu --batch 1 --kv-len 300 --iters 2

step "examples built on their own against the install"
cmake -S examples -B "$scratch/examples" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >"$scratch/examples.log"
cmake --build "$scratch/examples" >>"$scratch/examples.log"
"$scratch/examples/fmha_example_c_basic"
"$scratch/examples/fmha_example_c_dlopen" "$prefix/$libdir/libfmha_splitk.so.0"

step "cpack: .deb and .tar.gz"
(cd "$build" && cpack -G "DEB;TGZ" -B "$scratch/packages" >"$scratch/cpack.log")
deb=$(ls "$scratch"/packages/*.deb)
tgz=$(ls "$scratch"/packages/*.tar.gz)
dpkg-deb --info "$deb"
# Its dependencies resolve on this system (a simulation: nothing is installed).
apt-get install --simulate "$deb" >"$scratch/apt-simulate.log" ||
  { cat "$scratch/apt-simulate.log" >&2; exit 1; }
mkdir -p "$scratch/deb-root"
dpkg-deb -x "$deb" "$scratch/deb-root"
check_consumer "$scratch/deb-root/usr" "$libdir" deb

mkdir -p "$scratch/tgz"
tar -xzf "$tgz" -C "$scratch/tgz"
tgz_prefix=$(ls -d "$scratch"/tgz/*/)
check_consumer "${tgz_prefix%/}" "$libdir" tgz

if [ -n "${FMHA_SPLITK_PACKAGE_OUT:-}" ]; then
  mkdir -p "$FMHA_SPLITK_PACKAGE_OUT"
  cp "$deb" "$tgz" "$FMHA_SPLITK_PACKAGE_OUT/"
  step "packages copied to $FMHA_SPLITK_PACKAGE_OUT"
fi
step "all package checks passed"
