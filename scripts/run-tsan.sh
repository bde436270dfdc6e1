#!/usr/bin/env bash
# Builds the CPU library and its threaded tests with ThreadSanitizer (the
# tsan preset) and runs the tests labelled `threads`: the 16-thread
# concurrency suite (tests/cpu/test_concurrency.cpp), the cases that call
# the library from several threads, and the feature cases run with 16 CPU
# workers (the backend's persistent thread pool). Any report fails the run.
# CI runs it after the ASan + UBSan suites.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

cmake --preset tsan >/dev/null
# Only what the threaded tests need: no benchmark, examples or GPU suite.
cmake --build --preset tsan -j2 --target fmha_cpu_tests fmha_cpu_concurrency_tests fmha_test_plugins
# halt_on_error: the first report fails the test (no suppressions: a race
# is a bug, not noise).
TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}" \
  ctest --test-dir build-tsan -L threads -j2 --output-on-failure --no-tests=error
