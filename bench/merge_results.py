#!/usr/bin/env python3
"""Merges the peers' times (bench/peers.py's peers.json) into the results of
`fmha-splitk bench --out` and writes docs/performance/h200.json; with
matplotlib, also a plot of achieved bandwidth against KV cache bytes.

In the merged file each problem's "peers" maps a peer to its median time per
call in microseconds, or null where the peer refused the problem or got it
wrong (peers.json keeps the reason). The plot's bandwidth counts the bytes a
run must move (K and V of the valid keys and Q read, O written), the same for
every implementation of a problem, so the points compare like with like; the
horizontal line is the read ceiling measured in the same run as ours.

With --mla, the MLA problems of bench/mla_bench.py (run in the same device
call) join the file as their own rows (kinds mla, mla_fp8, mla_fp8kv,
mla_varlen), with the peers mla_bench.py --peers timed (else empty).

Usage: python3 bench/merge_results.py OURS.json PEERS.json [--mla MLA.json]
                                      [--out docs/performance/h200.json]
                                      [--plot FILE.png | --no-plot]
Standard library only; the plot needs matplotlib and is skipped without it.
"""
import argparse
import json
import os
import sys

OURS = "fmha_splitk"


def warn(message):
    print(f"merge_results.py: warning: {message}", file=sys.stderr)


def merge(ours, peers):
    """Returns `ours` with each problem's "peers" filled from `peers`."""
    if peers.get("gpu") and ours.get("gpu") and peers["gpu"] != ours["gpu"]:
        warn(f"the peers ran on '{peers['gpu']}', ours on '{ours['gpu']}'")
    peer_problems = peers.get("problems", {})
    for problem in ours["problems"]:
        name = problem["name"]
        entry = peer_problems.get(name)
        problem["peers"] = {}
        if entry is None:
            warn(f"{name}: not in the peers' results")
            continue
        if "error" in entry and "peers" not in entry:
            warn(f"{name}: the peers' benchmark failed: {entry['error']}")
            continue
        if entry.get("kv_bytes") != problem.get("kv_bytes"):
            warn(f"{name}: kv_bytes {entry.get('kv_bytes')} in the peers' results, "
                 f"{problem.get('kv_bytes')} in ours: were they run on the same grid?")
        for peer, result in entry.get("peers", {}).items():
            problem["peers"][peer] = result.get("time_us")
    return ours


# bench/mla_bench.py's page size, for its files written before it recorded it.
MLA_PAGE_SIZE = 64


def add_mla(merged, mla):
    """Appends the rows of bench/mla_bench.py's JSON, in the schema of the
    others: no host cost measured (null); peers as timed (empty without
    --peers)."""
    names = {p["name"] for p in merged["problems"]}
    for row in mla.get("problems", []):
        if row["name"] in names:
            warn(f"{row['name']}: already in ours; the MLA row is left out")
            continue
        row = dict(row)
        row.setdefault("page_size", MLA_PAGE_SIZE)
        row.setdefault("host_run_us", None)
        row.setdefault("peers", {})  # mla_bench.py --peers: SDPA on dense copies
        merged["problems"].append(row)
    return merged


def bytes_moved(problem, read_gbps):
    """Bytes a run must move, recovered from pct_read (which counts them);
    K and V alone where that is missing."""
    pct, time_us = problem.get("pct_read"), problem.get("time_us")
    if pct is not None and time_us is not None and read_gbps:
        return pct / 100.0 * read_gbps * 1e9 * time_us * 1e-6
    return problem["kv_bytes"]


def plot(merged, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("merge_results.py: matplotlib is not installed: no plot written")
        return False
    read_gbps = merged.get("read_bandwidth_gbps")
    series = {}
    for problem in merged["problems"]:
        moved = bytes_moved(problem, read_gbps)
        # MLA rows (Dqk 576 from one latent row) as their own series.
        mine = OURS + " (MLA)" if problem.get("kind", "").startswith("mla") else OURS
        times = {mine: problem.get("time_us")}
        times.update(problem.get("peers", {}))
        for name, time_us in times.items():
            if time_us:
                series.setdefault(name, []).append((problem["kv_bytes"], moved / (time_us * 1e3)))
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    markers = "os^vD<>px*"
    for index, (name, points) in enumerate(sorted(series.items(), key=lambda s: not s[0].startswith(OURS + " ")
                                                   and s[0] != OURS)):
        points.sort()
        ours = name.startswith(OURS + " ") or name == OURS
        ax.plot([p[0] for p in points], [p[1] for p in points], linestyle="none",
                marker=markers[index % len(markers)], markersize=7 if ours else 5,
                label=name, zorder=3 if ours else 2)
    if read_gbps:
        ax.axhline(read_gbps, color="black", linestyle="--", linewidth=1,
                   label=f"read ceiling ({read_gbps:.0f} GB/s)")
    ax.set_xscale("log")
    ax.set_xlabel("KV cache bytes (K + V of the valid keys)")
    ax.set_ylabel("achieved bandwidth (GB/s: bytes of K, V, Q, O / time)")
    ax.set_title(f"{merged.get('gpu', '?')}: decode attention (commit {merged.get('commit') or '?'})")
    ax.set_ylim(bottom=0, top=max([read_gbps or 0] + [p[1] for s in series.values() for p in s]) * 1.08)
    ax.grid(True, which="both", alpha=0.3)
    # Outside the axes: points fill the lower right, the ceiling the top.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ours", help="JSON written by fmha-splitk bench --out")
    ap.add_argument("peers", help="JSON written by bench/peers.py --out")
    ap.add_argument("--mla", help="JSON written by bench/mla_bench.py --out (same device call)")
    ap.add_argument("--out", default=os.path.join("docs", "performance", "h200.json"))
    ap.add_argument("--plot", help="PNG to write (default: --out with .png)")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args()
    with open(args.ours) as f:
        ours = json.load(f)
    with open(args.peers) as f:
        peers = json.load(f)
    merged = merge(ours, peers)
    if args.mla:
        with open(args.mla) as f:
            merged = add_mla(merged, json.load(f))
    directory = os.path.dirname(args.out)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out} ({len(merged['problems'])} problems; peers' torch {peers.get('torch', '?')})")
    if not args.no_plot:
        png = args.plot or os.path.splitext(args.out)[0] + ".png"
        if plot(merged, png):
            print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
