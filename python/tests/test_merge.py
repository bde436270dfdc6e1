"""merge() and merge_backward() on the CPU backend with NumPy, stacked and
as lists, against the float64 formulas; and a run's un-merged partials
merged back into the run's result."""
import numpy as np
import pytest

import fmha_splitk
import reference
from conftest import relative_error

SHAPE = (3, 2, 4, 32)  # B, M, H, D


def random_partials(rng, count, dead_row=True):
    o_parts = rng.standard_normal((count,) + SHAPE).astype(np.float32)
    lse_parts = (rng.standard_normal((count, SHAPE[0], SHAPE[2], SHAPE[1])) * 3).astype(np.float32)
    lse_parts[0, 0, 0, 0] = -np.inf  # one partial saw no key
    if dead_row:
        lse_parts[:, 1, 2, 1] = -np.inf  # no partial saw a key
    return o_parts, lse_parts


@pytest.mark.parametrize("form", ["stacked", "list", "tuple"])
@pytest.mark.parametrize("count", [1, 2, 5])
def test_merge_matches_reference(rng, form, count):
    o_parts, lse_parts = random_partials(rng, count)
    o = np.full(SHAPE, np.nan, dtype=np.float32)
    lse = np.full((SHAPE[0], SHAPE[2], SHAPE[1]), np.nan, dtype=np.float32)
    if form == "stacked":
        fmha_splitk.merge(o_parts, lse_parts, o, lse)
    else:
        as_form = list if form == "list" else tuple
        fmha_splitk.merge(as_form(o_parts), as_form(lse_parts), o, lse)
    ref_o, ref_lse = reference.merge(o_parts, lse_parts)
    assert relative_error(o, ref_o) < 1e-5
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-5)
    assert np.all(o[1, 1, 2] == 0) and lse[1, 2, 1] == -np.inf


def test_merge_list_with_independent_strides_and_f16_output(rng):
    o_parts, lse_parts = random_partials(rng, 3, dead_row=False)
    # Partials in other memory orders: [B, H, M, D] storage seen as [B, M, H, D].
    o_list = [np.ascontiguousarray(p.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3) for p in o_parts]
    o = np.zeros(SHAPE, dtype=np.float16)
    fmha_splitk.merge(o_list, list(lse_parts), o)
    ref_o, _ = reference.merge(o_parts, lse_parts)
    assert relative_error(o, ref_o) < 1e-3


@pytest.mark.parametrize("form", ["stacked", "list"])
def test_merge_backward_matches_reference(rng, form):
    count = 3
    o_parts, lse_parts = random_partials(rng, count)
    ref_o, ref_lse = reference.merge(o_parts, lse_parts)
    o, lse = ref_o.astype(np.float32), ref_lse.astype(np.float32)
    grad_o = rng.standard_normal(SHAPE).astype(np.float32)
    grad_lse = rng.standard_normal(lse.shape).astype(np.float32)
    grad_o_parts = np.full(o_parts.shape, np.nan, dtype=np.float32)
    grad_lse_parts = np.full(lse_parts.shape, np.nan, dtype=np.float32)
    if form == "stacked":
        fmha_splitk.merge_backward(o_parts, lse_parts, o, lse, grad_o, grad_lse,
                                   grad_o_partials=grad_o_parts, grad_lse_partials=grad_lse_parts)
    else:
        fmha_splitk.merge_backward(list(o_parts), list(lse_parts), o, lse, grad_o, grad_lse,
                                   grad_o_partials=list(grad_o_parts), grad_lse_partials=list(grad_lse_parts))
    ref_grad_o, ref_grad_lse = reference.merge_backward(o_parts, lse_parts, o, lse, grad_o, grad_lse)
    assert relative_error(grad_o_parts, ref_grad_o) < 1e-5
    assert relative_error(grad_lse_parts, ref_grad_lse) < 1e-5
    assert np.all(grad_o_parts[:, 1, 1, 2] == 0) and np.all(grad_lse_parts[:, 1, 2, 1] == 0)


def test_merge_backward_without_grad_lse(rng):
    o_parts, lse_parts = random_partials(rng, 2, dead_row=False)
    ref_o, ref_lse = reference.merge(o_parts, lse_parts)
    o, lse = ref_o.astype(np.float32), ref_lse.astype(np.float32)
    grad_o = rng.standard_normal(SHAPE).astype(np.float32)
    grad_o_parts = np.zeros(o_parts.shape, dtype=np.float32)
    grad_lse_parts = np.zeros(lse_parts.shape, dtype=np.float32)
    fmha_splitk.merge_backward(o_parts, lse_parts, o, lse, grad_o, grad_o_partials=grad_o_parts,
                               grad_lse_partials=grad_lse_parts)
    _, ref_grad_lse = reference.merge_backward(o_parts, lse_parts, o, lse, grad_o, np.zeros(lse.shape))
    assert relative_error(grad_lse_parts, ref_grad_lse) < 1e-5


def test_run_partials_merge_to_the_run_result(rng):
    split_k, batch, heads_q, heads_kv, d, n = 3, 2, 4, 2, 64, 100
    q = rng.standard_normal((batch, 1, heads_q, d)).astype(np.float16)
    k = rng.standard_normal((batch, n, heads_kv, d)).astype(np.float16)
    v = rng.standard_normal((batch, n, heads_kv, d)).astype(np.float16)
    problem = dict(backend="cpu", batch=batch, max_q_seqlen=1, max_kv_seqlen=n, heads_q=heads_q, heads_kv=heads_kv,
                   head_dim_qk=d, q_dtype="f16", o_dtype="f32", split_k=split_k)
    o_partial = np.full((split_k, batch, 1, heads_q, d), np.nan, dtype=np.float32)
    lse_partial = np.full((split_k, batch, heads_q, 1), np.nan, dtype=np.float32)
    with fmha_splitk.Plan(flags=["write_partials"], **problem) as plan:
        plan.run(q=q, k=k, v=v, o_partial=o_partial, lse_partial=lse_partial)
    merged = np.zeros((batch, 1, heads_q, d), dtype=np.float32)
    fmha_splitk.merge(o_partial, lse_partial, merged)
    ref_o, _ = reference.attention(q, k, v)
    assert relative_error(merged, ref_o) < 1e-3
