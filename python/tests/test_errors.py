"""Every error the binding raises or passes on: the library's statuses as
Error subclasses carrying its message, and the binding's own checks (closed
plans, arguments that are no tensors, read-only outputs, DLPack capsules it
cannot read), with DLPack producers faked in ctypes to reach the DLPack 1.x
and GPU paths on a CPU-only machine."""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import fmha_splitk
from fmha_splitk import _abi
from conftest import aligned_bytes

PROBLEM = dict(backend="cpu", batch=2, max_q_seqlen=1, max_kv_seqlen=64, heads_q=4, heads_kv=2, head_dim_qk=32,
               q_dtype="f16")


def tensors(dtype=np.float16):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 1, 4, 32)).astype(dtype)
    k = rng.standard_normal((2, 64, 2, 32)).astype(dtype)
    v = rng.standard_normal((2, 64, 2, 32)).astype(dtype)
    return q, k, v, np.zeros((2, 1, 4, 32), dtype=np.float16)


@pytest.fixture
def plan():
    with fmha_splitk.Plan(split_k=2, **PROBLEM) as p:
        yield p


# --- the library's errors ------------------------------------------------------


def test_bad_dtype_gives_the_library_message(plan):
    q, k, v, o = tensors()
    with pytest.raises(fmha_splitk.InvalidArgumentError) as caught:
        plan.run(q=q.astype(np.float64), k=k, v=v, o=o)
    error = caught.value
    assert error.status == fmha_splitk.Status.INVALID_ARGUMENT
    assert error.function == "fmha_splitk_run"
    assert "args.q" in error.message and error.message in str(error)
    assert isinstance(error, ValueError) and isinstance(error, fmha_splitk.Error)
    assert fmha_splitk.last_error_message() == error.message  # thread-local, until the next call
    plan.workspace_size
    assert fmha_splitk.last_error_message() == ""


def test_wrong_shape_gives_the_library_message(plan):
    q, k, v, o = tensors()
    with pytest.raises(fmha_splitk.InvalidArgumentError, match=r"args\.o has shape \[1, 1, 4, 32\]"):
        plan.run(q=q, k=k, v=v, o=o[:1])


def test_missing_tensor_gives_the_library_message(plan):
    q, k, v, o = tensors()
    with pytest.raises(fmha_splitk.InvalidArgumentError, match=r"args\.v"):
        plan.run(q=q, k=k, o=o)


def test_invalid_problem():
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="heads") as caught:
        fmha_splitk.Plan(**dict(PROBLEM, heads_q=3))
    assert caught.value.function == "fmha_splitk_create_plan"


def test_unavailable_backend():
    # No HIP plugin exists yet, on this machine or the GPU one.
    with pytest.raises(fmha_splitk.BackendUnavailableError) as caught:
        fmha_splitk.Plan(**dict(PROBLEM, backend=fmha_splitk.Backend.HIP))
    assert caught.value.message


def test_insufficient_workspace(plan):
    q, k, v, o = tensors()
    assert plan.workspace_size > 256
    with pytest.raises(fmha_splitk.InsufficientWorkspaceError):
        plan.run(q=q, k=k, v=v, o=o, workspace=aligned_bytes(256))


def test_misaligned_workspace(plan):
    q, k, v, o = tensors()
    workspace = aligned_bytes(plan.workspace_size + 8)[8:]
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="workspace"):
        plan.run(q=q, k=k, v=v, o=o, workspace=workspace)


def test_merge_errors():
    o_parts = np.zeros((2, 1, 1, 2, 16), dtype=np.float32)
    lse_parts = np.zeros((2, 1, 2, 1), dtype=np.float32)
    o = np.zeros((1, 1, 2, 16), dtype=np.float32)
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="lse") as caught:
        fmha_splitk.merge(o_parts, lse_parts.astype(np.float16), o)
    assert caught.value.function == "fmha_merge"
    with pytest.raises(fmha_splitk.InvalidArgumentError):
        fmha_splitk.merge(o_parts, list(lse_parts), o)  # mixed forms
    with pytest.raises(ValueError, match="2 partials, but another list has 1"):
        fmha_splitk.merge([o_parts[0]], list(lse_parts), o)


def test_merge_backward_errors():
    o_parts = np.zeros((2, 1, 1, 2, 16), dtype=np.float32)
    lse_parts = np.zeros((2, 1, 2, 1), dtype=np.float32)
    o, lse = np.zeros((1, 1, 2, 16), dtype=np.float32), np.zeros((1, 2, 1), dtype=np.float32)
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="grad_o") as caught:
        fmha_splitk.merge_backward(o_parts, lse_parts, o, lse, o[:, :, :1], grad_o_partials=np.zeros_like(o_parts),
                                   grad_lse_partials=np.zeros_like(lse_parts))
    assert caught.value.function == "fmha_merge_backward"


def test_quantize_errors():
    src = np.zeros((4, 16), dtype=np.float32)
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="kv_quant"):
        fmha_splitk.quantize_kv(src, np.zeros((4, 16), dtype=np.uint8), kv_quant="none")
    with pytest.raises(ValueError, match="kv_quant: 'int3'"):
        fmha_splitk.quantize_kv(src, np.zeros((4, 3), dtype=np.int32), kv_quant="int3")


def test_status_strings():
    assert fmha_splitk.status_string(fmha_splitk.Status.INVALID_ARGUMENT) == "invalid argument"
    assert fmha_splitk.status_string(99) == "unknown status"


# --- the binding's own checks ---------------------------------------------------


def test_use_after_close():
    p = fmha_splitk.Plan(**PROBLEM)
    p.close()
    p.close()  # idempotent, like fmha_splitk_destroy_plan(NULL)
    q, k, v, o = tensors()
    for use in (lambda: p.run(q=q, k=k, v=v, o=o), lambda: p.info, lambda: p.workspace_size,
                lambda: p.__enter__()):
        with pytest.raises(ValueError, match="closed Plan"):
            use()
    assert p.closed


def test_problem_fields_are_checked():
    with pytest.raises(TypeError, match="unknown problem field.*heads"):
        fmha_splitk.Plan(heads=4, **PROBLEM)
    with pytest.raises(ValueError, match="mask: 'diagonal' is not one of none, causal"):
        fmha_splitk.Plan(mask="diagonal", **PROBLEM)
    with pytest.raises(ValueError, match="q_dtype"):
        fmha_splitk.Plan(**dict(PROBLEM, q_dtype="float64"))
    with pytest.raises(ValueError, match="flags: 'fast'"):
        fmha_splitk.Plan(flags=["checked", "fast"], **PROBLEM)
    with pytest.raises(TypeError, match="batch: 'str' object cannot be interpreted as an integer"):
        fmha_splitk.Plan(**dict(PROBLEM, batch="two"))
    with pytest.raises(ValueError, match="kv_seqlen_hint: 1 entries for batch 2"):
        fmha_splitk.Plan(kv_seqlen_hint=[5], **PROBLEM)


def test_problem_accepts_enums_ints_names_and_dtypes():
    for q_dtype in (fmha_splitk.Dtype.F16, 1, "F16", "float16", np.float16, np.dtype("float16")):
        with fmha_splitk.Plan(**dict(PROBLEM, q_dtype=q_dtype)) as p:
            assert p.problem["q_dtype"] is q_dtype
    with fmha_splitk.Plan(flags=fmha_splitk.Flag.CHECKED | fmha_splitk.Flag.BATCH_INVARIANT, **PROBLEM):
        pass
    with fmha_splitk.Plan(flags="checked", mask=fmha_splitk.Mask.CAUSAL, **PROBLEM):
        pass


def test_not_a_tensor(plan):
    q, k, v, o = tensors()
    with pytest.raises(TypeError, match="k: expected a tensor with __dlpack__"):
        plan.run(q=q, k=k.tolist(), v=v, o=o)


def test_read_only_output(plan):
    q, k, v, o = tensors()
    o.flags.writeable = False
    with pytest.raises(ValueError, match="o is read-only"):
        plan.run(q=q, k=k, v=v, o=o)


def test_bad_stream(plan):
    q, k, v, o = tensors()
    with pytest.raises(TypeError, match="stream"):
        plan.run(q=q, k=k, v=v, o=o, stream="default")


def test_reinterpret_checks_the_width():
    with pytest.raises(ValueError, match="unknown dtype"):
        fmha_splitk.reinterpret(np.zeros(2, np.uint16), "bfloat17")
    with fmha_splitk.Plan(**PROBLEM) as p:
        q, k, v, o = tensors()
        with pytest.raises(ValueError, match="cannot reinterpret 16-bit elements as float32"):
            p.run(q=fmha_splitk.reinterpret(q, "float32"), k=k, v=v, o=o)


def test_library_search_order(tmp_path):
    loaded = fmha_splitk.library_path()
    fmha_splitk.load_library(loaded)  # the library already loaded: a no-op
    env = dict(os.environ)
    env.pop("FMHA_SPLITK_LIBRARY", None)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(fmha_splitk.__file__))
    missing = str(tmp_path / "missing.so")

    def run(code, *paths, **extra):
        return subprocess.run([sys.executable, "-c", "import fmha_splitk, sys\n" + code, *paths],
                              env=dict(env, **extra), capture_output=True, text=True)

    load = "fmha_splitk.load_library(sys.argv[1]); print(fmha_splitk.library_path())"
    refused = run(load, missing)
    assert refused.returncode != 0
    assert "OSError: fmha_splitk: cannot load the library (load_library())" in refused.stderr
    by_path = run(load, loaded)
    assert by_path.returncode == 0 and by_path.stdout.strip() == loaded
    # The environment variable comes before the path.
    by_env = run(load, missing, FMHA_SPLITK_LIBRARY=loaded)
    assert by_env.returncode == 0 and by_env.stdout.strip() == loaded
    bad_env = run("fmha_splitk.version()", FMHA_SPLITK_LIBRARY=missing)
    assert bad_env.returncode != 0 and "(FMHA_SPLITK_LIBRARY)" in bad_env.stderr
    # One library per process.
    switch = run(load + "; fmha_splitk.load_library(sys.argv[2])", loaded, missing)
    assert switch.returncode != 0 and "is already loaded; cannot switch" in switch.stderr


# --- DLPack producers faked in ctypes -------------------------------------------

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]


class FakeProducer:
    """Exports a NumPy array's memory the way a DLPack producer would, with
    a chosen capsule name, version, flags and device; records the keyword
    arguments of each __dlpack__ call. Its capsules have no destructor: the
    producer owns the struct."""

    knows_max_version = True

    def __init__(self, array, name=b"dltensor_versioned", flags=0, device_type=_abi.KDL_CPU, major=1):
        self.array = array
        self.name = ctypes.create_string_buffer(name)
        self.device_type = device_type
        self.calls = []
        self.shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        code = {"f": _abi.KDL_FLOAT, "i": _abi.KDL_INT, "u": _abi.KDL_UINT}[array.dtype.kind]
        tensor = _abi.DLTensor(data=array.ctypes.data, device=_abi.DLDevice(device_type, 0), ndim=array.ndim,
                               dtype=_abi.DLDataType(code, array.dtype.itemsize * 8, 1), shape=self.shape)
        if name == b"dltensor_versioned":
            self.managed = _abi.DLManagedTensorVersioned(version=_abi.DLPackVersion(major, 0), flags=flags,
                                                         dl_tensor=tensor)
        else:
            self.managed = _abi.DLManagedTensor(dl_tensor=tensor)

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, **kwargs):
        if "max_version" in kwargs and not self.knows_max_version:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.calls.append(kwargs)
        return _capsule_new(ctypes.addressof(self.managed), ctypes.addressof(self.name), None)


class LegacyProducer(FakeProducer):
    """A producer from before DLPack 1.0: its __dlpack__ has no max_version
    (the binding remembers that per type)."""

    knows_max_version = False


def test_versioned_read_only_input_is_accepted(plan):
    q, k, v, o = tensors()
    reference_o = o.copy()
    plan.run(q=q, k=k, v=v, o=reference_o)
    fake_q = FakeProducer(q, flags=_abi.DLPACK_FLAG_READ_ONLY)
    plan.run(q=fake_q, k=k, v=v, o=o)
    assert np.array_equal(o, reference_o)
    assert fake_q.calls == [{"max_version": (1, 1)}]  # CPU: no stream


def test_legacy_producer_without_max_version(plan):
    q, k, v, o = tensors()
    reference_o = o.copy()
    plan.run(q=q, k=k, v=v, o=reference_o)
    fake_o = LegacyProducer(o, name=b"dltensor")
    plan.run(q=q, k=k, v=v, o=fake_o)
    plan.run(q=q, k=k, v=v, o=fake_o)
    assert np.array_equal(o, reference_o) and fake_o.calls == [{}, {}]


@pytest.mark.parametrize("flags,match", [(_abi.DLPACK_FLAG_READ_ONLY, "o is read-only"),
                                         (_abi.DLPACK_FLAG_IS_COPIED, "exported a copy")])
def test_versioned_output_flags(plan, flags, match):
    q, k, v, o = tensors()
    with pytest.raises(ValueError, match=match):
        plan.run(q=q, k=k, v=v, o=FakeProducer(o, flags=flags))


def test_unknown_capsules(plan):
    q, k, v, o = tensors()
    with pytest.raises(BufferError, match="q: DLPack 2.0 is not supported"):
        plan.run(q=FakeProducer(q, major=2), k=k, v=v, o=o)
    with pytest.raises(TypeError, match="capsule named b'used_dltensor'"):
        plan.run(q=FakeProducer(q, name=b"used_dltensor"), k=k, v=v, o=o)


class FakeStream:
    cuda_stream = 7


@pytest.mark.parametrize("stream,expected", [(None, 1), (0, 1), (5, 5), (FakeStream(), 7)])
def test_gpu_tensors_get_the_run_stream(plan, stream, expected):
    # A CUDA tensor on a CPU plan: the producer is asked for the run's stream
    # (1, the legacy default stream, for None), and the library refuses the
    # device mismatch with a message instead of touching the memory.
    q, k, v, o = tensors()
    fake_q = FakeProducer(q, device_type=_abi.KDL_CUDA)
    with pytest.raises(fmha_splitk.InvalidArgumentError, match="args.q"):
        plan.run(q=fake_q, k=k, v=v, o=o, stream=stream)
    assert fake_q.calls == [{"max_version": (1, 1), "stream": expected}]


def test_quantize_refuses_device_tensors():
    src = np.zeros((4, 16), dtype=np.float32)
    with pytest.raises(fmha_splitk.NotSupportedError):
        fmha_splitk.quantize_kv(FakeProducer(src, device_type=_abi.KDL_CUDA), np.zeros((4, 1 + 2), dtype=np.int32),
                                kv_quant="int4")
