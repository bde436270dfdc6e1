#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (the fuzz preset: clang, ASan +
# UBSan, CPU backend) and runs each for SECONDS seconds (default 60, what CI
# runs), starting from its checked-in seed corpus (tests/fuzz/corpus/<target>,
# copied: new inputs go to build-fuzz/corpus/<target>, not into the source
# tree). Prints each target's executions and crashes; exits nonzero when a
# target crashed (its input is left in build-fuzz/artifacts/). Reproduce a
# crash with: build-fuzz/bin/<target> <input> (FMHA_FUZZ_VERBOSE=1 prints the
# tensors the input describes).
#
#   scripts/run-fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_plan fuzz_run fuzz_merge_quantize fuzz_tuning_cache)

scripts/install-deps.sh
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz

# A plan for a huge problem may ask for more memory than exists: the
# library must answer OUT_OF_MEMORY, so the allocator returns NULL rather
# than aborting, and libFuzzer's per-malloc limit (which would report a
# large but legitimate workspace as a crash) is lifted to ASan's own
# maximum; the RSS limit still catches memory actually used.
export ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

failed=0
mkdir -p build-fuzz/artifacts
for target in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$target
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/"$target"/* "$corpus"/ 2>/dev/null || true
  log=build-fuzz/$target.log
  status=0
  build-fuzz/bin/"$target" -max_total_time="$seconds" -max_len=1024 -malloc_limit_mb=1048576 \
    -rss_limit_mb=4096 -timeout=30 -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/"$target"- \
    "$corpus" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  crashes=$(find build-fuzz/artifacts -name "$target-*" -newer "$corpus" 2>/dev/null | wc -l)
  if [ "$status" -ne 0 ]; then
    failed=1
    crashes=$((crashes > 0 ? crashes : 1))
    grep -E 'ERROR|runtime error|fuzz_[a-z_]*:|SUMMARY' "$log" | head -n 5 >&2 || true
  fi
  echo "fuzz: $target: ${runs:-0} executions in $seconds s, $crashes crashes (log: $log)"
done
exit $failed
