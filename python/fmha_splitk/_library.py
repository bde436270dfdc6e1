"""Finding and loading libfmha_splitk.so.0, its prototypes, and errors.

Search order (the first that applies wins):

1. the environment variable ``FMHA_SPLITK_LIBRARY`` (a path to the .so);
2. the path given to :func:`load_library`;
3. when the package is used from a source checkout (``python/fmha_splitk``
   beside ``include/fmha_splitk/fmha_splitk.h``), ``build/lib/`` of that
   checkout (the ``default`` CMake preset's build tree);
4. the system loader: ``libfmha_splitk.so.0`` through the usual search
   (``LD_LIBRARY_PATH``, the ld.so cache: an installed package).

The library is loaded once, on first use; the GPU plugins are found by the
library itself, next to the .so.
"""
import ctypes
import os
import threading
from pathlib import Path

from . import _abi

SONAME = f"libfmha_splitk.so.{_abi.ABI_MAJOR}"

_lock = threading.Lock()
_lib = None
_lib_path = None


class Error(RuntimeError):
    """An error status returned by the library.

    Attributes:
        status: the :class:`Status` the call returned.
        message: the library's detailed message (``fmha_last_error_message``),
            which names the argument and the values that were wrong.
        function: the C function that failed.
    """

    def __init__(self, status, message, function="", status_text=None):
        known = status in _abi.Status._value2member_map_
        self.status = _abi.Status(status) if known else status
        self.message = message
        self.function = function
        if status_text is None:
            status_text = self.status.name.lower().replace("_", " ") if known else f"status {status}"
        text = f"{function}: {status_text}" if function else status_text
        super().__init__(f"{text}: {message}" if message else text)


class InvalidArgumentError(Error, ValueError):
    """FMHA_STATUS_INVALID_ARGUMENT: a malformed argument (shape, dtype,
    stride, value)."""


class NotSupportedError(Error):
    """FMHA_STATUS_NOT_SUPPORTED: valid, but this build or backend cannot do it."""


class BackendUnavailableError(Error):
    """FMHA_STATUS_BACKEND_UNAVAILABLE: no loaded backend can serve the
    request (see :func:`backends`)."""


class InsufficientWorkspaceError(Error):
    """FMHA_STATUS_INSUFFICIENT_WORKSPACE: the workspace is smaller than
    :attr:`Plan.workspace_size`."""


class OutOfMemoryError(Error, MemoryError):
    """FMHA_STATUS_OUT_OF_MEMORY: a host or device allocation failed."""


class DeviceError(Error):
    """FMHA_STATUS_DEVICE_ERROR: the GPU runtime or driver failed (its message
    is included)."""


class InternalError(Error):
    """FMHA_STATUS_INTERNAL_ERROR: a bug in the library; please report it."""


_ERROR_CLASSES = {
    _abi.Status.INVALID_ARGUMENT: InvalidArgumentError,
    _abi.Status.NOT_SUPPORTED: NotSupportedError,
    _abi.Status.BACKEND_UNAVAILABLE: BackendUnavailableError,
    _abi.Status.INSUFFICIENT_WORKSPACE: InsufficientWorkspaceError,
    _abi.Status.OUT_OF_MEMORY: OutOfMemoryError,
    _abi.Status.DEVICE_ERROR: DeviceError,
    _abi.Status.INTERNAL_ERROR: InternalError,
}


def _source_tree_library():
    """build/lib/libfmha_splitk.so.0 of the checkout this package sits in."""
    root = Path(__file__).resolve().parent.parent.parent
    if not (root / "include" / "fmha_splitk" / "fmha_splitk.h").is_file():
        return None
    candidate = root / "build" / "lib" / SONAME
    return str(candidate) if candidate.is_file() else None


def _declare(lib):
    """Prototypes of every public function (ctypes would otherwise assume int
    results and int arguments, truncating pointers)."""
    status = ctypes.c_int
    plan_t = ctypes.c_void_p
    table = {
        "fmha_get_backends": (status, [ctypes.POINTER(_abi.BackendInfoStruct), ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.c_size_t)]),
        "fmha_status_string": (ctypes.c_char_p, [ctypes.c_int]),
        "fmha_last_error_message": (ctypes.c_char_p, []),
        "fmha_version": (ctypes.c_char_p, []),
        "fmha_version_code": (ctypes.c_int32, []),
        "fmha_splitk_create_plan": (status, [ctypes.POINTER(_abi.Problem), ctypes.POINTER(plan_t)]),
        "fmha_splitk_destroy_plan": (None, [plan_t]),
        "fmha_splitk_plan_workspace_size": (status, [plan_t, ctypes.POINTER(ctypes.c_size_t)]),
        "fmha_splitk_get_plan_info": (status, [plan_t, ctypes.POINTER(_abi.PlanInfoStruct)]),
        "fmha_splitk_run": (status, [plan_t, ctypes.POINTER(_abi.RunArgs)]),
        "fmha_splitk_check_status": (status, [plan_t, ctypes.c_void_p, ctypes.c_void_p]),
        "fmha_merge": (status, [ctypes.POINTER(_abi.MergeArgs)]),
        "fmha_merge_backward": (status, [ctypes.POINTER(_abi.MergeBackwardArgs)]),
        "fmha_quantize_kv": (status, [ctypes.POINTER(_abi.QuantizeKvArgs)]),
        "fmha_splitk_plan_config_count": (status, [plan_t, ctypes.POINTER(ctypes.c_int32)]),
        "fmha_splitk_get_plan_config": (status, [plan_t, ctypes.c_int32, ctypes.POINTER(_abi.ConfigStruct)]),
        "fmha_splitk_autotune": (status, [plan_t, ctypes.POINTER(_abi.RunArgs),
                                          ctypes.POINTER(_abi.AutotuneOptions)]),
        "fmha_tuning_cache_save": (status, [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
        "fmha_tuning_cache_load": (status, [ctypes.c_void_p, ctypes.c_size_t]),
        "fmha_tuning_cache_save_file": (status, [ctypes.c_char_p]),
        "fmha_tuning_cache_load_file": (status, [ctypes.c_char_p]),
        "fmha_tuning_cache_entries": (status, [ctypes.POINTER(ctypes.c_size_t)]),
        "fmha_tuning_cache_clear": (None, []),
    }
    for name, (restype, argtypes) in table.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes


def _open(path):
    lib = ctypes.CDLL(path)
    _declare(lib)
    major = lib.fmha_version_code() // 10000
    if major != _abi.ABI_MAJOR:
        raise ImportError(f"{path} is fmha_splitk {lib.fmha_version().decode()} (ABI {major}); "
                          f"this binding speaks ABI {_abi.ABI_MAJOR}")
    return lib


def load_library(path=None):
    """Loads the library (once) and returns the ctypes handle.

    Args:
        path: where libfmha_splitk.so.0 is, used when the environment
            variable ``FMHA_SPLITK_LIBRARY`` is not set. Without either, the
            source tree's ``build/lib`` (when run from a checkout) and then
            the system loader are tried.

    Raises:
        OSError: the library cannot be loaded (the message lists what was
            tried).
        ImportError: the library's ABI major version is not this binding's.
        RuntimeError: a different library was already loaded in this process.
    """
    global _lib, _lib_path
    with _lock:
        env = os.environ.get("FMHA_SPLITK_LIBRARY")
        wanted = env or (os.fspath(path) if path is not None else None)
        if _lib is not None:
            if wanted is not None and os.path.realpath(wanted) != os.path.realpath(_lib_path):
                raise RuntimeError(f"fmha_splitk: {_lib_path} is already loaded; cannot switch to {wanted}")
            return _lib
        candidates = [wanted] if wanted else [c for c in (_source_tree_library(), SONAME) if c]
        failures = []
        for candidate in candidates:
            try:
                lib = _open(candidate)
            except OSError as e:
                failures.append(f"{candidate}: {e}")
                continue
            _lib, _lib_path = lib, candidate
            return lib
        source = "FMHA_SPLITK_LIBRARY" if env else ("load_library()" if wanted else "search")
        raise OSError(f"fmha_splitk: cannot load the library ({source}): " + "; ".join(failures) +
                      ". Set FMHA_SPLITK_LIBRARY to the path of libfmha_splitk.so.0.")


def library_path():
    """The path (or name) the loaded library was opened from; loads it if
    needed."""
    load_library()
    return _lib_path


def lib():
    """The loaded library (loading it on first use)."""
    return _lib if _lib is not None else load_library()


def check(status, function):
    """Raises the :class:`Error` subclass for a failed status, with the
    library's message (read on the calling thread: it is thread-local)."""
    if status == _abi.Status.SUCCESS:
        return
    library = lib()
    raw = library.fmha_last_error_message()
    message = raw.decode("utf-8", "replace") if raw else ""
    status_text = library.fmha_status_string(status).decode("utf-8", "replace")
    cls = _ERROR_CLASSES.get(status, Error)
    raise cls(status, message, function, status_text)
