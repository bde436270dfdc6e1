#!/usr/bin/env bash
# A/B of two builds of the library on one machine, in one call: rounds of
# `fmha-splitk bench --no-check` over the named problems, the two builds
# alternating within each round (A, B, A, B, ...), then one line per
# problem: each round's time of A and of B and the ratio of their medians
# (A / B: above 1 means B is faster) and the host cost of an eager call
# of each. Both builds run the same bench binary;
# each is picked by LD_LIBRARY_PATH (the core loads its plugins from its own
# folder), so only the libraries differ.
#
# Usage: scripts/gpu-ab.sh [options] A_LIB_DIR B_LIB_DIR PROBLEM[,PROBLEM...]
#   A_LIB_DIR, B_LIB_DIR  folders holding libfmha_splitk.so (and its plugins)
#   -r ROUNDS    rounds (default 2)
#   -x BINARY    the bench binary (default build-gpu/bin/fmha-splitk)
#   -k BACKEND   cuda (default) or cpu (the script's own smoke test)
#   -p FILE      the problem grid (default bench/problems.txt)
#   -o DIR       where the JSON of every run goes (default $OUT or a temporary folder)
# Exits nonzero when a bench run fails.
set -euo pipefail

rounds=2
binary=build-gpu/bin/fmha-splitk
backend=cuda
grid=bench/problems.txt
out_dir=${OUT:-}
while getopts "r:x:k:p:o:" option; do
  case $option in
    r) rounds=$OPTARG ;;
    x) binary=$OPTARG ;;
    k) backend=$OPTARG ;;
    p) grid=$OPTARG ;;
    o) out_dir=$OPTARG ;;
    *) sed -n '2,18p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [[ $# -ne 3 ]]; then
  sed -n '2,18p' "$0" >&2
  exit 2
fi
a_lib=$1
b_lib=$2
problems=$3
for lib in "$a_lib" "$b_lib"; do
  if [[ ! -e "$lib/libfmha_splitk.so" ]]; then
    echo "gpu-ab.sh: no libfmha_splitk.so in $lib" >&2
    exit 2
  fi
done
if [[ -z "$out_dir" ]]; then out_dir=$(mktemp -d); fi
mkdir -p "$out_dir"

for ((round = 1; round <= rounds; ++round)); do
  for side in a b; do
    lib=$a_lib
    [[ $side == b ]] && lib=$b_lib
    if ! LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$binary" bench --backend "$backend" \
        --no-check --problems "$grid" --only "$problems" --out "$out_dir/$side-$round.json" > "$out_dir/$side-$round.log" 2>&1; then
      echo "gpu-ab.sh: bench with $lib failed (round $round):" >&2
      tail -5 "$out_dir/$side-$round.log" >&2
      exit 1
    fi
  done
done

python3 - "$out_dir" "$rounds" "$a_lib" "$b_lib" <<'PY'
import json, statistics, sys
out_dir, rounds, a_lib, b_lib = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
runs = {}
for side in "ab":
    for r in range(1, rounds + 1):
        with open(f"{out_dir}/{side}-{r}.json") as f:
            runs[side, r] = {p["name"]: p for p in json.load(f)["problems"]}
print(f"A = {a_lib}\nB = {b_lib}\n")
print(f"{'problem':28s} {'A us (each round)':>24s} {'B us (each round)':>24s} {'A / B':>7s} "
      f"{'host A':>7s} {'host B':>7s}  B kernel")
for name, first in runs["a", 1].items():
    a = [runs["a", r][name]["time_us"] for r in range(1, rounds + 1)]
    b = [runs["b", r][name]["time_us"] for r in range(1, rounds + 1)]
    ratio = statistics.median(a) / statistics.median(b)
    # The eager host cost of a call (median over the rounds).
    host = {side: statistics.median(runs[side, r][name].get("host_run_us", float("nan"))
                                    for r in range(1, rounds + 1)) for side in "ab"}
    print(f"{name:28s} {' '.join(f'{t:8.1f}' for t in a):>24s} {' '.join(f'{t:8.1f}' for t in b):>24s} "
          f"{ratio:7.3f} {host['a']:7.2f} {host['b']:7.2f}  {runs['b', 1][name].get('kernel', '')}")
PY
