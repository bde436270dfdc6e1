#!/usr/bin/env bash
# The H200 A/B that decides whether the one-layer rule (schedule.cpp,
# heuristic_choice: a uniform batch whose CTAs fill whole layers of the SMs
# stays unsplit) should apply above kWideTileMinGbpsPerSm too. Run on the
# device from the repository root with builds packed by
#   git checkout -b layer-all && git am wip/one-layer-rule-everywhere.patch &&
#   git checkout main && scripts/pack-builds.sh main:main layer-all:all
# and carried as .device (this script copied there too). Times, in graph
# replays, two alternating rounds: main (the H200 keeps its splits), all
# (unsplit; the plugin runs the wide kernel where the grid has at most 2
# CTAs per SM) and all with FMHA_SPLITK_TEST_WIDE_TILES=0 (unsplit on the
# 4-warp kernel); prints one line per problem with both ratios.
set -u
: "${OUT:?set OUT (the device tool sets it)}"
PROBLEMS=${PROBLEMS:-mha_b8_l8192,gqa_mq4_b32_l8192,gqa_d64_b16_l8192,gqa_d256_b16_l8192,gqa_b32_l16384,paged_ps1_b32_l16384,paged_ps16_b32_l16384,paged_ps64_b32_l16384,paged_ps256_b32_l16384,int4_paged_ps64_b32_l16384,fp8_paged_ps64_b32_l16384,gqa_b32_l4096}
for b in main all; do [[ -d build-$b ]] || tar -xJf ".device/$b.tar.xz" || exit 1; done
T=$OUT/layer
mkdir -p "$T"
for r in 1 2; do
  for v in main all allnw; do
    lib=build-main/lib
    [[ $v != main ]] && lib=build-all/lib
    if [[ $v == allnw ]]; then export FMHA_SPLITK_TEST_WIDE_TILES=0; else unset FMHA_SPLITK_TEST_WIDE_TILES; fi
    LD_LIBRARY_PATH=$PWD/$lib timeout 90 build-main/bin/fmha-splitk bench --backend cuda --no-check \
      --only "$PROBLEMS" --out "$T/$v-$r.json" > "$T/$v-$r.log" 2>&1
    echo "bench $v $r: rc $?"
  done
done
unset FMHA_SPLITK_TEST_WIDE_TILES
python3 - "$T" <<'PY'
import json, statistics, sys
d = sys.argv[1]
V = ("main", "all", "allnw")
R = {(v, r): {p["name"]: p for p in json.load(open(f"{d}/{v}-{r}.json"))["problems"]} for v in V for r in (1, 2)}
print(f"{'problem':28s}" + "".join(f"{v + ' r1':>10s}{v + ' r2':>10s}" for v in V) + "  main/all main/allnw  kernels")
for n in R["main", 1]:
    t = {v: [R[v, r][n]["time_us"] for r in (1, 2)] for v in V}
    m = {v: statistics.median(t[v]) for v in V}
    print(f"{n:28s}" + "".join(f"{x:10.1f}" for v in V for x in t[v])
          + f"  {m['main'] / m['all']:8.3f} {m['main'] / m['allnw']:11.3f}  "
          + " | ".join(R[v, 1][n].get("kernel", "") for v in V))
PY
tar -C "$OUT" -cJf "$OUT/layer.tar.xz" layer && rm -rf "$T"
