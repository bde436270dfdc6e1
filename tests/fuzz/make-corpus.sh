#!/usr/bin/env sh
# Regenerates the seed corpus of tests/fuzz/corpus/<target>: runs each target
# of an existing fuzz build (scripts/run-fuzz.sh builds it) from nothing for
# SECONDS seconds (default 30) with inputs of at most 128 bytes, then keeps
# the smallest set of inputs that covers the same code (libFuzzer -merge), and
# of those the first 64 by name (names are content hashes: a random sample),
# so that the checked-in seeds stay small; fuzzing regains the rest in
# seconds.
#
#   tests/fuzz/make-corpus.sh [SECONDS]
set -eu
cd "$(dirname "$0")/../.."
seconds=${1:-30}
export ASAN_OPTIONS=allocator_may_return_null=1
for target in fuzz_plan fuzz_run fuzz_merge_quantize fuzz_tuning_cache; do
  scratch=$(mktemp -d)
  build-fuzz/bin/$target -max_total_time="$seconds" -max_len=128 -malloc_limit_mb=1048576 -seed=1 -artifact_prefix="$scratch/" \
    "$scratch" >/dev/null 2>&1
  rm -rf tests/fuzz/corpus/$target
  mkdir -p tests/fuzz/corpus/$target
  build-fuzz/bin/$target -merge=1 -max_len=128 tests/fuzz/corpus/$target "$scratch" >/dev/null 2>&1
  rm -rf "$scratch"
  ls tests/fuzz/corpus/$target | sort | tail -n +65 | sed "s|^|tests/fuzz/corpus/$target/|" | xargs rm -f
  echo "$target: $(ls tests/fuzz/corpus/$target | wc -l) seeds"
done
