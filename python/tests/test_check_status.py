"""Plan.check_status (fmha_splitk_check_status) on the CPU backend: nothing
to report for unchecked plans nor for checked CPU plans (their runs reject
bad metadata themselves), and the closed-plan error. The device-side checks
are tested in C++ on the GPU (tests/gpu/checked_test.cpp)."""
import numpy as np
import pytest

import fmha_splitk
from conftest import aligned_bytes

PROBLEM = dict(backend="cpu", batch=2, max_q_seqlen=1, max_kv_seqlen=64, heads_q=4, heads_kv=2, head_dim_qk=32,
               q_dtype="f16")


def tensors():
    rng = np.random.default_rng(11)
    q = rng.standard_normal((2, 1, 4, 32)).astype(np.float16)
    k = rng.standard_normal((2, 64, 2, 32)).astype(np.float16)
    v = rng.standard_normal((2, 64, 2, 32)).astype(np.float16)
    return q, k, v, np.zeros((2, 1, 4, 32), dtype=np.float16)


def test_unchecked_plan_reports_nothing():
    with fmha_splitk.Plan(**PROBLEM) as plan:
        assert plan.check_status() is None
        assert fmha_splitk.last_error_message() == ""


def test_checked_cpu_plan_reports_nothing_after_runs():
    q, k, v, o = tensors()
    with fmha_splitk.Plan(flags="checked", split_k=2, **PROBLEM) as plan:
        plan.run(q=q, k=k, v=v, o=o)
        assert plan.check_status() is None
        workspace = aligned_bytes(plan.workspace_size)
        plan.run(q=q, k=k, v=v, o=o, workspace=workspace)
        assert plan.check_status(workspace=workspace) is None


def test_checked_cpu_run_rejects_bad_lengths_itself():
    q, k, v, o = tensors()
    with fmha_splitk.Plan(flags="checked", kv_layout="padded", **PROBLEM) as plan:
        with pytest.raises(fmha_splitk.InvalidArgumentError, match=r"kv_seqlen\[1\] = 100"):
            plan.run(q=q, k=k, v=v, o=o, kv_seqlen=np.array([10, 100], dtype=np.int32))
        assert plan.check_status() is None


def test_closed_plan():
    plan = fmha_splitk.Plan(**PROBLEM)
    plan.close()
    with pytest.raises(ValueError, match="closed Plan"):
        plan.check_status()
