#!/usr/bin/env bash
# The whole check on a GPU machine, from the repository root:
#   configure + build (Release, sm_90), ctest -L gpu, ctest -L cpu,
#   compute-sanitizer memcheck / racecheck / initcheck on a subset of the GPU
#   suite, the benchmark (once it exists), and a summary table last.
# Logs go to $OUT/ when OUT is set (the device tool returns that folder),
# else to build/gpu-check/. Exits nonzero if anything failed.
#
# Environment (all optional):
#   DLPACK_INCLUDE_DIR   folder holding dlpack/dlpack.h (default .device/include)
#   BUILD_DIR            build folder (default build)
#   FMHA_MEMCHECK_FILTER, FMHA_RACECHECK_FILTER, FMHA_INITCHECK_FILTER
#                        --gtest_filter of each sanitizer run
#   FMHA_BENCH_ARGS      arguments of `fmha-splitk bench` (performance hook)
#   FMHA_SKIP_CPU=1      skip the CPU suite (quicker GPU-only iterations)
#   FMHA_PREBUILT=1      use the binaries already in BUILD_DIR (built elsewhere)
#   FMHA_SANITIZER_TIMEOUT  seconds per sanitizer run (default 150)
# Budget: about 8 minutes on one H200 with 16 cores.
set -uo pipefail

BUILD_DIR=${BUILD_DIR:-build}
LOG_DIR=${OUT:-$BUILD_DIR/gpu-check}
mkdir -p "$LOG_DIR"
DLPACK_INCLUDE_DIR=${DLPACK_INCLUDE_DIR:-$PWD/.device/include}
JOBS=16

declare -a ROWS=()
STATUS=0

# row SUITE PASSED FAILED SANITIZER_ERRORS
row() {
  ROWS+=("$(printf '%-22s %8s %8s %10s' "$1" "$2" "$3" "$4")")
  if [[ "$3" != 0 && "$3" != - ]] || [[ "$4" != 0 && "$4" != - ]]; then STATUS=1; fi
}

elapsed() { echo "$(( $(date +%s) - START ))s"; }
START=$(date +%s)

print_summary() {
  echo
  echo "== summary ($(elapsed), logs in $LOG_DIR)"
  printf '%-22s %8s %8s %10s\n' suite passed failed sanitizer
  for r in "${ROWS[@]}"; do echo "$r"; done
  if [[ $STATUS == 0 ]]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
}

# ---------------------------------------------------------------- build --
echo "== configure + build ($BUILD_DIR)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$LOG_DIR/gpu.txt" 2>&1
cat "$LOG_DIR/gpu.txt"
if [[ "${FMHA_PREBUILT:-0}" == 1 ]]; then
  # Binaries built on the workstation and carried (CUDA runtime is static).
  row "build (prebuilt)" 1 0 -
else
  if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DFMHA_SPLITK_ENABLE_CUDA=ON -DFMHA_SPLITK_CUDA_ARCHS=90 \
        -DDLPACK_INCLUDE_DIR="$DLPACK_INCLUDE_DIR" > "$LOG_DIR/configure.log" 2>&1; then
    tail -30 "$LOG_DIR/configure.log"
    row configure 0 1 -
    print_summary
    exit 1
  fi
  if ! cmake --build "$BUILD_DIR" -j "$JOBS" > "$LOG_DIR/build.log" 2>&1; then
    grep -E 'error|FAILED' "$LOG_DIR/build.log" | head -40
    row build 0 1 -
    print_summary
    exit 1
  fi
  WARNINGS=$(grep -c 'warning' "$LOG_DIR/build.log" || true)
  row "build (${WARNINGS} warnings)" 1 0 -
fi
if readelf -d "$BUILD_DIR/lib/libfmha_splitk_cuda.so" | grep -q 'libcudart'; then
  echo "libfmha_splitk_cuda.so needs libcudart (it must link the runtime statically)"
  row "plugin: no libcudart" 0 1 -
fi

# ---------------------------------------------------------------- ctest --
# run_ctest LABEL JOBS [ENV...]: one line of counts in the summary.
run_ctest() {
  local label=$1 jobs=$2
  shift 2
  echo "== ctest -L $label ($(elapsed))"
  env "$@" ctest --test-dir "$BUILD_DIR" -L "$label" -j "$jobs" --timeout 300 --output-on-failure \
    > "$LOG_DIR/ctest-$label.log" 2>&1
  local line total failed
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$LOG_DIR/ctest-$label.log" | tail -1)
  if [[ -z "$line" ]]; then
    tail -20 "$LOG_DIR/ctest-$label.log"
    row "ctest $label" 0 1 -
    return
  fi
  failed=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<< "$line")
  total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<< "$line")
  echo "$line"
  grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)' "$LOG_DIR/ctest-$label.log" | head -30
  row "ctest $label" $((total - failed)) "$failed" -
}

# One process per test (CUDA start-up each time): eight at a time share the
# GPU while their float64 oracles use the CPU.
run_ctest gpu 8
# The CPU backend's pool: two threads per test process, eight processes.
[[ "${FMHA_SKIP_CPU:-0}" == 1 ]] || run_ctest cpu 8 FMHA_SPLITK_NUM_THREADS=2

# ------------------------------------------------------------ sanitizers --
GPU_TESTS="$BUILD_DIR/bin/fmha_gpu_tests"
[[ -x "$GPU_TESTS" ]] || GPU_TESTS=$(find "$BUILD_DIR" -name fmha_gpu_tests -type f -perm -u+x | head -1)
MEMCHECK_FILTER=${FMHA_MEMCHECK_FILTER:-'Forms/CudaMerge.*:Forms/CudaMergeBackward.*:CudaMergeLimits.*:*CudaGraph.*/paged_gqa_bf16:*CudaGraph.*/padded_mqa_bf16:*Degenerate*/*_sAuto'}
RACECHECK_FILTER=${FMHA_RACECHECK_FILTER:-'*CudaGraph.*/paged_gqa_bf16:*CudaGraph.*/paged_forced_split4_bf16:*CudaGraph.*/padded_causal_mq4_f16:Forms/CudaMerge.*/stacked_f32_to_bf16'}
INITCHECK_FILTER=${FMHA_INITCHECK_FILTER:-'Forms/CudaMerge.*:Forms/CudaMergeBackward.*:*CudaGraph.*/paged_gqa_bf16:*CudaGraph.*/paged_batch_invariant_bf16:*Degenerate*/*_s3'}

# sanitize TOOL FILTER: the tool's error count in the summary (tests that
# fail under it count as failed; a run past its 150 s is a failure).
sanitize() {
  local tool=$1 filter=$2 log="$LOG_DIR/sanitizer-$1.log"
  echo "== compute-sanitizer --tool $tool ($(elapsed))"
  if [[ -z "$GPU_TESTS" ]]; then
    row "sanitizer $tool" 0 1 -
    return
  fi
  timeout "${FMHA_SANITIZER_TIMEOUT:-150}" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
    "$GPU_TESTS" --gtest_filter="$filter" > "$log" 2>&1
  local rc=$? errors passed failed
  errors=$(grep -oE '(ERROR SUMMARY: [0-9]+|\(([0-9]+) errors)' "$log" | grep -oE '[0-9]+' | tail -1)
  passed=$(grep -oE '\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  failed=$(grep -oE '\[  FAILED  \] [0-9]+ tests?' "$log" | grep -oE '[0-9]+' | tail -1)
  if [[ $rc == 124 ]]; then
    echo "timed out after ${FMHA_SANITIZER_TIMEOUT:-150} s"
    row "sanitizer $tool" "${passed:-0}" "timeout" "${errors:--}"
    STATUS=1
    return
  fi
  [[ $rc != 0 && $rc != 99 && -z "$failed" ]] && failed=1
  [[ $rc == 99 && -z "$errors" ]] && errors=1
  grep -E '^=========' "$log" | grep -vE 'COMPUTE-SANITIZER|SUMMARY' | head -20
  row "sanitizer $tool" "${passed:-0}" "${failed:-0}" "${errors:-0}"
}

sanitize memcheck "$MEMCHECK_FILTER"
sanitize racecheck "$RACECHECK_FILTER"
sanitize initcheck "$INITCHECK_FILTER"

# ------------------------------------------------------- performance hook --
# PERFORMANCE HOOK: the performance work sets the benchmark's arguments
# here (default below, or FMHA_BENCH_ARGS); its output lands in $LOG_DIR.
# Timings are reported, never judged: only a failing run counts.
BENCH="$BUILD_DIR/bin/fmha-splitk"
BENCH_ARGS=${FMHA_BENCH_ARGS:-}
if [[ -x "$BENCH" ]] && "$BENCH" bench --help > /dev/null 2>&1; then
  echo "== fmha-splitk bench $BENCH_ARGS ($(elapsed))"
  # shellcheck disable=SC2086  # the arguments are meant to split
  if timeout "${FMHA_BENCH_TIMEOUT:-120}" "$BENCH" bench $BENCH_ARGS > "$LOG_DIR/bench.txt" 2> "$LOG_DIR/bench.err"; then
    tail -25 "$LOG_DIR/bench.txt"
    row bench 1 0 -
  else
    tail -20 "$LOG_DIR/bench.err"
    row bench 0 1 -
  fi
else
  echo "== no 'fmha-splitk bench' in this build: benchmark skipped"
fi

# Peers (PyTorch SDPA backends, flex_attention) on the same grid, same run:
# FMHA_PEERS="sdpa_cudnn,sdpa_flash,..." (empty: skipped).
if [[ -n "${FMHA_PEERS:-}" ]]; then
  echo "== bench/peers.py --peers $FMHA_PEERS ($(elapsed))"
  if timeout "${FMHA_PEERS_TIMEOUT:-240}" python3 bench/peers.py --peers "$FMHA_PEERS" ${FMHA_PEERS_ARGS:-} \
       --out "$LOG_DIR/peers.json" > "$LOG_DIR/peers.txt" 2>&1; then
    row peers 1 0 -
  else
    tail -5 "$LOG_DIR/peers.txt"
    row peers 0 1 -
  fi
  tail -25 "$LOG_DIR/peers.txt"
fi

print_summary
exit $STATUS
