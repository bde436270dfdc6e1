"""Plan and run on the CPU backend with NumPy, against the float64 oracle:
dense, GQA/MQA (fewer K/V heads or stride-0 heads), split counts 1, 2, more
than the keys and the plan's own, padded, paged and gappy key layouts with
variable query counts, a causal mask, bf16 through reinterpret(), a
caller's workspace, and the plan's report."""
import numpy as np
import pytest

import fmha_splitk
import reference
from conftest import aligned_bytes, bf16_bits, bf16_values, relative_error

F16_BOUND = 1e-3  # DESIGN section 6: fp16 inputs
BF16_BOUND = 2e-3


def random_inputs(rng, batch, q_len, heads_q, heads_kv, head_dim, kv_len, dtype=np.float16):
    q = rng.standard_normal((batch, q_len, heads_q, head_dim)).astype(dtype)
    k = rng.standard_normal((batch, kv_len, heads_kv, head_dim)).astype(dtype)
    v = rng.standard_normal((batch, kv_len, heads_kv, head_dim)).astype(dtype)
    return q, k, v


def outputs(q, dtype=np.float16):
    batch, q_len, heads_q, _ = q.shape
    o = np.full(q.shape, np.nan, dtype=dtype)
    lse = np.full((batch, heads_q, q_len), np.nan, dtype=np.float32)
    return o, lse


CASES = [
    # batch, q_len, heads_q, heads_kv, head_dim, kv_len, split_k
    pytest.param(2, 1, 4, 4, 64, 100, 1, id="mha-split1"),
    pytest.param(3, 1, 8, 2, 128, 257, 2, id="gqa-split2"),
    pytest.param(2, 1, 4, 1, 64, 5, 16, id="mqa-split-beyond-keys"),
    pytest.param(2, 4, 8, 2, 32, 300, 0, id="mq4-auto-split"),
    pytest.param(1, 1, 16, 4, 256, 1000, 7, id="d256-split7"),
]


@pytest.mark.parametrize("batch,q_len,heads_q,heads_kv,head_dim,kv_len,split_k", CASES)
def test_dense_matches_reference(rng, batch, q_len, heads_q, heads_kv, head_dim, kv_len, split_k):
    q, k, v = random_inputs(rng, batch, q_len, heads_q, heads_kv, head_dim, kv_len)
    o, lse = outputs(q)
    with fmha_splitk.Plan(backend="cpu", batch=batch, max_q_seqlen=q_len, max_kv_seqlen=kv_len, heads_q=heads_q,
                          heads_kv=heads_kv, head_dim_qk=head_dim, q_dtype="f16", split_k=split_k) as plan:
        if split_k:
            assert plan.info.split_k == split_k
        plan.run(q=q, k=k, v=v, o=o, lse=lse)
    ref_o, ref_lse = reference.attention(q, k, v)
    assert relative_error(o, ref_o) < F16_BOUND
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-4, atol=1e-4)


def test_float32_output_and_custom_scale(rng):
    q, k, v = random_inputs(rng, 2, 1, 8, 4, 64, 90)
    o, lse = outputs(q, np.float32)
    with fmha_splitk.Plan(backend="cpu", batch=2, max_q_seqlen=1, max_kv_seqlen=90, heads_q=8, heads_kv=4,
                          head_dim_qk=64, q_dtype=np.float16, o_dtype=np.float32, softmax_scale=0.3,
                          split_k=3) as plan:
        plan.run(q=q, k=k, v=v, o=o, lse=lse)
    ref_o, ref_lse = reference.attention(q, k, v, scale=0.3)
    assert relative_error(o, ref_o) < F16_BOUND
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-4, atol=1e-4)


def test_mqa_as_stride0_heads(rng):
    # K/V with Hq heads of stride 0 (np.broadcast_to: read-only arrays, which
    # NumPy 1.x does not export through DLPack: the binding reads their array
    # interface instead).
    q, k1, v1 = random_inputs(rng, 2, 1, 8, 1, 64, 70)
    k = np.broadcast_to(k1, (2, 70, 8, 64))
    v = np.broadcast_to(v1, (2, 70, 8, 64))
    assert not k.flags.writeable
    o, lse = outputs(q)
    with fmha_splitk.Plan(backend="cpu", batch=2, max_q_seqlen=1, max_kv_seqlen=70, heads_q=8, heads_kv=1,
                          head_dim_qk=64, q_dtype="f16", split_k=2) as plan:
        plan.run(q=q, k=k, v=v, o=o, lse=lse)
    ref_o, _ = reference.attention(q, k1, v1)
    assert relative_error(o, ref_o) < F16_BOUND


def test_five_dimensional_groups(rng):
    batch, groups, heads_q, heads_kv, d, n = 2, 2, 4, 2, 32, 40
    q = rng.standard_normal((batch, 1, groups, heads_q, d)).astype(np.float16)
    k = rng.standard_normal((batch, n, groups, heads_kv, d)).astype(np.float16)
    v = rng.standard_normal((batch, n, groups, heads_kv, d)).astype(np.float16)
    o = np.zeros_like(q)
    with fmha_splitk.Plan(backend="cpu", batch=batch, max_q_seqlen=1, max_kv_seqlen=n, groups=groups,
                          heads_q=heads_q, heads_kv=heads_kv, head_dim_qk=d, q_dtype="f16") as plan:
        plan.run(q=q, k=k, v=v, o=o)
    for g in range(groups):
        ref_o, _ = reference.attention(q[:, :, g], k[:, :, g], v[:, :, g])
        assert relative_error(o[:, :, g], ref_o) < F16_BOUND


def test_padded_lengths_with_hint(rng):
    lens = np.array([0, 1, 77, 200], dtype=np.int32)
    q, k, v = random_inputs(rng, 4, 1, 8, 2, 64, 200)
    o, lse = outputs(q)
    with fmha_splitk.Plan(backend="cpu", batch=4, max_q_seqlen=1, max_kv_seqlen=200, heads_q=8, heads_kv=2,
                          head_dim_qk=64, q_dtype="f16", kv_layout="padded", kv_seqlen_hint=lens) as plan:
        plan.run(q=q, k=k, v=v, o=o, lse=lse, kv_seqlen=lens)
    ref_o, ref_lse = reference.attention(q, k, v, kv_lens=lens)
    assert relative_error(o, ref_o) < F16_BOUND
    assert np.all(o[0] == 0) and np.all(lse[0] == -np.inf)  # a sequence with no key
    np.testing.assert_allclose(lse[1:], ref_lse[1:], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("page_size", [1, 16])
def test_paged_matches_reference(rng, page_size):
    batch, heads_q, heads_kv, d = 3, 8, 2, 64
    lens = np.array([33, 64, 5], dtype=np.int32)
    max_len = 64
    pages_per_seq = -(-max_len // page_size)
    num_pages = batch * pages_per_seq + 3
    k_cache = rng.standard_normal((num_pages * page_size, heads_kv, d)).astype(np.float16)
    v_cache = rng.standard_normal((num_pages * page_size, heads_kv, d)).astype(np.float16)
    # Each sequence's logical pages at shuffled physical pages.
    block_table = rng.permutation(num_pages)[:batch * pages_per_seq].reshape(batch, pages_per_seq).astype(np.int32)
    rows = block_table[:, :, None] * page_size + np.arange(page_size)  # [B, pages, page_size]
    rows = rows.reshape(batch, -1)[:, :max_len]
    k_logical, v_logical = k_cache[rows], v_cache[rows]  # [B, max_len, Hkv, D]
    q = rng.standard_normal((batch, 1, heads_q, d)).astype(np.float16)
    o, lse = outputs(q)
    with fmha_splitk.Plan(backend="cpu", batch=batch, max_q_seqlen=1, max_kv_seqlen=max_len, heads_q=heads_q,
                          heads_kv=heads_kv, head_dim_qk=d, q_dtype="f16", kv_layout=fmha_splitk.KvLayout.PAGED,
                          page_size=page_size, num_pages=num_pages, max_pages_per_seq=pages_per_seq,
                          split_k=2) as plan:
        plan.run(q=q, k=k_cache, v=v_cache, o=o, lse=lse, kv_seqlen=lens, block_table=block_table)
    ref_o, ref_lse = reference.attention(q, k_logical, v_logical, kv_lens=lens)
    assert relative_error(o, ref_o) < F16_BOUND
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-4, atol=1e-4)


def test_causal_speculative_queries(rng):
    q, k, v = random_inputs(rng, 2, 6, 4, 2, 64, 50)
    o, lse = outputs(q)
    with fmha_splitk.Plan(backend="cpu", batch=2, max_q_seqlen=6, max_kv_seqlen=50, heads_q=4, heads_kv=2,
                          head_dim_qk=64, q_dtype="f16", mask="causal", split_k=3) as plan:
        plan.run(q=q, k=k, v=v, o=o, lse=lse)
    ref_o, ref_lse = reference.attention(q, k, v, causal=True)
    assert relative_error(o, ref_o) < F16_BOUND
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-4, atol=1e-4)


def test_bf16_through_reinterpret(rng):
    q32, k32, v32 = random_inputs(rng, 2, 1, 8, 2, 128, 150, np.float32)
    q, k, v = bf16_bits(q32), bf16_bits(k32), bf16_bits(v32)
    o = np.zeros(q.shape, dtype=np.float32)
    with fmha_splitk.Plan(backend="cpu", batch=2, max_q_seqlen=1, max_kv_seqlen=150, heads_q=8, heads_kv=2,
                          head_dim_qk=128, q_dtype="bfloat16", o_dtype="f32", split_k=2) as plan:
        plan.run(q=fmha_splitk.reinterpret(q, "bfloat16"), k=fmha_splitk.reinterpret(k, "bfloat16"),
                 v=fmha_splitk.reinterpret(v, "bfloat16"), o=o)
    ref_o, _ = reference.attention(bf16_values(q), bf16_values(k), bf16_values(v))
    assert relative_error(o, ref_o) < BF16_BOUND


def test_strided_views(rng):
    # [B, H, L, D] storage seen as [B, L, H, D]: any strides but the last.
    q, _, _ = random_inputs(rng, 2, 1, 8, 2, 64, 1)
    k_bhld = rng.standard_normal((2, 2, 120, 64)).astype(np.float16)
    v_bhld = rng.standard_normal((2, 2, 120, 64)).astype(np.float16)
    k, v = k_bhld.transpose(0, 2, 1, 3), v_bhld.transpose(0, 2, 1, 3)
    o, _ = outputs(q)
    with fmha_splitk.Plan(backend="cpu", batch=2, max_q_seqlen=1, max_kv_seqlen=120, heads_q=8, heads_kv=2,
                          head_dim_qk=64, q_dtype="f16", split_k=2) as plan:
        plan.run(q=q, k=k, v=v, o=o)
    ref_o, _ = reference.attention(q, k, v)
    assert relative_error(o, ref_o) < F16_BOUND


def test_callers_workspace_and_plan_info(rng):
    q, k, v = random_inputs(rng, 2, 1, 8, 2, 64, 500)
    o, lse = outputs(q)
    with fmha_splitk.Plan(backend="cpu", batch=2, max_q_seqlen=1, max_kv_seqlen=500, heads_q=8, heads_kv=2,
                          head_dim_qk=64, q_dtype="f16", split_k=4) as plan:
        info = plan.info
        assert info.backend == fmha_splitk.Backend.CPU and info.backend_name == "cpu"
        assert info.split_k == 4 and info.kernel_name and info.workspace_size == plan.workspace_size > 0
        workspace = aligned_bytes(plan.workspace_size)
        plan.run(q=q, k=k, v=v, o=o, lse=lse, workspace=workspace)
        assert "split_k=4" in repr(plan)
    ref_o, _ = reference.attention(q, k, v)
    assert relative_error(o, ref_o) < F16_BOUND
    assert plan.closed and repr(plan) == "<fmha_splitk.Plan (closed)>"


def test_split1_needs_no_workspace():
    with fmha_splitk.Plan(backend="cpu", batch=1, max_q_seqlen=1, max_kv_seqlen=10, heads_q=2, heads_kv=2,
                          head_dim_qk=16, q_dtype="f16", split_k=1) as plan:
        assert plan.workspace_size == 0


def test_producer_references_are_released(rng):
    # The capsule's destructor runs the producer's deleter, which drops the
    # array reference NumPy's DLManagedTensor holds.
    import sys
    q, k, v = random_inputs(rng, 1, 1, 2, 2, 16, 8)
    o, _ = outputs(q)
    before = [sys.getrefcount(x) for x in (q, k, v, o)]
    with fmha_splitk.Plan(backend="cpu", batch=1, max_q_seqlen=1, max_kv_seqlen=8, heads_q=2, heads_kv=2,
                          head_dim_qk=16, q_dtype="f16") as plan:
        for _ in range(3):
            plan.run(q=q, k=k, v=v, o=o)
    assert [sys.getrefcount(x) for x in (q, k, v, o)] == before


def test_backends_lists_the_cpu():
    infos = fmha_splitk.backends()
    cpu = [i for i in infos if i.backend == fmha_splitk.Backend.CPU]
    assert len(cpu) == 1 and cpu[0].available and cpu[0].name == "cpu" and cpu[0].reason


def test_gappy_keys_and_varlen_queries(rng):
    # Sequence b's keys are rows kv_seqstart[b] .. + kv_seqlen[b] of one
    # [1, total, Hkv, D] buffer, its queries rows q_seqstart[b] .. q_seqstart[b + 1]
    # of [1, total_q, Hq, D].
    heads_q, heads_kv, d = 4, 2, 64
    kv_seqstart = np.array([0, 50, 70], dtype=np.int32)
    kv_seqlen = np.array([40, 0, 90], dtype=np.int32)
    q_seqstart = np.array([0, 3, 4, 6], dtype=np.int32)
    k = rng.standard_normal((1, 160, heads_kv, d)).astype(np.float16)
    v = rng.standard_normal((1, 160, heads_kv, d)).astype(np.float16)
    q = rng.standard_normal((1, 6, heads_q, d)).astype(np.float16)
    o = np.full(q.shape, np.nan, dtype=np.float16)
    lse = np.full((1, heads_q, 6), np.nan, dtype=np.float32)
    with fmha_splitk.Plan(backend="cpu", batch=3, max_q_seqlen=3, max_kv_seqlen=90, heads_q=heads_q,
                          heads_kv=heads_kv, head_dim_qk=d, q_dtype="f16", q_layout="varlen", kv_layout="gappy",
                          split_k=2) as plan:
        plan.run(q=q, k=k, v=v, o=o, lse=lse, kv_seqstart=kv_seqstart, kv_seqlen=kv_seqlen, q_seqstart=q_seqstart)
    for b in range(3):
        rows = slice(q_seqstart[b], q_seqstart[b + 1])
        keys = slice(kv_seqstart[b], kv_seqstart[b] + kv_seqlen[b])
        ref_o, ref_lse = reference.attention(q[:, rows], k[:, keys], v[:, keys])
        if kv_seqlen[b] == 0:
            assert np.all(o[:, rows] == 0) and np.all(lse[:, :, rows] == -np.inf)
            continue
        assert relative_error(o[:, rows], ref_o) < F16_BOUND
        np.testing.assert_allclose(lse[:, :, rows], ref_lse, rtol=1e-4, atol=1e-4)
