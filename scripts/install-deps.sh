#!/usr/bin/env bash
# Installs, from Debian's packages, what building and testing fmha_splitk
# needs and this machine lacks. Does nothing (and needs no network) when
# everything is present. The CUDA toolkit is optional and not installed here:
# the CUDA plugin is built when nvcc is found.
set -euo pipefail

# package -> a file or command that shows it is installed. Checking files
# rather than dpkg's database also accepts tools installed some other way.
declare -A probe=(
  [cmake]=cmd:cmake
  [ninja-build]=cmd:ninja
  [gcc]=cmd:gcc
  [g++]=cmd:g++
  [binutils]=cmd:nm
  [pkg-config]=cmd:pkg-config
  [libgtest-dev]=file:/usr/include/gtest/gtest.h
  [libdlpack-dev]=file:/usr/include/dlpack/dlpack.h
  # Packaging checks: the API reference, the ABI guard, the .deb's dependencies.
  [doxygen]=cmd:doxygen
  [abigail-tools]=cmd:abidiff
  [dpkg-dev]=cmd:dpkg-shlibdeps
  # The Python binding's suite and install check use Debian's interpreter.
  [python3-pytest]=file:/usr/lib/python3/dist-packages/pytest
  [python3-numpy]=file:/usr/lib/python3/dist-packages/numpy
  [python3-setuptools]=file:/usr/lib/python3/dist-packages/setuptools
  [python3-pip]=file:/usr/lib/python3/dist-packages/pip
)

# `install-deps.sh hip` adds Debian's ROCm 5.2 for the HIP plugin's build
# (scripts/run-hip-build.sh, docs/amd.md); hipcc depends on the rest.
if [ "${1:-}" = hip ]; then
  probe+=(
    [hipcc]=cmd:hipcc
    [clang-15]=cmd:clang++-15
    [libamdhip64-dev]=file:/usr/include/hip/hip_runtime.h
    [rocm-device-libs]=file:/usr/lib/$(uname -m)-linux-gnu/amdgcn/bitcode/ocml.bc
  )
elif [ $# -gt 0 ]; then
  echo "usage: install-deps.sh [hip]" >&2
  exit 2
fi

missing=()
for package in "${!probe[@]}"; do
  what=${probe[$package]}
  case "$what" in
    cmd:*) command -v "${what#cmd:}" >/dev/null 2>&1 || missing+=("$package") ;;
    file:*) [ -e "${what#file:}" ] || missing+=("$package") ;;
  esac
done

# CMakePresets.json version 6 needs CMake 3.25 (Debian 12 ships 3.25.1).
if command -v cmake >/dev/null 2>&1; then
  cmake_version=$(cmake --version | sed -n 's/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')
  if ! printf '3.25\n%s\n' "$cmake_version" | sort -V -C; then
    echo "install-deps: CMake $cmake_version is too old; 3.25 or newer is needed" >&2
    exit 1
  fi
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

# env passes the setting through sudo, which resets the environment.
if [ "$(id -u)" -eq 0 ]; then
  as_root=(env DEBIAN_FRONTEND=noninteractive)
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo env DEBIAN_FRONTEND=noninteractive)
else
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run this script as root (or install sudo), or install them yourself:" >&2
  echo "  apt-get install ${missing[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: no apt-get here; install the equivalents of: ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
