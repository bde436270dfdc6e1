#!/usr/bin/env bash
# Builds the CPU library and suites with AddressSanitizer and
# UndefinedBehaviorSanitizer (the asan preset) and runs the cpu and abi
# tests under them; any report fails the run. CI runs it after the README's
# test command (about 3.5 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

cmake --preset asan
cmake --build --preset asan
ctest --preset asan -j2
