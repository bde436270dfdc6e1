#!/usr/bin/env python3
"""Prints the Markdown tables of docs/performance.md from a merged results
file (bench/merge_results.py's h200.json): one row per decode problem with
ours, the % of the read ceiling, the host cost and each peer, and one per
MLA problem; with --before, a last column of an earlier file's times.

Usage: python3 bench/results_table.py docs/performance/h200.json
                                      [--before OLD.json]
"""
import argparse
import json

PEERS = [("sdpa_cudnn", "cuDNN"), ("sdpa_flash", "flash"), ("flex_attention", "flex")]


def fmt(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results")
    parser.add_argument("--before", help="an earlier merged file: its times as the last column")
    args = parser.parse_args()
    with open(args.results) as f:
        data = json.load(f)
    before = {}
    if args.before:
        with open(args.before) as f:
            before = {p["name"]: p["time_us"] for p in json.load(f)["problems"]}
    mib = 1024.0 * 1024.0
    print(f"{data['gpu']}, commit {data['commit']}, {data['date']}: copy {data['copy_bandwidth_gbps']:.0f} GB/s, "
          f"read {data['read_bandwidth_gbps']:.0f} GB/s\n")
    last = " before us |" if before else ""
    print("| problem | K+V MiB | ours us | % read | host us | " + " | ".join(n for _, n in PEERS) +
          " | best peer / ours |" + last)
    print("| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in PEERS) + " | ---: |" +
          (" ---: |" if before else ""))
    mla = []
    for p in data["problems"]:
        if p["kind"].startswith("mla"):
            mla.append(p)
            continue
        peers = p.get("peers", {})
        times = [peers.get(key) for key, _ in PEERS]
        known = [t for t in times if t is not None]
        ratio = fmt(min(known) / p["time_us"], 2) if known else "-"
        row = (f"| {p['name']} | {p['kv_bytes'] / mib:.0f} | {fmt(p['time_us'])} | {fmt(p['pct_read'])} | "
               f"{fmt(p.get('host_run_us'))} | " + " | ".join(fmt(t) for t in times) + f" | {ratio} |")
        if before:
            row += f" {fmt(before.get(p['name']))} |"
        print(row)
    if mla:
        print("\n| MLA problem | K MiB | ours us | % read |" + last)
        print("| --- | ---: | ---: | ---: |" + (" ---: |" if before else ""))
        for p in mla:
            row = f"| {p['name']} | {p['kv_bytes'] / mib:.0f} | {fmt(p['time_us'])} | {fmt(p['pct_read'])} |"
            if before:
                row += f" {fmt(before.get(p['name']))} |"
            print(row)


if __name__ == "__main__":
    main()
