"""fmha_splitk: split-K ("flash decoding") attention from Python.

A pure-ctypes binding of libfmha_splitk.so.0 (no compiled part). Tensors are
passed through DLPack: NumPy arrays, PyTorch tensors (CPU and CUDA) and any
other object with ``__dlpack__``; outputs are written in place.

    import fmha_splitk
    with fmha_splitk.Plan(batch=B, max_q_seqlen=1, max_kv_seqlen=L, heads_q=32,
                          heads_kv=8, head_dim_qk=128, q_dtype="bf16") as plan:
        plan.run(q=q, k=k, v=v, o=o, lse=lse)

Contents: :class:`Plan` (plan, run, workspace_size, info, configs,
autotune), the tuning cache (:func:`tuning_cache_save`,
:func:`tuning_cache_load`, their ``_file`` forms, :func:`tuning_cache_entries`,
:func:`tuning_cache_clear`), :func:`merge`, :func:`merge_backward`,
:func:`quantize_kv`, :func:`backends`, :func:`version`, the enums of the C
header (:class:`Backend`, :class:`Dtype`, :class:`Mask`, ...), and :class:`Error` with one subclass per
failing status. The library is found as :func:`load_library` describes.
See docs/python.md in the source tree.
"""
from ._abi import (AutotuneFlag, Backend, ConfigSource, Dtype, Flag, Fp8Format, KvLayout, KvQuant, KvScaleKind,
                   Mask, QLayout, ScaleGranularity, Status, TuneState)
from ._api import (BackendInfo, Config, Plan, PlanInfo, backends, last_error_message, merge, merge_backward,
                   quantize_kv, status_string, tuning_cache_clear, tuning_cache_entries, tuning_cache_load,
                   tuning_cache_load_file, tuning_cache_save, tuning_cache_save_file, version, version_code)
from ._dlpack import reinterpret
from ._library import (BackendUnavailableError, DeviceError, Error, InsufficientWorkspaceError, InternalError,
                       InvalidArgumentError, NotSupportedError, OutOfMemoryError, library_path, load_library)

__version__ = "0.1.0"

__all__ = [
    "AutotuneFlag", "Backend", "BackendInfo", "BackendUnavailableError", "Config", "ConfigSource", "DeviceError",
    "Dtype", "Error", "Flag", "Fp8Format", "InsufficientWorkspaceError", "InternalError", "InvalidArgumentError",
    "KvLayout", "KvQuant", "KvScaleKind", "Mask", "NotSupportedError", "OutOfMemoryError", "Plan", "PlanInfo",
    "QLayout", "ScaleGranularity", "Status", "TuneState", "backends", "last_error_message", "library_path",
    "load_library", "merge", "merge_backward", "quantize_kv", "reinterpret", "status_string",
    "tuning_cache_clear", "tuning_cache_entries", "tuning_cache_load", "tuning_cache_load_file",
    "tuning_cache_save", "tuning_cache_save_file", "version", "version_code",
]
