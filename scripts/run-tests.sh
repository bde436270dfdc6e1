#!/usr/bin/env bash
# Builds fmha_splitk as CI does (the ci preset: Release, warnings are errors,
# the CUDA plugin compiled when nvcc is found) and runs every test that needs
# no GPU (ctest labels cpu and abi). Exits nonzero when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

cmake --preset ci
cmake --build --preset ci
ctest --preset ci
