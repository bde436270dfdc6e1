#!/usr/bin/env bash
# The device call that decides wip/mla-own-partial.patch (any GPU): the MLA
# suite and memcheck / racecheck of the patched build, then
# bench/mla_bench.py --fp8 --only on seven MLA problems, main / own / main /
# own, and a table of the medians. Run on the device from the repository
# root with builds packed by
#   git checkout -b mla-own && git am wip/mla-own-partial.patch &&
#   git checkout main && scripts/pack-builds.sh main:main mla-own:own
# and carried as .device (this script copied there too).
set -u
: "${OUT:?set OUT (the device tool sets it)}"
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0))"; }
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
for b in main own; do [[ -d build-$b ]] || tar -xJf ".device/$b.tar.xz" || exit 1; done
L=$OUT/mla-own
mkdir -p "$L"
t=build-own/bin/fmha_gpu_tests
LD_LIBRARY_PATH=$PWD/build-own/lib timeout 150 "$t" --gtest_brief=1 --gtest_filter='*Mla*:*mla*' > "$L/suite.log" 2>&1
echo "suite own (MLA): rc $? ($(el) s) $(grep -E '^\[  (PASSED|FAILED)' "$L/suite.log" | tr '\n' ' ')"
for tool in memcheck racecheck; do
  LD_LIBRARY_PATH=$PWD/build-own/lib timeout 90 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 10 \
    "$t" --gtest_filter='*Mla*:*mla*' > "$L/$tool.log" 2>&1
  echo "$tool: rc $? ($(el) s) $(grep -E 'ERROR SUMMARY|^\[  PASSED' "$L/$tool.log" | tr '\n' ' ')"
done
ONLY=mla_b256_l8192,mla_b64_l1024_fp8,mla_b128_l4096_fp8,mla_b256_l8192_fp8,mla_b64_l1024_fp8kv,mla_b128_l4096_fp8kv,mla_b256_l8192_fp8kv
for r in 1 2; do
  for v in main own; do
    d=$PWD/build-$v
    LD_LIBRARY_PATH=$d/lib FMHA_SPLITK_LIBRARY=$d/lib/libfmha_splitk.so PYTHONPATH=$PWD/python:$PWD/bench \
      timeout 100 python3 bench/mla_bench.py --fp8 --only "$ONLY" --out "$L/$v-$r.json" > "$L/$v-$r.log" 2>&1
    echo "mla $v $r: rc $? ($(el) s)"
  done
done
python3 - "$L" <<'PY'
import json, statistics, sys
d = sys.argv[1]
R = {(v, r): {p["name"]: p for p in json.load(open(f"{d}/{v}-{r}.json"))["problems"]} for v in ("main", "own") for r in (1, 2)}
print(f"{'problem':26s}{'main r1':>9s}{'main r2':>9s}{'own r1':>9s}{'own r2':>9s}  main/own")
for n in R["main", 1]:
    t = {v: [R[v, r][n]["time_us"] for r in (1, 2)] for v in ("main", "own")}
    print(f"{n:26s}" + "".join(f"{x:9.1f}" for v in t for x in t[v])
          + f"  {statistics.median(t['main']) / statistics.median(t['own']):8.3f}")
PY
tar -C "$OUT" -cJf "$OUT/mla-own.tar.xz" mla-own && rm -rf "$L"
