"""Shared set-up of the binding's suite: the package from this checkout, the
library from FMHA_SPLITK_LIBRARY (ctest sets it to the build's) or the
checkout's build/lib, and helpers that make test tensors."""
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

# Test the package in this checkout, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fmha_splitk  # noqa: E402  (the NumPy tests name backend="cpu" in every plan)


@pytest.fixture
def rng(request):
    """A generator seeded from the test's name: reproducible, and different
    per test."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def aligned_bytes(size, alignment=256):
    """A writable uint8 NumPy array of ``size`` bytes whose first byte is
    ``alignment``-aligned (the workspace rule; NumPy aligns to 16 or 64)."""
    raw = np.empty(size + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + size]


def bf16_bits(values):
    """float -> bfloat16 bits (uint16), rounded to nearest even."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_values(bits):
    """bfloat16 bits (uint16) -> float32."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def relative_error(out, ref):
    """||out - ref|| / ||ref|| in float64; inf when out has NaN."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(out[np.isfinite(ref)])):
        return float("inf")
    finite = np.isfinite(ref)
    return float(np.linalg.norm(out[finite] - ref[finite]) / max(np.linalg.norm(ref[finite]), 1e-30))


__all__ = ["aligned_bytes", "bf16_bits", "bf16_values", "relative_error", "fmha_splitk"]
