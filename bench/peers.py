#!/usr/bin/env python3
"""Times the peers of fmha_splitk on the benchmark grid (bench/problems.txt).

Peers: PyTorch scaled_dot_product_attention with each backend forced (cuDNN,
flash, memory-efficient), flex_attention compiled with an explicit
128-token BlockMask (without one it does not split the KV), and fmha_splitk
itself through its Python binding (fmha_splitk_py: the same tensors and
checks; the library from FMHA_SPLITK_LIBRARY or build/lib). Each peer gets
the layout it is fastest with ([B, H, L, D] contiguous) and native GQA
(enable_gqa=True); a peer that refuses a problem is recorded with its error.

Timing follows docs/performance.md: several rotated input sets (together well
over the 60 MB L2) are captured into one CUDA graph, one call per set; the
graph is replayed >= 50 times between CUDA events and the median per call is
kept. Where capture fails the same is done eagerly (marked "eager"). Each
result is checked against a float32 reference on two sequences.

Usage: python3 bench/peers.py [--problems bench/problems.txt] [--only NAME,...]
                              [--out peers.json] [--replays 60]
"""
import argparse
import json
import math
import os
import statistics
import sys
import traceback

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

L2_BYTES = 60 * 2**20
ROTATION_BYTES = 8 * L2_BYTES  # inputs cycled per graph replay
MAX_ROTATIONS = 64


def parse_problems(path):
    problems = []
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        f = line.split()
        problems.append(dict(name=f[0], kind=f[1], batch=int(f[2]), kv_len=int(f[3]),
                             heads_q=int(f[4]), heads_kv=int(f[5]), head_dim=int(f[6]),
                             q_len=int(f[7]), page_size=int(f[8]), lengths=f[9]))
    return problems


def random_lengths(batch, kv_len):
    """The generator bench/problems.txt specifies (shared with the C++ bench)."""
    x, out = 0, []
    for _ in range(batch):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(1 + (x >> 33) % kv_len)
    return out


def lengths_of(problem, by_name):
    spec = problem["lengths"]
    if spec == "uniform":
        return [problem["kv_len"]] * problem["batch"]
    if spec == "random":
        return random_lengths(problem["batch"], problem["kv_len"])
    if spec.startswith("equal_to:"):
        other = by_name[spec.split(":", 1)[1]]
        lens = lengths_of(other, by_name)
        mean = round(sum(lens) / len(lens))
        return [mean] * problem["batch"]
    raise ValueError(f"{problem['name']}: unknown lengths '{spec}'")


def kv_bytes(problem, lens):
    return 2 * sum(lens) * problem["heads_kv"] * problem["head_dim"] * 2


def make_inputs(problem, lens, generator):
    b, hq, hkv, d, mq = (problem[k] for k in ("batch", "heads_q", "heads_kv", "head_dim", "q_len"))
    lmax = max(lens)
    opts = dict(device="cuda", dtype=torch.bfloat16)
    q = torch.randn(b, hq, mq, d, generator=generator, **opts)
    k = torch.randn(b, hkv, lmax, d, generator=generator, **opts)
    v = torch.randn(b, hkv, lmax, d, generator=generator, **opts)
    return q, k, v


def reference(q, k, v, lens, rows):
    """float32 attention for the sequences in `rows` (bottom-right: no mask)."""
    outs = []
    rep = q.shape[1] // k.shape[1]
    for b in rows:
        n = lens[b]
        qb = q[b].float()
        kb = k[b, :, :n].float().repeat_interleave(rep, dim=0)
        vb = v[b, :, :n].float().repeat_interleave(rep, dim=0)
        s = (qb @ kb.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        outs.append(torch.softmax(s, dim=-1) @ vb)
    return torch.stack(outs)


def sdpa_peer(backend):
    def build(problem, lens, q, k, v):
        mask = None
        if len(set(lens)) > 1:
            idx = torch.arange(k.shape[2], device="cuda")
            mask = (idx[None, :] < torch.tensor(lens, device="cuda")[:, None])[:, None, None, :]
            mask = mask.expand(q.shape[0], 1, q.shape[2], k.shape[2])

        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return call
    return build


_flex_compiled = None
_flex_problem = None


def flex_peer(problem, lens, q, k, v):
    # One compilation per problem, from a reset compiler: with dynamic=False
    # every new shape recompiles, and past dynamo's recompile limit (8)
    # the call silently runs flex_attention's eager path, 10-30x slower
    # (the grid runs of 2026-12-05 and before timed that for later problems).
    global _flex_compiled, _flex_problem
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if _flex_problem != problem["name"]:
        torch._dynamo.reset()
        _flex_compiled = torch.compile(flex_attention, dynamic=False)
        _flex_problem = problem["name"]
    lens_t = torch.tensor(lens, device="cuda", dtype=torch.int32)

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx < lens_t[b]
    block_mask = create_block_mask(mask_mod, q.shape[0], None, q.shape[2], k.shape[2],
                                   device="cuda", BLOCK_SIZE=128)

    def call():
        return _flex_compiled(q, k, v, block_mask=block_mask, enable_gqa=True)
    return call


_binding_plans = {}


def fmha_splitk_py_peer(problem, lens, q, k, v):
    """Ours through the Python binding (python/fmha_splitk, the library that
    FMHA_SPLITK_LIBRARY names or build/lib holds): the peers' [B, H, L, D]
    tensors seen as [B, L, H, D] (strided views, no copy); padded lengths
    when they vary. One plan per problem, shared by its input sets, running
    on its own workspace (as `fmha-splitk bench` does: split runs merge in
    the forward kernel); each call runs on the current stream (the graph's
    when captured)."""
    try:
        import fmha_splitk
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        import fmha_splitk
    varying = len(set(lens)) > 1
    if problem["name"] not in _binding_plans:
        _binding_plans.clear()  # the previous problem's plan
        plan = fmha_splitk.Plan(backend="cuda", batch=q.shape[0], max_q_seqlen=q.shape[2],
                                max_kv_seqlen=k.shape[2], heads_q=q.shape[1], heads_kv=k.shape[1],
                                head_dim_qk=q.shape[3], q_dtype=q.dtype,
                                kv_layout="padded" if varying else "dense",
                                kv_seqlen_hint=lens if varying else None)
        kv_seqlen = torch.tensor(lens, dtype=torch.int32, device="cuda") if varying else None
        _binding_plans[problem["name"]] = (plan, kv_seqlen)
    plan, kv_seqlen = _binding_plans[problem["name"]]
    o = torch.empty(q.shape[0], q.shape[2], q.shape[1], q.shape[3], dtype=q.dtype, device="cuda")
    q_, k_, v_ = (t.transpose(1, 2) for t in (q, k, v))

    def call():
        plan.run(q=q_, k=k_, v=v_, o=o, kv_seqlen=kv_seqlen, stream=torch.cuda.current_stream())
        return o.transpose(1, 2)
    return call


PEERS = {
    "sdpa_cudnn": sdpa_peer(SDPBackend.CUDNN_ATTENTION),
    "sdpa_flash": sdpa_peer(SDPBackend.FLASH_ATTENTION),
    "sdpa_efficient": sdpa_peer(SDPBackend.EFFICIENT_ATTENTION),
    "flex_attention": flex_peer,
    "fmha_splitk_py": fmha_splitk_py_peer,
}


def time_calls(calls, replays):
    """Median microseconds per call over graph replays (eager if capture fails)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            for c in calls:
                c()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    mode = "graph"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for c in calls:
                c()
        run = graph.replay
        run()
    except Exception:  # a peer that cannot be captured is timed eagerly
        mode = "eager"
        torch.cuda.synchronize()

        def run():
            for c in calls:
                c()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0 / len(calls))
    return statistics.median(times), mode


def bench_problem(problem, by_name, peers, replays):
    lens = lengths_of(problem, by_name)
    result = {"kv_bytes": kv_bytes(problem, lens), "peers": {}}
    if problem["page_size"] != 0:
        for name in peers:
            result["peers"][name] = {"error": "no paged KV cache support"}
        if "fmha_splitk_py" in peers:
            result["peers"]["fmha_splitk_py"] = {"error": "paged: not run here (fmha-splitk bench times it)"}
        return result
    per_set = 2 * problem["batch"] * max(lens) * problem["heads_kv"] * problem["head_dim"] * 2
    rotations = max(1, min(MAX_ROTATIONS, math.ceil(ROTATION_BYTES / per_set)))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    sets = [make_inputs(problem, lens, gen) for _ in range(rotations)]
    rows = sorted({0, problem["batch"] - 1})
    ref = reference(*sets[0], lens, rows)
    for name in peers:
        try:
            calls = [PEERS[name](problem, lens, *s) for s in sets]
            out = calls[0]()
            err = ((out[rows].float() - ref).norm() / ref.norm()).item()
            if not math.isfinite(err) or err > 2e-2:
                result["peers"][name] = {"error": f"wrong result: relative error {err:.3g}"}
                continue
            t, mode = time_calls(calls, replays)
            result["peers"][name] = {"time_us": t, "mode": mode, "rel_err": err}
        except Exception as e:  # record why the peer cannot run this problem
            msg = str(e).strip().splitlines()
            result["peers"][name] = {"error": (msg[0] if msg else type(e).__name__)[:300]}
        finally:
            torch.cuda.synchronize()
    del sets
    torch.cuda.empty_cache()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", default=os.path.join(os.path.dirname(__file__), "problems.txt"))
    ap.add_argument("--only", default="", help="comma-separated problem names")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated peers")
    ap.add_argument("--out", default="peers.json")
    ap.add_argument("--replays", type=int, default=60)
    args = ap.parse_args()
    problems = parse_problems(args.problems)
    by_name = {p["name"]: p for p in problems}
    only = set(filter(None, args.only.split(",")))
    peers = [p for p in args.peers.split(",") if p]
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "problems": {}}
    for p in problems:
        if only and p["name"] not in only:
            continue
        try:
            out["problems"][p["name"]] = bench_problem(p, by_name, peers, args.replays)
        except Exception:
            traceback.print_exc()
            out["problems"][p["name"]] = {"error": "benchmark failed"}
        row = out["problems"][p["name"]]
        cells = [f"{n}={v['time_us']:.1f}us" if "time_us" in v else f"{n}=n/a"
                 for n, v in row.get("peers", {}).items()]
        print(f"{p['name']:26s} " + " ".join(cells), flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
