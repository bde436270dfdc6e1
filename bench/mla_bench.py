#!/usr/bin/env python3
"""Times MLA decode (FMHA_FLAG_V_FROM_K: Dqk 576, Dv 512, one latent head)
through the Python binding on the CUDA backend, for the CUDA quantisation
and MLA issue's grid: Hq 16, page size 64, B in {64, 128, 256}, L in {1024,
4096, 8192}, and B=128 with lengths uniform in 1..8192 beside the uniform
batch of the same total keys. With --fp8, two fp8 rows beside each bf16 one
of the same run: `_fp8` (kind mla_fp8), the issue's MLA fp8: Q and latents
E4M3FN codes with per-tensor float32 scales (device scalars), P rounded to
fp8 too (FMHA_FLAG_FP8_QK | FMHA_FLAG_FP8_PV); and `_fp8kv` (kind
mla_fp8kv): fp8 latents beside bf16 Q, P in 16 bits.

Timing as bench/peers.py: several input sets (together > 8x the 60 MB L2)
captured into one CUDA graph, one run per set, median per call over >= 50
replays. Each problem's first set is checked against a float32 reference
on two sequences. Prints one line per problem and writes --out JSON.

With --peers, PyTorch SDPA (each backend forced, as bench/peers.py) is
timed on each bf16 problem over dense copies of the same sets: Q as [B, 16,
1, 576], the latents gathered from their pages into [B, 1, L, 576] (V their
first 512 dims, a view), native GQA, a key-padding mask for varying
lengths; checked against the same reference. The issue's floor for fp8 is
SDPA on dequantised copies, which is the bf16 row's shape and time: an fp8
row's "peers" are its bf16 row's ("peers_from" names it). (Written in a
session without a device: not yet run.)

Usage: FMHA_SPLITK_LIBRARY=.../libfmha_splitk.so PYTHONPATH=python \\
       python3 bench/mla_bench.py [--out mla.json] [--read-gbps 4540] [--fp8] [--peers]
       [--only NAME,...]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import fmha_splitk
from peers import time_calls  # bench/peers.py: graph capture and timing of the peers

L2_BYTES = 60 * 2**20
DQK, DV, HQ, PAGE = 576, 512, 16, 64


def lcg_lengths(batch, max_len, seed=12345):
    x, out = seed, []
    for _ in range(batch):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(1 + (x >> 33) % max_len)
    return out


def make_set(lens, gen, fp8=False, fp8_q=False):
    batch = len(lens)
    pages_per_seq = -(-max(lens) // PAGE)
    num_pages = sum(-(-n // PAGE) for n in lens)
    cache = torch.randn(num_pages * PAGE, 1, DQK, generator=gen, device="cuda").to(torch.bfloat16)
    scale = None
    if fp8:
        # Codes of the bf16 latents scaled into E4M3FN's range; the
        # reference reads the dequantised values.
        scale = (cache.float().abs().amax() / 448.0).reshape(1)
        cache = (cache.float() / scale).to(torch.float8_e4m3fn).view(torch.uint8)
    perm = torch.randperm(num_pages, generator=gen, device="cuda").to(torch.int32)
    table = torch.zeros(batch, pages_per_seq, dtype=torch.int32, device="cuda")
    at = 0
    for b, n in enumerate(lens):
        p = -(-n // PAGE)
        table[b, :p] = perm[at:at + p]
        at += p
    q = torch.randn(batch, 1, HQ, DQK, generator=gen, device="cuda").to(torch.bfloat16)
    q_scale = None
    if fp8_q:
        q_scale = (q.float().abs().amax() / 448.0).reshape(1)
        q = (q.float() / q_scale).to(torch.float8_e4m3fn)
    o = torch.empty(batch, 1, HQ, DV, dtype=torch.bfloat16, device="cuda")
    return dict(q=q, q_scale=q_scale, k=cache, scale=scale, table=table, o=o, num_pages=num_pages,
                pages_per_seq=pages_per_seq)


def reference(s, lens, b):
    n = lens[b]
    rows = (s["table"][b, :(n + PAGE - 1) // PAGE].long()[:, None] * PAGE + torch.arange(PAGE, device="cuda")).reshape(-1)[:n]
    lat = s["k"][rows, 0]
    lat = lat.view(torch.float8_e4m3fn).float() * s["scale"] if s["scale"] is not None else lat.float()  # [n, 576]
    q = s["q"][b, 0].float()                             # [16, 576]
    if s["q_scale"] is not None:
        q = q * s["q_scale"]
    p = torch.softmax(q @ lat.T * DQK ** -0.5, dim=-1)
    return p @ lat[:, :DV]


PEER_BACKENDS = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION,
                 "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}


def dense_copy(s, lens):
    """A set as SDPA takes it: Q [B, 16, 1, 576] and the latents gathered
    from their pages into [B, 1, Lmax, 576], bf16 (fp8 dequantised)."""
    batch, lmax = len(lens), max(lens)
    rows = (s["table"].long()[:, :, None] * PAGE + torch.arange(PAGE, device="cuda")).reshape(batch, -1)[:, :lmax]
    lat = s["k"][rows, 0]  # [B, Lmax, 576]; past a sequence's end: page 0's rows, masked
    if s["scale"] is not None:
        lat = (lat.view(torch.float8_e4m3fn).float() * s["scale"]).to(torch.bfloat16)
    q = s["q"]
    if s["q_scale"] is not None:
        q = (q.float() * s["q_scale"]).to(torch.bfloat16)
    return q.transpose(1, 2).contiguous(), lat[:, None].contiguous()


def time_peers(data, lens, replays):
    """{peer: median us per call or None}, {peer: why not} for SDPA on dense copies of `data`."""
    copies = [dense_copy(d, lens) for d in data]
    mask = None
    if len(set(lens)) > 1:
        lengths = torch.tensor(lens, device="cuda")
        mask = (torch.arange(max(lens), device="cuda")[None, :] < lengths[:, None])[:, None, None, :]
    refs = {b: reference(data[0], lens, b) for b in (0, len(lens) - 1)}
    times, errors = {}, {}
    for peer, backend in PEER_BACKENDS.items():
        def make(q, kv, backend=backend):
            def call():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, kv, kv[..., :DV], attn_mask=mask, scale=DQK ** -0.5,
                                                          enable_gqa=True)
            return call
        calls = [make(q, kv) for q, kv in copies]
        times[peer] = None
        try:
            out = calls[0]()
            err = max(((out[b, :, 0].float() - ref).norm() / ref.norm()).item() for b, ref in refs.items())
            if not err < 2e-2:
                errors[peer] = f"wrong result: relative error {err:.3g}"
                continue
            times[peer] = time_calls(calls, replays)[0]
        except Exception as e:  # record why the peer cannot run this problem
            lines = str(e).strip().splitlines()
            errors[peer] = (lines[0] if lines else type(e).__name__)[:300]
        finally:
            torch.cuda.synchronize()
    del copies
    torch.cuda.empty_cache()
    return times, errors


def run_problem(name, lens, replays, gen, fp8=False, fp8_q=False, peers=False):
    seq_bytes = sum(lens) * DQK * (1 if fp8 else 2)
    sets = max(2, min(32, -(-8 * L2_BYTES // seq_bytes)))
    data = [make_set(lens, gen, fp8, fp8_q) for _ in range(sets)]
    fp8_compute = dict(q_dtype="fp8", flags=["v_from_k", "fp8_qk", "fp8_pv"], q_scale_granularity="per_tensor")
    kv_len = torch.tensor(lens, dtype=torch.int32, device="cuda")
    s0 = data[0]
    plan = fmha_splitk.Plan(backend="cuda", batch=len(lens), max_q_seqlen=1, max_kv_seqlen=max(lens), heads_q=HQ,
                            heads_kv=1, head_dim_qk=DQK, head_dim_v=DV,
                            **(fp8_compute if fp8_q else dict(q_dtype="bf16", flags=["v_from_k"])),
                            kv_layout=fmha_splitk.KvLayout.PAGED, page_size=PAGE,
                            num_pages=max(d["num_pages"] for d in data),
                            max_pages_per_seq=max(d["pages_per_seq"] for d in data), kv_seqlen_hint=lens,
                            **(dict(kv_quant="fp8", fp8_format="e4m3fn", kv_scale_kind="f32",
                                    kv_scale_granularity="per_tensor") if fp8 else {}))
    stream = torch.cuda.Stream()
    # Every set's cache must hold num_pages pages: pad the smaller ones.
    pages = max(d["num_pages"] for d in data)
    for d in data:
        if d["num_pages"] < pages:
            d["k"] = torch.cat([d["k"], torch.zeros((pages - d["num_pages"]) * PAGE, 1, DQK, dtype=d["k"].dtype,
                                                    device="cuda")])
    call = lambda d: plan.run(q=d["q"], k=d["k"], o=d["o"], kv_seqlen=kv_len, block_table=d["table"],
                              k_scale=d["scale"], q_scale=d["q_scale"], stream=stream.cuda_stream)
    with torch.cuda.stream(stream):
        for d in data:
            call(d)
    torch.cuda.synchronize()
    err = 0.0
    for b in (0, len(lens) - 1):
        ref = reference(s0, lens, b)
        err = max(err, ((s0["o"][b, 0].float() - ref).norm() / ref.norm()).item())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for d in data:
            call(d)
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):  # replay, and time, on the captured stream
        for _ in range(replays):
            start.record(stream)
            graph.replay()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0 / sets)
    info = plan.info
    plan.close() if hasattr(plan, "close") else None
    kind = ("mla" if len(set(lens)) == 1 else "mla_varlen") if not fp8 else "mla_fp8" if fp8_q else "mla_fp8kv"
    row = dict(name=name, kind=kind, dtype="fp8" if fp8 else "bf16",
               reference=name[:name.rindex("_fp8")] if fp8 else None, page_size=PAGE,
               kv_bytes=seq_bytes, time_us=statistics.median(times), rel_err=err,
               kernel=str(getattr(info, "kernel_name", getattr(info, "kernel", ""))), sets=sets)
    if peers:
        row["peers"], row["peer_errors"] = time_peers(data, lens, replays)
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="mla.json")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--read-gbps", type=float, default=0.0, help="read bandwidth of the same run, for pct_read")
    ap.add_argument("--fp8", action="store_true", help="also time fp8 latents (kind mla_fp8) beside each bf16 problem")
    ap.add_argument("--peers", action="store_true", help="also time PyTorch SDPA on dense bf16 copies")
    ap.add_argument("--only", default="", help="comma-separated problem names (e.g. mla_b128_l4096_fp8): run only those")
    args = ap.parse_args()
    problems = [(f"mla_b{b}_l{n}", [n] * b) for b in (64, 128, 256) for n in (1024, 4096, 8192)]
    varlen = lcg_lengths(128, 8192)
    mean = sum(varlen) // len(varlen)
    problems += [("mla_varlen_b128_l8192", varlen), ("mla_uniform_b128_equal", [mean] * 127 + [sum(varlen) - 127 * mean])]
    runs = [(name, lens, False, False) for name, lens in problems]
    if args.fp8:
        uniform = [(name, lens) for name, lens in problems if "varlen" not in name and "equal" not in name]
        runs += [(name + "_fp8", lens, True, True) for name, lens in uniform]
        runs += [(name + "_fp8kv", lens, True, False) for name, lens in uniform]
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {name for name, *_ in runs}
        if unknown:
            ap.error(f"--only: unknown problems {sorted(unknown)} (the _fp8 / _fp8kv rows need --fp8)")
        runs = [r for r in runs if r[0] in wanted]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    results = []
    for name, lens, fp8, fp8_q in runs:
        try:
            r = run_problem(name, lens, args.replays, gen, fp8, fp8_q, peers=args.peers and not fp8)
        except Exception as e:  # report and go on
            print(f"{name:26s} FAILED: {e}", flush=True)
            continue
        if args.peers and fp8:
            # SDPA on the dequantised copy: the bf16 row's shape and time.
            bf16 = next((x for x in results if x["name"] == r["reference"]), None)
            if bf16 is not None:
                r["peers"], r["peers_from"] = dict(bf16.get("peers", {})), bf16["name"]
        if args.read_gbps > 0:
            r["pct_read"] = 100.0 * r["kv_bytes"] / (r["time_us"] * 1e-6) / (args.read_gbps * 1e9)
        results.append(r)
        peer_times = "".join(f"  {p} {t:.1f}" for p, t in r.get("peers", {}).items() if t is not None)
        print(f"{name:26s} {r['kv_bytes'] / 2**20:8.1f} MiB {r['time_us']:9.2f} us "
              f"{r.get('pct_read', 0):6.1f}% read  err {r['rel_err']:.2e}  {r['kernel']}{peer_times}", flush=True)
    json.dump(dict(problems=results), open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
