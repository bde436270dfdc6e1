#!/usr/bin/env bash
# One device call's worth of GPU work on builds packed by
# scripts/pack-builds.sh (.device/NAME.tar.xz, each holding build-NAME/{lib,
# bin,COMMIT}; carried to the device machine, where this runs from the
# repository root with $OUT set):
#   check NAME       the GPU suite of NAME (one process) and compute-sanitizer
#                    memcheck / racecheck / initcheck on $FILTER, each
#                    within $SAN_TIMEOUT seconds (default 150; run 81's
#                    racecheck of 62 fused-merge tests needed more)
#   suite NAME       the first half of check: the GPU suite only
#   sanitizers NAME  the second half: the three sanitizers only (so that
#                    a short call can time builds between the two)
#   ab BASE NAME     scripts/gpu-ab.sh of BASE against NAME on $PROBLEMS
#   problems LIST    the problems of the later ab steps (default $PROBLEMS)
#   grid NAME        the grid of docs/performance.md's "Reproduce" block:
#                    fmha-splitk bench, bench/peers.py, bench/mla_bench.py
#                    --fp8 --peers, merged by bench/merge_results.py into
#                    $OUT/h200.json + .png (named so whatever the GPU), the
#                    raw JSON as $OUT/{ours,peers,mla}-COMMIT.json, and
#                    bench/timeline.py on three small problems
#   mla NAME         bench/mla_bench.py of NAME ($MLA_FLAGS, e.g. --fp8), its
#                    JSON kept in the logs; repeat the step to interleave
#                    builds, and end with mla_table for the times side by
#                    side (each run's time per problem)
#   ncu NAME PROBLEM `ncu --set full` of NAME's forward kernel on one grid
#                    problem (bench --only, one launch after warm-up):
#                    details page and the SASS source page (per-instruction
#                    samples, executed counts) as text in the logs
#                    (NCU_KERNEL: another kernel's ncu filter, e.g.
#                    regex:quant_stream_forward_kernel)
# Steps run in the order given, e.g.
#   bash scripts/gpu-session.sh check new ab main new grid new
# Logs go to $OUT/logs.tar.xz; the device returns at most 8 files, which
# one run of all three steps stays within.
set -uo pipefail
: "${OUT:?set OUT (the device tool sets it)}"
SAN_TIMEOUT=${SAN_TIMEOUT:-150}
FILTER=${FILTER:-'*FusedMerge*:*fused_merge*:*Degenerate*/*_sAuto:*Degenerate*/*_s3:*WideTiles*:*StreamOrder*'}
PROBLEMS=${PROBLEMS:-gqa_b1_l4096,gqa_b1_l32768,gqa_b1_l131072,gqa_b8_l4096,gqa_b8_l32768,mqa_b32_l8192,gqa_d64_b16_l8192,gqa_d256_b16_l8192,gqa_b128_l2048,gqa_mq4_b32_l8192,mha_b8_l8192}
LOGS=$OUT/logs
mkdir -p "$LOGS"
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }
unpack() { [[ -d build-$1 ]] || tar -xJf ".device/$1.tar.xz" || exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$LOGS/gpu.txt"

suite() {
  unpack "$1"
  LD_LIBRARY_PATH=$PWD/build-$1/lib timeout 300 "build-$1/bin/fmha_gpu_tests" --gtest_brief=1 > "$LOGS/suite-$1.log" 2>&1
  echo "suite $1: rc $? ($(elapsed)) $(grep -E '^\[  (PASSED|FAILED)' "$LOGS/suite-$1.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$LOGS/suite-$1.log" | head -20
}

sanitizers() {
  unpack "$1"
  local tests=build-$1/bin/fmha_gpu_tests lib=$PWD/build-$1/lib
  for tool in memcheck racecheck initcheck; do
    LD_LIBRARY_PATH=$lib timeout "$SAN_TIMEOUT" compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 \
      "$tests" --gtest_filter="$FILTER" > "$LOGS/$tool-$1.log" 2>&1
    # The count of tests passed says how far a run cut off by the timeout got.
    echo "$tool $1: rc $? ($(elapsed)) $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/$tool-$1.log" | tail -1)" \
      "$(grep -c '^\[       OK \]' "$LOGS/$tool-$1.log") ok $(grep -E '^\[  (PASSED|FAILED)' "$LOGS/$tool-$1.log" | tr '\n' ' ')"
  done
}

ab() {
  unpack "$1"
  unpack "$2"
  timeout 300 scripts/gpu-ab.sh -r 2 -x "build-$2/bin/fmha-splitk" -o "$LOGS/ab-$1-$2" "build-$1/lib" "build-$2/lib" \
    "$PROBLEMS" 2>&1 | tee "$LOGS/ab-$1-$2.txt"
  echo "ab $1 $2: ($(elapsed))"
}

grid() {
  unpack "$1"
  local d=$PWD/build-$1 c
  c=$(cat "$d/COMMIT")
  (
    export LD_LIBRARY_PATH=$d/lib FMHA_SPLITK_LIBRARY=$d/lib/libfmha_splitk.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
    "$d/bin/fmha-splitk" bench --backend cuda --problems bench/problems.txt --commit "$c" \
      --out "$OUT/ours-$c.json" > "$LOGS/bench-$1.log" 2>&1
    echo "bench $1: rc $? ($(elapsed))"
    tail -32 "$LOGS/bench-$1.log"
    read_gbps=$(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['read_bandwidth_gbps'])" "$OUT/ours-$c.json")
    timeout 420 python3 bench/peers.py --out "$OUT/peers-$c.json" > "$LOGS/peers-$1.log" 2>&1
    echo "peers $1: rc $? ($(elapsed))"
    timeout 200 python3 bench/mla_bench.py --fp8 --peers --read-gbps "$read_gbps" --out "$OUT/mla-$c.json" \
      > "$LOGS/mla-$1.log" 2>&1
    echo "mla $1: rc $? ($(elapsed))"
    python3 bench/merge_results.py "$OUT/ours-$c.json" "$OUT/peers-$c.json" --mla "$OUT/mla-$c.json" \
      --out "$OUT/h200.json" > "$LOGS/merge-$1.log" 2>&1
    echo "merge $1: rc $?"
    timeout 90 python3 bench/timeline.py gqa_b1_l4096,mqa_b32_l8192,gqa_b8_l4096 --peers sdpa_cudnn \
      > "$LOGS/timeline-$1.log" 2>&1
    echo "timeline $1: rc $? ($(elapsed))"
    grep -E '^(gqa|mqa)' "$LOGS/timeline-$1.log"
  )
}

mla_runs=0
mla() {
  unpack "$1"
  local d=$PWD/build-$1
  mla_runs=$((mla_runs + 1))
  # MLA_FLAGS is a list of flags: split on purpose.
  # shellcheck disable=SC2086
  LD_LIBRARY_PATH=$d/lib FMHA_SPLITK_LIBRARY=$d/lib/libfmha_splitk.so PYTHONPATH=$PWD/python timeout 200 \
    python3 bench/mla_bench.py ${MLA_FLAGS:-} --out "$LOGS/mla-$mla_runs-$1.json" > "$LOGS/mla-$mla_runs-$1.log" 2>&1
  echo "mla $1 (run $mla_runs): rc $? ($(elapsed))"
}

mla_table() {
  python3 - "$LOGS" <<'PY'
import glob, json, os, sys
runs = sorted(glob.glob(os.path.join(sys.argv[1], "mla-*.json")), key=lambda f: int(os.path.basename(f).split("-")[1]))
tables = [(os.path.basename(f)[4:-5], {p["name"]: p["time_us"] for p in json.load(open(f))["problems"]}) for f in runs]
if tables:
    print(f"{'problem':28s}" + "".join(f"{label:>16s}" for label, _ in tables))
    for name in tables[0][1]:
        print(f"{name:28s}" + "".join(f"{t.get(name, float('nan')):16.1f}" for _, t in tables))
PY
}

ncu_step() {
  unpack "$1"
  local d=$PWD/build-$1 rep=$LOGS/ncu-$1-$2
  LD_LIBRARY_PATH=$d/lib timeout 240 ncu --set full --import-source no -k "${NCU_KERNEL:-regex:splitk_forward_kernel}" \
    --launch-skip 5 --launch-count 1 -o "$rep" "$d/bin/fmha-splitk" bench --backend cuda --no-check \
    --problems bench/problems.txt --only "$2" --out "$LOGS/ncu-bench-$1-$2.json" > "$rep.log" 2>&1
  echo "ncu $1 $2: rc $? ($(elapsed))"
  ncu -i "$rep.ncu-rep" --page details > "$rep-details.txt" 2>&1
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep-sass.csv" 2>&1
  grep -E 'Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Memory Throughput|DRAM Throughput|Block Limit' \
    "$rep-details.txt" | head -12
  rm -f "$rep.ncu-rep"
}

while [[ $# -gt 0 ]]; do
  case $1 in
    check) suite "$2"; sanitizers "$2"; shift 2 ;;
    suite) suite "$2"; shift 2 ;;
    sanitizers) sanitizers "$2"; shift 2 ;;
    ab) ab "$2" "$3"; shift 3 ;;
    problems) PROBLEMS=$2; shift 2 ;;
    grid) grid "$2"; shift 2 ;;
    ncu) ncu_step "$2" "$3"; shift 3 ;;
    mla) mla "$2"; shift 2 ;;
    mla_table) mla_table; shift ;;
    *) echo "gpu-session.sh: unknown step '$1'" >&2; exit 2 ;;
  esac
done
tar -C "$LOGS" -cJf "$OUT/logs.tar.xz" . && rm -rf "$LOGS"
ls -la "$OUT"
