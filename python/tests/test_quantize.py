"""quantize_kv() with NumPy: int4 and fp8 packing decoded in NumPy against
the source, and an int4 cache run through a plan against the oracle on the
dequantised values."""
import numpy as np
import pytest

import fmha_splitk
import reference
from conftest import relative_error


def dequantise_int4(packed, groups, head_dim):
    """int32 [..., groups + D/8] -> float64 [..., D] (the header's format)."""
    words = packed.view(np.uint32).astype(np.uint64)
    meta = words[..., :groups]
    scale = (meta & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float64)
    shift = (meta >> 16).astype(np.uint16).view(np.float16).astype(np.float64)
    values = words[..., groups:]
    nibbles = np.stack([(values >> (4 * j)) & 0xF for j in range(8)], axis=-1).reshape(packed.shape[:-1] + (head_dim,))
    per_group = head_dim // groups
    group_of = np.arange(head_dim) // per_group
    return nibbles * scale[..., group_of] + shift[..., group_of]


def decode_e4m3fn(codes):
    """uint8 E4M3FN codes -> float64 (bias 7; S.1111.111 is NaN)."""
    codes = codes.astype(np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent, mantissa = (codes >> 3) & 0xF, codes & 0x7
    value = np.where(exponent == 0, mantissa / 8.0 * 2.0 ** -6, (1 + mantissa / 8.0) * 2.0 ** (exponent - 7.0))
    return np.where((exponent == 15) & (mantissa == 7), np.nan, sign * value)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_int4_round_trip(rng, groups):
    src = rng.standard_normal((2, 10, 3, 64)).astype(np.float32)
    packed = np.zeros(src.shape[:-1] + (groups + 64 // 8,), dtype=np.int32)
    fmha_splitk.quantize_kv(src, packed, kv_quant="int4", kv_quant_groups=groups)
    back = dequantise_int4(packed, groups, 64)
    spread = src.reshape(src.shape[:-1] + (groups, -1))
    step = (spread.max(-1) - spread.min(-1)) / 15  # one level per group
    error = np.abs(back - src).reshape(spread.shape)
    assert np.all(error <= step[..., None] * 0.51 + 1e-3)


def test_fp8_per_row_round_trip(rng):
    src = rng.standard_normal((2, 9, 2, 32)).astype(np.float16)
    codes = np.zeros(src.shape, dtype=np.uint8)
    scale = np.zeros(src.shape[:-1], dtype=np.float32)
    fmha_splitk.quantize_kv(src, codes, scale, kv_quant=fmha_splitk.KvQuant.FP8, kv_scale_kind="f32")
    amax = np.abs(src.astype(np.float64)).max(-1)
    np.testing.assert_allclose(scale, amax / 448, rtol=1e-6)
    back = decode_e4m3fn(codes) * scale[..., None]
    assert relative_error(back, src) < 0.05  # 3 mantissa bits


def test_int4_cache_through_a_plan(rng):
    batch, heads_q, heads_kv, d, n, groups = 2, 8, 2, 64, 120, 2
    q = rng.standard_normal((batch, 1, heads_q, d)).astype(np.float16)
    k = rng.standard_normal((batch, n, heads_kv, d)).astype(np.float16)
    v = rng.standard_normal((batch, n, heads_kv, d)).astype(np.float16)
    k_packed = np.zeros((batch, n, heads_kv, groups + d // 8), dtype=np.int32)
    v_packed = np.zeros_like(k_packed)
    fmha_splitk.quantize_kv(k, k_packed, kv_quant="int4", kv_quant_groups=groups)
    fmha_splitk.quantize_kv(v, v_packed, kv_quant="int4", kv_quant_groups=groups)
    o = np.zeros(q.shape, dtype=np.float16)
    with fmha_splitk.Plan(backend="cpu", batch=batch, max_q_seqlen=1, max_kv_seqlen=n, heads_q=heads_q,
                          heads_kv=heads_kv, head_dim_qk=d, q_dtype="f16", kv_quant="int4", kv_quant_groups=groups,
                          split_k=2) as plan:
        plan.run(q=q, k=k_packed, v=v_packed, o=o)
    ref_o, _ = reference.attention(q, dequantise_int4(k_packed, groups, d), dequantise_int4(v_packed, groups, d))
    assert relative_error(o, ref_o) < 2e-3
