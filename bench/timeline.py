#!/usr/bin/env python3
"""Kernel timeline of graph replays: where a call's time goes, ours and a peer.

For each named problem of the benchmark grid (bench/problems.txt), the
rotated input sets of bench/peers.py are captured into one CUDA graph (one
call per set) for fmha_splitk (through the Python binding) and for each
peer asked for; four replays run under torch.profiler (CUPTI kernel
records). Per call it prints the duration of the call's first kernel (the
forward kernel), the time from that kernel's end to the call's last
kernel's end (a split combine or reduction), the gap to the next call's
first kernel and the kernels per call, as medians over the replays.

Usage: python3 bench/timeline.py NAME[,NAME...] [--peers sdpa_cudnn,...]
(the library from FMHA_SPLITK_LIBRARY or build/lib; a CUDA device).
"""
import argparse
import json
import math
import os
import statistics
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (the grid, the inputs and the peers' calls)


def kernel_events(graph, replays):
    """The kernel records of `replays` replays of `graph`, in start order."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    return sorted(events, key=lambda e: e["ts"])


def per_call(events):
    """Medians per call: first kernel's duration, tail after it, gap to the next call, kernels."""
    first_name = events[0]["name"]
    starts = [i for i, e in enumerate(events) if e["name"] == first_name]
    durations, tails, gaps, counts = [], [], [], []
    for a, b in zip(starts, starts[1:] + [len(events)]):
        call = events[a:b]
        first_end = call[0]["ts"] + call[0]["dur"]
        last_end = max(e["ts"] + e["dur"] for e in call)
        durations.append(call[0]["dur"])
        tails.append(last_end - first_end)
        counts.append(len(call))
        if b < len(events):
            gaps.append(events[b]["ts"] - last_end)
    median = lambda x: statistics.median(x) if x else float("nan")  # noqa: E731
    return median(durations), median(tails), median(gaps), median(counts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", help="comma-separated problem names of the grid")
    ap.add_argument("--problems", default=os.path.join(os.path.dirname(__file__), "problems.txt"))
    ap.add_argument("--peers", default="sdpa_cudnn", help="comma-separated peers besides fmha_splitk_py")
    ap.add_argument("--replays", type=int, default=4)
    args = ap.parse_args()
    problems = {p["name"]: p for p in peers.parse_problems(args.problems)}
    who = ["fmha_splitk_py"] + [p for p in args.peers.split(",") if p]
    print(f"{'problem':24s} {'who':16s} {'first us':>9s} {'tail us':>8s} {'gap us':>7s} {'per call':>9s} kernels")
    for name in args.names.split(","):
        problem = problems[name]
        lens = peers.lengths_of(problem, problems)
        per_set = 2 * problem["batch"] * max(lens) * problem["heads_kv"] * problem["head_dim"] * 2
        rotations = max(1, min(peers.MAX_ROTATIONS, math.ceil(peers.ROTATION_BYTES / per_set)))
        generator = torch.Generator(device="cuda")
        generator.manual_seed(1)
        sets = [peers.make_inputs(problem, lens, generator) for _ in range(rotations)]
        for peer in who:
            try:
                calls = [peers.PEERS[peer](problem, lens, *s) for s in sets]
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for c in calls:  # warm-up outside the capture
                        c()
                torch.cuda.current_stream().wait_stream(stream)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for c in calls:
                        c()
                graph.replay()
                torch.cuda.synchronize()
                events = kernel_events(graph, args.replays)
                span = (events[-1]["ts"] + events[-1]["dur"] - events[0]["ts"]) / (args.replays * len(calls))
                first, tail, gap, count = per_call(events)
                print(f"{name:24s} {peer:16s} {first:9.2f} {tail:8.2f} {gap:7.2f} {span:9.2f} {count:.0f}")
            except Exception as e:  # a peer that cannot run or be captured
                print(f"{name:24s} {peer:16s} failed: {str(e).strip().splitlines()[0][:100]}")
            finally:
                torch.cuda.synchronize()
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
