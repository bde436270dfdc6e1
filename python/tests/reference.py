"""float64 NumPy oracle for the binding's tests: attention materialising the
full score matrix, and the merge and its gradient written from their
formulas (docs: DESIGN sections 5.8, 5.9). Shares nothing with the library."""
import numpy as np


def attention(q, k, v, kv_lens=None, scale=None, causal=False):
    """Q [B, Mq, Hq, D], K [B, L, Hkv, D], V [B, L, Hkv, Dv] (any float dtype;
    query head h reads K/V head h // (Hq / Hkv)); ``kv_lens[b]`` valid keys
    (default L). Causal is bottom-right aligned: query i sees keys
    j <= len - Mq + i. Returns O [B, Mq, Hq, Dv] and LSE [B, Hq, Mq] (natural
    log; a row with no key gives O = 0, LSE = -inf)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, mq, hq, d = q.shape
    hkv = k.shape[2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    o = np.zeros((batch, mq, hq, v.shape[3]))
    lse = np.full((batch, hq, mq), -np.inf)
    for b in range(batch):
        n = k.shape[1] if kv_lens is None else int(kv_lens[b])
        for h in range(hq):
            kh = k[b, :n, h // (hq // hkv)]
            vh = v[b, :n, h // (hq // hkv)]
            s = q[b, :, h] @ kh.T * scale  # [Mq, n]
            if causal:
                visible = np.arange(n)[None, :] <= (n - mq + np.arange(mq))[:, None]
                s = np.where(visible, s, -np.inf)
            for i in range(mq):
                row = s[i]
                if n == 0 or not np.isfinite(row).any():
                    continue
                top = row.max()
                w = np.exp(row - top)
                o[b, i, h] = w @ vh / w.sum()
                lse[b, h, i] = top + np.log(w.sum())
    return o, lse


def merge(o_parts, lse_parts):
    """O_i [N, B, M, H, D], LSE_i [N, B, H, M] -> O [B, M, H, D], LSE [B, H, M]."""
    o_parts = np.asarray(o_parts, dtype=np.float64)
    lse_parts = np.asarray(lse_parts, dtype=np.float64)
    top = lse_parts.max(axis=0)
    safe_top = np.where(np.isfinite(top), top, 0.0)
    w = np.exp(lse_parts - safe_top)  # -inf partials weigh 0
    total = w.sum(axis=0)
    lse = np.where(total > 0, safe_top + np.log(np.where(total > 0, total, 1.0)), -np.inf)
    weights = np.where(total > 0, w / np.where(total > 0, total, 1.0), 0.0)  # [N, B, H, M]
    o = np.einsum("nbhm,nbmhd->bmhd", weights, o_parts)
    return o, lse


def merge_backward(o_parts, lse_parts, o, lse, grad_o, grad_lse):
    """dO_i = w_i dO, dLSE_i = w_i (dLSE + <O_i - O, dO>), w_i = exp(LSE_i - LSE);
    rows with LSE = -inf give zeros."""
    o_parts, lse_parts, o, lse, grad_o, grad_lse = (
        np.asarray(x, dtype=np.float64) for x in (o_parts, lse_parts, o, lse, grad_o, grad_lse))
    live = np.isfinite(lse)
    w = np.where(live, np.exp(lse_parts - np.where(live, lse, 0.0)), 0.0)  # [N, B, H, M]
    w_bmh = np.transpose(w, (0, 1, 3, 2))[..., None]  # [N, B, M, H, 1]
    grad_o_parts = w_bmh * grad_o[None]
    dot = np.einsum("nbmhd,bmhd->nbhm", o_parts - o[None], grad_o)
    grad_lse_parts = w * (grad_lse[None] + dot)
    return grad_o_parts, grad_lse_parts
