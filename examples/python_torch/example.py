#!/usr/bin/env python3
"""Decode attention on PyTorch tensors through the fmha_splitk Python binding.

One decode step of a GQA model (32 query heads, 8 K/V heads, head dim 128)
over a padded KV cache whose sequences have different lengths, on the GPU
when torch sees one (the CUDA backend), else on the CPU backend; the result
is checked against PyTorch's own attention.

    FMHA_SPLITK_LIBRARY=build/lib/libfmha_splitk.so.0 PYTHONPATH=python \
        python3 examples/python_torch/example.py
"""
import torch
import torch.nn.functional as F

import fmha_splitk

device = "cuda" if torch.cuda.is_available() else "cpu"
batch, heads_q, heads_kv, head_dim, capacity = 4, 32, 8, 128, 2048
lengths = torch.tensor([2048, 1000, 17, 1], dtype=torch.int32, device=device)

torch.manual_seed(0)
q = torch.randn(batch, 1, heads_q, head_dim, dtype=torch.bfloat16, device=device)  # [B, Mq, Hq, D]
k = torch.randn(batch, capacity, heads_kv, head_dim, dtype=torch.bfloat16, device=device)  # [B, L, Hkv, D]
v = torch.randn_like(k)
o = torch.empty_like(q)
lse = torch.empty(batch, heads_q, 1, dtype=torch.float32, device=device)  # [B, Hq, Mq]

with fmha_splitk.Plan(backend=device, batch=batch, max_q_seqlen=1, max_kv_seqlen=capacity, heads_q=heads_q,
                      heads_kv=heads_kv, head_dim_qk=head_dim, q_dtype=torch.bfloat16, kv_layout="padded",
                      kv_seqlen_hint=lengths.tolist()) as plan:
    print(f"fmha_splitk {fmha_splitk.version()}: {plan.info}")
    # The caller's workspace must be 256-byte aligned: CUDA allocations are,
    # PyTorch's CPU ones need not be, so on the CPU the plan's own is used.
    workspace = torch.empty(max(1, plan.workspace_size), dtype=torch.uint8, device=device) if device == "cuda" else None
    stream = torch.cuda.current_stream() if device == "cuda" else None
    plan.run(q=q, k=k, v=v, o=o, lse=lse, kv_seqlen=lengths, workspace=workspace, stream=stream)

# PyTorch's attention on [B, H, L, D] with the padding masked out.
visible = torch.arange(capacity, device=device)[None, :] < lengths[:, None]
expected = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                          v.transpose(1, 2).float(), attn_mask=visible[:, None, None, :],
                                          enable_gqa=True).transpose(1, 2)
error = ((o.float() - expected).norm() / expected.norm()).item()
print(f"relative error against torch: {error:.2e}")
assert error < 1e-2, error
