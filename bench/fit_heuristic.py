#!/usr/bin/env python3
"""Evaluates GPU split heuristics offline on measured autotune candidates.

`fmha-splitk tune --json` records, per problem, the time of every candidate
partition (waves x min_chunk_keys, each with the num_ranges it planned). A
rule maps a problem's shape and the device (SMs, CTAs resident per SM) to a
ScheduleChoice (waves, min piece); this script computes the ranges that
choice plans, with the arithmetic of src/core/schedule.cpp (GPU path) ported
below, looks up the measured candidate that runs the same partition and
reports, per problem, the rule's time over the best candidate's and over the
time of the rule of commit 36e52f1 (3 balanced waves, 256-key pieces). A
choice whose partition was never measured is reported as unmeasured and
counts as a failure of the rule.

Shapes come from the sources: the bench grid from bench/problems.txt, the
presets (NAME_bB_lL problems of `tune --preset`) from bench/presets.cpp.

Usage: python3 bench/fit_heuristic.py [TUNE.json ...] [--rule proposed|current]
                                      [--scan] [--check-cxx]
  (default: docs/performance/h200-tune-36e52f1.json)
  --scan       also scores a small family of variants of the proposed rule
  --check-cxx  builds a driver against src/core/schedule.cpp (needs c++) and
               checks that the library's heuristic plans what --rule predicts
Standard library only.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS = 132  # H200 SMs, the device of the measurements
INT32_MAX = 2**31 - 1
GUARD = 1.03  # the rule may be at most 3% slower than commit 36e52f1's choice

# ------------------------------------------------------------------ shapes --


def read_grid():
    grid = {}
    with open(os.path.join(ROOT, "bench", "problems.txt")) as f:
        for line in f:
            fields = line.split("#")[0].split()
            if not fields:
                continue
            name, kind, batch, kv_len, hq, hkv, dim, q_len, page, lengths = fields[:10]
            grid[name] = dict(kind=kind, B=int(batch), L=int(kv_len), Hq=int(hq), Hkv=int(hkv), D=int(dim),
                              Mq=int(q_len), page=int(page), lengths=lengths)
    return grid


def read_presets():
    text = open(os.path.join(ROOT, "bench", "presets.cpp")).read()
    presets = {}
    for m in re.finditer(r'\{"([\w.-]+)",\s*"[^"]*",\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),', text):
        presets[m.group(1)] = tuple(int(m.group(i)) for i in range(2, 6))
    return presets


GRID = read_grid()
PRESETS = read_presets()


def grid_lengths(name):
    """bench/problem_grid.cpp's lengths_of()."""
    spec = GRID[name]
    if spec["lengths"] == "uniform":
        return [spec["L"]] * spec["B"]
    if spec["lengths"] == "random":
        x, out = 0, []
        for _ in range(spec["B"]):
            x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
            out.append(1 + (x >> 33) % spec["L"])
        return out
    other = grid_lengths(spec["lengths"].split(":", 1)[1])
    return [round(sum(other) / len(other))] * spec["B"]


def shape_of(name):
    """The planned shape of a measured problem: B, per-sequence expected
    lengths (the hint the bench passes, else max_kv_seqlen each), heads, head
    dim, Mq, page size."""
    if name in GRID:
        spec = GRID[name]
        lengths = grid_lengths(name)
        return dict(B=spec["B"], lengths=lengths, Hq=spec["Hq"], Hkv=spec["Hkv"], G=1, D=spec["D"], Mq=spec["Mq"],
                    page=spec["page"], varlen=len(set(lengths)) > 1)
    m = re.match(r"(.+)_b(\d+)_l(\d+)$", name)
    if not m or m.group(1) not in PRESETS:
        raise SystemExit(f"fit_heuristic.py: {name}: neither a grid problem nor PRESET_bB_lL")
    hq, hkv, dim, q_len = PRESETS[m.group(1)]
    batch, length = int(m.group(2)), int(m.group(3))
    return dict(B=batch, lengths=[length] * batch, Hq=hq, Hkv=hkv, G=1, D=dim, Mq=q_len, page=0, varlen=False)


def row_tiles(s):
    """16-row MMA tiles of one K/V head's query rows (CTAs per range and head)."""
    return -(-(s["Mq"] * (s["Hq"] // s["Hkv"])) // 16)


def resident(s):
    """CTAs of the forward kernel resident per SM (splitk_forward.cuh)."""
    return 3 if s["D"] <= 128 else 2 if s["D"] <= 256 else 1


# ------------------------------------- src/core/schedule.cpp, GPU path --


def ranges_for_waves(s, workers, waves, min_piece):
    total = sum(s["lengths"])
    if waves <= 0 or total == 0:
        return 1
    items_per_range = s["G"] * s["Hkv"]
    wanted = max(1, waves * workers // items_per_range)
    by_length = max(1, total // min_piece)
    return min(wanted, by_length, INT32_MAX)


def effective_ranges(num_ranges, min_piece, total_keys):
    return min(num_ranges, max(1, total_keys // min_piece))


def rule_current(s, workers):
    """heuristic_waves() of commit 36e52f1 (and of the tree before the
    proposed rule): (waves, min piece)."""
    total, longest = sum(s["lengths"]), max(s["lengths"])
    if total == 0:
        return 0, 256
    items_per_range = s["G"] * s["Hkv"]
    evenly = longest <= total * items_per_range / workers
    if evenly and s["B"] * items_per_range <= resident(s) * workers and longest <= 4096:
        return 0, 256
    return (3 if s["D"] <= 256 else 2), 256


def make_rule(small_work=3 << 17, target_ctas=2, long_piece=512, max_row_tiles=2):
    """The proposed rule (src/core/schedule.cpp, heuristic_choice), with its
    constants as parameters for --scan: a batch whose K/V work per SM is
    small (<= small_work key rows x head dims, counting every row tile's
    pass: 3 x 2^17 is 1.5 MiB of bf16 K and V) and whose
    256-key pieces would make more than target_ctas CTAs per SM (counting
    row tiles) aims at target_ctas CTAs per SM with pieces of at least
    long_piece keys; everything else keeps the rule of 36e52f1."""

    def rule(s, workers):
        waves, piece = rule_current(s, workers)
        if waves == 0 or s["D"] > 256:
            return waves, piece
        tiles = row_tiles(s)
        if tiles > max_row_tiles:
            return waves, piece
        total = sum(s["lengths"])
        ctas_per_range = s["G"] * s["Hkv"] * tiles
        work = total * ctas_per_range * s["D"] / workers
        if work <= small_work and (total // 256) * ctas_per_range > target_ctas * workers:
            return max(1, target_ctas // tiles), long_piece
        return waves, piece

    return rule


RULES = {"current": rule_current, "proposed": make_rule()}

# ------------------------------------------------------------ evaluation --


def lookup(problem, s, num_ranges, min_piece):
    """The measured candidate running this partition: the same planned
    ranges and the same ranges a run of the expected total uses (the
    library's own test of candidates that behave alike, tuning.cpp's
    behaviour_key; the minimum piece matters only through the latter)."""
    total = sum(s["lengths"])
    key = (num_ranges, effective_ranges(num_ranges, min_piece, total))
    exact = None
    for c in problem["configs"]:
        if c.get("tune_state", 1) != 1:
            continue
        if (c["num_ranges"], effective_ranges(c["num_ranges"], c["min_chunk_keys"], total)) == key:
            if c["min_chunk_keys"] == min_piece:
                return c
            exact = exact or c
    return exact


def check_port(problems):
    """Every measured candidate's num_ranges must follow from its (waves,
    min piece) by the ported arithmetic. Candidate 0 is the heuristic of the
    commit that was tuned, planned by its own rule (fda7e70's chose ranges
    that no grid choice gives), so it is checked only where that commit's
    heuristic was 36e52f1's."""
    bad = own = 0
    for p in problems:
        s = shape_of(p["name"])
        for index, c in enumerate(p["configs"]):
            if index == 0 and (c["waves"], c["min_chunk_keys"]) == rule_current(s, WORKERS):
                own += c["num_ranges"] != ranges_for_waves(s, WORKERS, c["waves"], c["min_chunk_keys"])
                continue
            r = ranges_for_waves(s, WORKERS, c["waves"], c["min_chunk_keys"])
            if r != c["num_ranges"]:
                print(f"port mismatch: {p['name']} w{c['waves']} p{c['min_chunk_keys']}: "
                      f"{r} ranges, measured candidate {c['num_ranges']}", file=sys.stderr)
                bad += 1
    if own:
        print(f"note: on {own} problem(s) the tuned commit's heuristic planned other ranges than 36e52f1's "
              f"(those candidates are used only as measured partitions)")
    return bad


def evaluate(problems, rule):
    """Per problem: (name, choice, ranges, rule us or None, best us, 36e52f1 us or None)."""
    rows = []
    for p in problems:
        s = shape_of(p["name"])
        waves, piece = rule(s, WORKERS)
        ranges = ranges_for_waves(s, WORKERS, waves, piece)
        found = lookup(p, s, ranges, piece)
        cw, cp = rule_current(s, WORKERS)
        base = lookup(p, s, ranges_for_waves(s, WORKERS, cw, cp), cp)
        best = min(c["time_us"] for c in p["configs"] if c.get("tune_state", 1) == 1)
        rows.append(dict(name=p["name"], s=s, waves=waves, piece=piece, ranges=ranges,
                         time=found["time_us"] if found else None, best=best,
                         base=base["time_us"] if base else None))
    return rows


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summary(rows):
    measured = [r for r in rows if r["time"] is not None]
    unmeasured = len(rows) - len(measured)
    vs_best = [r["time"] / r["best"] for r in measured]
    vs_base = [r["time"] / r["base"] for r in measured if r["base"]]
    return dict(unmeasured=unmeasured, worst_best=max(vs_best, default=float("nan")), geo_best=geomean(vs_best),
                worst_base=max(vs_base, default=float("nan")), geo_base=geomean(vs_base),
                over_guard=sum(1 for v in vs_base if v > GUARD))


def report(path, rows, only_changed=False):
    print(f"\n{path}: {len(rows)} problems, {WORKERS} SMs")
    print(f"{'problem':32s} {'T keys':>8s} {'rt':>2s} {'KD/SM':>7s} {'choice':>9s} {'ranges':>6s} "
          f"{'rule us':>8s} {'/best':>6s} {'/36e52f1':>8s}")
    for r in rows:
        s = r["s"]
        total = sum(s["lengths"])
        work = total * s["G"] * s["Hkv"] * row_tiles(s) * s["D"] / WORKERS
        changed = r["base"] is None or r["time"] is None or abs(r["time"] - r["base"]) > 0
        if only_changed and not changed:
            continue
        t = f"{r['time']:8.1f}" if r["time"] is not None else "unmeasd"
        vb = f"{r['time'] / r['best']:6.3f}" if r["time"] is not None else "     -"
        vh = f"{r['time'] / r['base']:8.3f}" if r["time"] is not None and r["base"] else "       -"
        print(f"{r['name']:32s} {total:8d} {row_tiles(s):2d} {work / 1024:6.0f}k w{r['waves']}/p{r['piece']:<4d} "
              f"{r['ranges']:6d} {t} {vb} {vh}")
    sm = summary(rows)
    print(f"rule / best: worst {sm['worst_best']:.3f}, geometric mean {sm['geo_best']:.3f}; "
          f"rule / 36e52f1 choice: worst {sm['worst_base']:.3f}, geometric mean {sm['geo_base']:.3f}; "
          f"{sm['over_guard']} problem(s) over the {GUARD:.2f} guard, {sm['unmeasured']} unmeasured")
    return sm


def scan(problems):
    print("\nVariants of the proposed rule (rule / best, rule / 36e52f1 choice):")
    print(f"{'small_work':>10s} {'ctas':>4s} {'piece':>5s} {'unmeasd':>7s} {'>guard':>6s} {'worst/base':>10s} "
          f"{'geo/base':>8s} {'geo/best':>8s}")
    for small_work in (1 << 16, 1 << 17, 1 << 18, 3 << 17, 1 << 19, 1 << 20):
        for ctas in (1, 2, 3):
            for piece in (256, 512):
                sm = summary(evaluate(problems, make_rule(small_work, ctas, piece)))
                print(f"{small_work:10d} {ctas:4d} {piece:5d} {sm['unmeasured']:7d} {sm['over_guard']:6d} "
                      f"{sm['worst_base']:10.3f} {sm['geo_base']:8.3f} {sm['geo_best']:8.3f}")


# --------------------------------------------- the library's own answer --

DRIVER = r"""
// Prints the heuristic's ScheduleChoice and num_ranges for problems read
// from stdin: B Hq Hkv D Mq page varlen len_0 ... len_{B-1}.
#include <cstdio>
#include <string>
#include <vector>
#include "core/schedule.h"
int main() {
  int batch, hq, hkv, dim, mq, page, varlen;
  while (std::scanf("%d %d %d %d %d %d %d", &batch, &hq, &hkv, &dim, &mq, &page, &varlen) == 7) {
    std::vector<int32_t> lengths(batch);
    int32_t longest = 0;
    for (auto &l : lengths) { std::scanf("%d", &l); if (l > longest) longest = l; }
    fmha_plan_data plan{};
    fmha_splitk_problem &p = plan.problem;
    p.struct_size = sizeof p;
    p.batch = batch; p.max_q_seqlen = mq; p.max_kv_seqlen = longest; p.groups = 1;
    p.heads_q = hq; p.heads_kv = hkv; p.head_dim_qk = dim; p.head_dim_v = dim;
    p.kv_layout = page > 0 ? FMHA_KV_PAGED : varlen ? FMHA_KV_PADDED : FMHA_KV_DENSE;
    p.page_size = page;
    plan.device.num_workers = 132;
    plan.device.dl_device_type = kDLCUDA;
    std::string message;
    fmha::core::ScheduleChoice choice;
    const bool hinted = p.kv_layout != FMHA_KV_DENSE;
    if (fmha::core::choose_schedule(plan, hinted ? lengths.data() : nullptr, message, &choice) != FMHA_STATUS_SUCCESS) {
      std::printf("error %s\n", message.c_str());
      continue;
    }
    std::printf("%d %d %d\n", choice.waves, choice.min_piece, plan.num_ranges);
  }
}
"""


def check_cxx(problems, rule):
    cxx = os.environ.get("CXX", "c++")
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "driver.cpp")
        binary = os.path.join(tmp, "driver")
        with open(source, "w") as f:
            f.write(DRIVER)
        subprocess.run([cxx, "-std=c++17", "-O1", "-I", os.path.join(ROOT, "src"), "-I",
                        os.path.join(ROOT, "include"), source, os.path.join(ROOT, "src", "core", "schedule.cpp"),
                        "-o", binary], check=True)
        shapes = [shape_of(p["name"]) for p in problems]
        stdin = "".join(f"{s['B']} {s['Hq']} {s['Hkv']} {s['D']} {s['Mq']} {s['page']} {int(s['varlen'])} "
                        + " ".join(map(str, s["lengths"])) + "\n" for s in shapes)
        out = subprocess.run([binary], input=stdin, capture_output=True, text=True, check=True).stdout.split("\n")
    bad = 0
    for p, s, line in zip(problems, shapes, out):
        waves, piece = rule(s, WORKERS)
        want = f"{waves} {piece} {ranges_for_waves(s, WORKERS, waves, piece)}"
        if line.strip() != want:
            print(f"library differs: {p['name']}: library '{line.strip()}', rule '{want}'", file=sys.stderr)
            bad += 1
    print(f"\n--check-cxx: the library's heuristic plans what the rule predicts on "
          f"{len(problems) - bad} of {len(problems)} problems")
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", default=[os.path.join(ROOT, "docs", "performance",
                                                                  "h200-tune-36e52f1.json")])
    parser.add_argument("--rule", choices=sorted(RULES), default="proposed")
    parser.add_argument("--changed", action="store_true", help="list only problems whose time changes")
    parser.add_argument("--scan", action="store_true")
    parser.add_argument("--check-cxx", action="store_true")
    args = parser.parse_args()
    failures = 0
    for path in args.files:
        problems = json.load(open(path))
        failures += check_port(problems)
        rows = evaluate(problems, RULES[args.rule])
        sm = report(os.path.relpath(path, os.getcwd()), rows, args.changed)
        failures += sm["unmeasured"]
        if args.scan:
            scan(problems)
        if args.check_cxx:
            failures += check_cxx(problems, RULES[args.rule])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
