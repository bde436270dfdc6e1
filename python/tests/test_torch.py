"""PyTorch tensors through DLPack: CPU tensors (bf16 and fp16) always when
torch is installed, and the CUDA backend when torch sees a GPU (the GPU
machine: `python3 -m pytest python/tests/test_torch.py`). Skipped as a whole
where torch is absent (CI)."""
import math

import pytest

torch = pytest.importorskip("torch")

import fmha_splitk  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")


def reference(q, k, v, kv_lens=None):
    """float64 attention: Q [B, Mq, Hq, D], K/V [B, L, Hkv, D] ->
    O [B, Mq, Hq, D], LSE [B, Hq, Mq]."""
    q, k, v = (x.double().cpu() for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    s = torch.einsum("bmhd,blhd->bhml", q, k) / math.sqrt(q.shape[-1])
    if kv_lens is not None:
        keys = torch.arange(k.shape[1])[None, :] < torch.as_tensor(kv_lens).cpu()[:, None]
        s = s.masked_fill(~keys[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.einsum("bhml,blhd->bmhd", torch.softmax(s, dim=-1), v)
    return o, lse


def relative_error(out, ref):
    out, ref = out.double().cpu(), ref.double().cpu()
    return ((out - ref).norm() / ref.norm()).item()


def problem(dtype, backend, batch, heads_q, heads_kv, head_dim, kv_len, **extra):
    return dict(backend=backend, batch=batch, max_q_seqlen=1, max_kv_seqlen=kv_len, heads_q=heads_q,
                heads_kv=heads_kv, head_dim_qk=head_dim, q_dtype=dtype, **extra)


@pytest.mark.parametrize("dtype,bound", [(torch.bfloat16, 2e-3), (torch.float16, 1e-3)])
def test_cpu_tensors(dtype, bound):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 1, 8, 64, generator=gen).to(dtype)
    k = torch.randn(2, 130, 2, 64, generator=gen).to(dtype)
    v = torch.randn(2, 130, 2, 64, generator=gen).to(dtype)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((2, 8, 1), float("nan"))
    with fmha_splitk.Plan(**problem(dtype, "cpu", 2, 8, 2, 64, 130, split_k=3)) as plan:
        plan.run(q=q, k=k, v=v, o=o, lse=lse)
    ref_o, ref_lse = reference(q, k, v)
    assert relative_error(o, ref_o) < bound
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-4, atol=1e-4)


def test_cpu_merge():
    gen = torch.Generator().manual_seed(1)
    o_parts = torch.randn(3, 2, 1, 4, 32, generator=gen)
    lse_parts = torch.randn(3, 2, 4, 1, generator=gen)
    o = torch.empty(2, 1, 4, 32, dtype=torch.bfloat16)
    lse = torch.empty(2, 4, 1)
    fmha_splitk.merge(o_parts, lse_parts, o, lse)
    ref_lse = torch.logsumexp(lse_parts.double(), dim=0)
    weights = torch.exp(lse_parts.double() - ref_lse).permute(0, 1, 3, 2)[..., None]
    ref_o = (weights * o_parts.double()).sum(0)
    assert relative_error(o, ref_o) < 5e-3
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)


def test_tensors_that_require_grad_are_refused():
    q = torch.zeros(1, 1, 2, 16, dtype=torch.float16, requires_grad=True)
    with fmha_splitk.Plan(**problem(torch.float16, "cpu", 1, 2, 2, 16, 4)) as plan:
        with pytest.raises(Exception, match="grad"):
            plan.run(q=q, k=q.detach(), v=q.detach(), o=torch.zeros(1, 1, 2, 16, dtype=torch.float16))


@cuda
@pytest.mark.parametrize("split_k", [0, 1, 4])
def test_cuda_decode(split_k):
    gen = torch.Generator(device="cuda").manual_seed(2)
    opts = dict(device="cuda", dtype=torch.bfloat16, generator=gen)
    lens = torch.tensor([1, 700, 4096], dtype=torch.int32, device="cuda")
    q = torch.randn(3, 1, 32, 128, **opts)
    k = torch.randn(3, 4096, 8, 128, **opts)
    v = torch.randn(3, 4096, 8, 128, **opts)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((3, 32, 1), float("nan"), device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with fmha_splitk.Plan(**problem(torch.bfloat16, "cuda", 3, 32, 8, 128, 4096, split_k=split_k,
                                    kv_layout="padded")) as plan:
        assert plan.info.backend == fmha_splitk.Backend.CUDA
        workspace = torch.empty(max(1, plan.workspace_size), dtype=torch.uint8, device="cuda")
        with torch.cuda.stream(stream):
            plan.run(q=q, k=k, v=v, o=o, lse=lse, kv_seqlen=lens, workspace=workspace, stream=stream)
        stream.synchronize()
    ref_o, ref_lse = reference(q, k, v, kv_lens=lens)
    assert relative_error(o, ref_o) < 2e-3
    torch.testing.assert_close(lse.double().cpu(), ref_lse, rtol=1e-3, atol=1e-3)


@cuda
def test_cuda_default_stream_and_plan_workspace():
    gen = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(2, 1, 8, 64, device="cuda", dtype=torch.float16, generator=gen)
    k = torch.randn(2, 9000, 1, 64, device="cuda", dtype=torch.float16, generator=gen)
    v = torch.randn(2, 9000, 1, 64, device="cuda", dtype=torch.float16, generator=gen)
    o = torch.empty_like(q)
    with fmha_splitk.Plan(**problem(torch.float16, "auto", 2, 8, 1, 64, 9000)) as plan:
        plan.run(q=q, k=k, v=v, o=o)  # NULL stream, the plan's own workspace
        torch.cuda.synchronize()
    ref_o, _ = reference(q, k, v)
    assert relative_error(o, ref_o) < 1e-3


@cuda
def test_cuda_graph_capture():
    gen = torch.Generator(device="cuda").manual_seed(4)
    q = torch.randn(4, 1, 16, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(4, 2048, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(4, 2048, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    o = torch.zeros_like(q)
    with fmha_splitk.Plan(**problem(torch.bfloat16, "cuda", 4, 16, 4, 128, 2048)) as plan:
        workspace = torch.empty(max(1, plan.workspace_size), dtype=torch.uint8, device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            plan.run(q=q, k=k, v=v, o=o, workspace=workspace, stream=torch.cuda.current_stream())
        q.copy_(torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=gen))
        graph.replay()
        torch.cuda.synchronize()
    ref_o, _ = reference(q, k, v)
    assert relative_error(o, ref_o) < 2e-3


@cuda
def test_cuda_merge_and_backward():
    gen = torch.Generator(device="cuda").manual_seed(5)
    o_parts = torch.randn(4, 2, 1, 8, 64, device="cuda", generator=gen)
    lse_parts = torch.randn(4, 2, 8, 1, device="cuda", generator=gen)
    o = torch.empty(2, 1, 8, 64, device="cuda")
    lse = torch.empty(2, 8, 1, device="cuda")
    fmha_splitk.merge(list(o_parts), list(lse_parts), o, lse)
    grad_o = torch.randn_like(o)
    grad_o_parts = torch.empty_like(o_parts)
    grad_lse_parts = torch.empty_like(lse_parts)
    fmha_splitk.merge_backward(o_parts, lse_parts, o, lse, grad_o, grad_o_partials=grad_o_parts,
                               grad_lse_partials=grad_lse_parts)
    torch.cuda.synchronize()
    # The same through autograd, in float64.
    o64 = o_parts.double().cpu().requires_grad_()
    lse64 = lse_parts.double().cpu().requires_grad_()
    merged_lse = torch.logsumexp(lse64, dim=0)
    weights = torch.exp(lse64 - merged_lse).permute(0, 1, 3, 2)[..., None]
    merged_o = (weights * o64).sum(0)
    assert relative_error(o, merged_o.detach()) < 1e-5
    merged_o.backward(grad_o.double().cpu())
    assert relative_error(grad_o_parts, o64.grad) < 1e-5
    assert relative_error(grad_lse_parts, lse64.grad) < 1e-4


@cuda
def test_cuda_autotune_and_tuning_cache():
    gen = torch.Generator(device="cuda").manual_seed(6)
    q = torch.randn(2, 1, 16, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(2, 4096, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(2, 4096, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((2, 16, 1), float("nan"), device="cuda")
    spec = problem(torch.bfloat16, "cuda", 2, 16, 4, 128, 4096)
    fmha_splitk.tuning_cache_clear()
    try:
        with fmha_splitk.Plan(**spec) as plan:
            stream = torch.cuda.current_stream()
            chosen = plan.autotune(q, k, v, o, lse=lse, warmup_runs=1, timed_runs=5, stream=stream)
            # Autotune waited for the stream: O holds the winner's result.
            assert plan.info.config_source == fmha_splitk.ConfigSource.AUTOTUNE
            assert chosen.selected and chosen.tune_state == fmha_splitk.TuneState.ACCEPTED
            ref_o, ref_lse = reference(q, k, v)
            assert relative_error(o, ref_o) < 2e-3
            torch.testing.assert_close(lse.double().cpu(), ref_lse, rtol=1e-3, atol=1e-3)
            # The winner may need more workspace than the heuristic's choice.
            workspace = torch.empty(max(1, plan.workspace_size), dtype=torch.uint8, device="cuda")
            o.fill_(float("nan"))
            plan.run(q=q, k=k, v=v, o=o, workspace=workspace, stream=stream)
            torch.cuda.synchronize()
            assert relative_error(o, ref_o) < 2e-3
        saved = fmha_splitk.tuning_cache_save()
        assert fmha_splitk.tuning_cache_entries() == 1
        fmha_splitk.tuning_cache_clear()
        fmha_splitk.tuning_cache_load(saved)
        with fmha_splitk.Plan(**spec) as again:
            assert again.info.config_source == fmha_splitk.ConfigSource.TUNING_CACHE
            assert again.info.config_index == chosen.index
    finally:
        fmha_splitk.tuning_cache_clear()
