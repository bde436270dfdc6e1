#!/usr/bin/env bash
# Builds the HIP plugin with Debian's ROCm 5.2 and checks it on a machine
# without an AMD GPU (CI): installs the ROCm packages (install-deps.sh hip),
# configures the CPU core with the HIP plugin (CUDA off, tests on), builds
# the plugin and its suite, then runs ctest label `hip` (the core lists the
# plugin with score 0, AUTO falls back to the CPU, the device library loads
# and finds no device, the device library's exports) and the plugin's
# export allowlist check (tests/abi). docs/amd.md says what this proves and
# what it does not.
#
# Environment: FMHA_SPLITK_HIP_BUILD_DIR (default build-hip),
# FMHA_SPLITK_HIP_ARCHS (default gfx90a;gfx940, all Debian's ROCm 5.2 can
# build of CDNA2/CDNA3).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${FMHA_SPLITK_HIP_BUILD_DIR:-build-hip}
archs=${FMHA_SPLITK_HIP_ARCHS:-gfx90a;gfx940}

bash scripts/install-deps.sh hip

cmake -S . -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DFMHA_SPLITK_ENABLE_CUDA=OFF \
  -DFMHA_SPLITK_ENABLE_HIP=ON \
  "-DFMHA_SPLITK_HIP_ARCHS=$archs" \
  -DFMHA_SPLITK_BUILD_TESTS=ON \
  -DFMHA_SPLITK_BUILD_BENCH=OFF \
  -DFMHA_SPLITK_BUILD_EXAMPLES=OFF \
  -DFMHA_SPLITK_WARNINGS_AS_ERRORS=ON
# Only what the checks need: the CPU suites are built and run by
# scripts/run-tests.sh.
cmake --build "$build_dir" --parallel "$(nproc)" --target fmha_hip_tests fmha_splitk_hip
ctest --test-dir "$build_dir" -L hip --output-on-failure
ctest --test-dir "$build_dir" -R '^abi_exported_symbols_fmha_splitk_hip$' --output-on-failure
