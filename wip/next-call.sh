#!/usr/bin/env bash
# Everything waiting in wip/ as one device call, whatever GPU comes. Pack
# first (here, from the repository root; about 5 minutes):
#   git checkout -b layer-all && git am wip/one-layer-rule-everywhere.patch &&
#   git checkout main && git checkout -b mla-own &&
#   git am wip/mla-own-partial.patch && git checkout main &&
#   scripts/pack-builds.sh main:main layer-all:all mla-own:own
# then carry .device and run `timeout 590 bash wip/next-call.sh`.
# Every GPU: ncu of main's fp8 MLA kernel and the MLA own-partial A/B
# (about 150 s on an H100). H200 only,
# then: the one-layer A/B and the grid at main in what time is left (the
# grid writes h200.json / .png and the raw JSON: 8 files in all).
set -u
: "${OUT:?set OUT (the device tool sets it)}"
t0=$(date +%s)
here=$(dirname "$0")
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $gpu"
# ncu of main's fp8 MLA kernel (shared-memory and pipe use; the files go
# into the own-partial A/B's folder, which that script packs).
mkdir -p "$OUT/mla-own"
rep=$OUT/mla-own/ncu-mla_b128_l4096_fp8
tar -xJf .device/main.tar.xz || exit 1
LD_LIBRARY_PATH=$PWD/build-main/lib FMHA_SPLITK_LIBRARY=$PWD/build-main/lib/libfmha_splitk.so \
  PYTHONPATH=$PWD/python:$PWD/bench timeout 120 ncu --set full --import-source no -k regex:mla_forward_kernel \
  --launch-skip 4 --launch-count 1 -o "$rep" python3 bench/mla_bench.py --fp8 --only mla_b128_l4096_fp8 \
  --replays 3 --out "$rep.json" > "$rep.log" 2>&1
echo "ncu: rc $? ($(($(date +%s) - t0)) s)"
ncu -i "$rep.ncu-rep" --page details > "$rep-details.txt" 2>&1
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep-sass.csv" 2>&1
rm -f "$rep.ncu-rep"
timeout 200 bash "$here/mla-own-partial-ab.sh"
if [[ "$gpu" == *H200* ]]; then
  timeout 200 bash "$here/h200-layer-ab.sh"
  left=$((580 - ($(date +%s) - t0)))
  if ((left > 120)); then
    timeout "$left" bash scripts/gpu-session.sh grid main
    mv "$OUT/logs.tar.xz" "$OUT/logs-grid.tar.xz" 2>/dev/null
  else
    echo "grid skipped: ${left} s left"
  fi
fi
echo "total $(($(date +%s) - t0)) s"
