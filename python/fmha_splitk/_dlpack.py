"""Tensors in: any object with ``__dlpack__`` becomes a DLTensor for the library.

Following the DLPack Python specification, the binding asks the producer for
a capsule (``obj.__dlpack__(...)``), reads the DLManagedTensor the capsule
points to, copies its DLTensor header (data pointer, device, dtype, and the
producer's shape and strides arrays) into a struct of its own, and keeps the
capsule alive until the library call returns. It never renames the capsule
to "used_dltensor": the capsule stays the producer's, and the producer's
capsule destructor calls the deleter when the binding drops it. The memory
itself belongs to the caller's array or tensor, which must stay alive (and,
on a GPU, unmodified) until the work on the stream completes, as for any
asynchronous kernel.

Streams: for a CUDA or ROCm tensor the binding passes the stream the library
will run on (``stream=`` of the call; the default stream, 1 on CUDA and 0 on
ROCm, when that is None), so that the producer orders its pending work
before the library's. CPU tensors get no stream.

Read-only arrays: DLPack 1.x producers (NumPy >= 2.1, PyTorch >= 2.6) flag
them; the binding accepts them as inputs and refuses them as outputs. Legacy
producers refuse to export them at all (NumPy 1.x raises BufferError for a
read-only array, e.g. one from ``np.broadcast_to``); for inputs the binding
then reads NumPy's ``__array_interface__`` instead (CPU memory, the same
pointer, shape and strides).
"""
import ctypes

from . import _abi

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

# The DLPack version this consumer reads (any 1.x has the same layout).
_MAX_VERSION = (1, 1)

# Names accepted by reinterpret(): DLPack (code, bits).
_REINTERPRET_DTYPES = {
    "float16": (_abi.KDL_FLOAT, 16),
    "bfloat16": (_abi.KDL_BFLOAT, 16),
    "float32": (_abi.KDL_FLOAT, 32),
    "float8_e4m3fn": (_abi.KDL_FLOAT8_E4M3FN, 8),
    "float8_e4m3fnuz": (_abi.KDL_FLOAT8_E4M3FNUZ, 8),
    "uint8": (_abi.KDL_UINT, 8),
    "int32": (_abi.KDL_INT, 32),
}

_TYPESTR_CODES = {"f": _abi.KDL_FLOAT, "i": _abi.KDL_INT, "u": _abi.KDL_UINT}


class Reinterpreted:
    """A tensor whose bits the library should read as another dtype of the
    same width (see :func:`reinterpret`)."""

    __slots__ = ("tensor", "dtype", "code", "bits")

    def __init__(self, tensor, dtype):
        key = str(dtype).lower()
        if key not in _REINTERPRET_DTYPES:
            raise ValueError(f"reinterpret: unknown dtype {dtype!r}; one of {sorted(_REINTERPRET_DTYPES)}")
        self.tensor = tensor
        self.dtype = key
        self.code, self.bits = _REINTERPRET_DTYPES[key]

    def __repr__(self):
        return f"reinterpret({self.tensor!r}, {self.dtype!r})"


def reinterpret(tensor, dtype):
    """Marks ``tensor`` so that the library reads its elements as ``dtype``.

    NumPy has no bfloat16 or fp8 dtype: hold the bits in a same-width NumPy
    array (uint16 for bfloat16, uint8 for fp8) and pass
    ``reinterpret(array, "bfloat16")``. Only the DLPack dtype the library
    sees changes; data, shape and strides are the tensor's own.

    Args:
        tensor: any object this binding accepts as a tensor.
        dtype: "bfloat16", "float16", "float32", "float8_e4m3fn",
            "float8_e4m3fnuz", "uint8" or "int32"; its width must equal the
            tensor's element width.

    Returns:
        A wrapper accepted wherever a tensor is (not a tensor itself).
    """
    return Reinterpreted(tensor, dtype)


class Exported:
    """One tensor as handed to the library: a DLTensor owned by the binding
    and the objects that keep what it points to valid."""

    __slots__ = ("tensor", "_keepalive")

    def __init__(self, tensor, keepalive):
        self.tensor = tensor
        self._keepalive = keepalive

    def pointer(self):
        """A ``DLTensor*`` for an argument struct."""
        return ctypes.pointer(self.tensor)

    def nbytes(self, name):
        """Bytes of a compact tensor (for workspaces)."""
        t = self.tensor
        count = 1
        for i in range(t.ndim):
            count *= t.shape[i]
        if t.strides and count > 0:
            expected = 1
            for i in reversed(range(t.ndim)):
                if t.shape[i] != 1 and t.strides[i] != expected:
                    raise ValueError(f"{name}: must be contiguous")
                expected *= t.shape[i]
        return count * t.dtype.bits * t.dtype.lanes // 8

    def address(self):
        """The first byte's address (data + byte_offset)."""
        return (self.tensor.data or 0) + self.tensor.byte_offset


def _dlpack_stream(obj, stream_handle):
    """The ``stream=`` argument for ``obj.__dlpack__`` (None: pass none)."""
    device = getattr(obj, "__dlpack_device__", None)
    if device is None:
        return None
    device_type = int(device()[0])
    if device_type in (_abi.KDL_CUDA, _abi.KDL_CUDA_MANAGED):
        # 0 is ambiguous for CUDA in the specification; 1 is the legacy
        # default stream, the one a NULL cudaStream_t means.
        return stream_handle or 1
    if device_type == _abi.KDL_ROCM:
        return stream_handle
    return None


# Producer types known to predate DLPack 1.0 (their __dlpack__ refuses
# max_version), so that each call does not pay for a refusal.
_legacy_producers = set()


def _call_dlpack(obj, stream):
    kwargs = {} if stream is None else {"stream": stream}
    producer = type(obj)
    if producer not in _legacy_producers:
        try:
            return obj.__dlpack__(max_version=_MAX_VERSION, **kwargs)
        except TypeError:
            # A producer from before DLPack 1.0 does not know max_version.
            capsule = obj.__dlpack__(**kwargs)
            _legacy_producers.add(producer)
            return capsule
    return obj.__dlpack__(**kwargs)


def _from_capsule(capsule, name, writable, keepalive):
    capsule_name = _capsule_name(capsule)
    if capsule_name == b"dltensor_versioned":
        managed = _abi.DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, capsule_name))
        if managed.version.major != _MAX_VERSION[0]:
            raise BufferError(f"{name}: DLPack {managed.version.major}.{managed.version.minor} "
                              f"is not supported (this binding reads 1.x)")
        flags = managed.flags
    elif capsule_name == b"dltensor":
        managed = _abi.DLManagedTensor.from_address(_capsule_pointer(capsule, capsule_name))
        flags = 0
    else:
        raise TypeError(f"{name}: __dlpack__ returned a capsule named {capsule_name!r}, "
                        f"not 'dltensor' or 'dltensor_versioned'")
    if writable and flags & _abi.DLPACK_FLAG_READ_ONLY:
        raise ValueError(f"{name} is read-only, but the library writes it")
    if writable and flags & _abi.DLPACK_FLAG_IS_COPIED:
        raise ValueError(f"{name}: the producer exported a copy, so the library's writes would be lost")
    tensor = _abi.DLTensor()
    ctypes.pointer(tensor)[0] = managed.dl_tensor
    return Exported(tensor, (capsule, keepalive))


def _from_array_interface(obj, name, writable):
    """A CPU DLTensor from NumPy's ``__array_interface__`` (version 3)."""
    interface = obj.__array_interface__
    if interface.get("mask") is not None:
        raise ValueError(f"{name}: masked arrays are not supported")
    address, readonly = interface["data"]
    if writable and readonly:
        raise ValueError(f"{name} is read-only, but the library writes it")
    typestr = interface["typestr"]
    if typestr[0] == ">" or typestr[1] not in _TYPESTR_CODES:
        raise ValueError(f"{name}: dtype {typestr!r} cannot be passed to the library")
    itemsize = int(typestr[2:])
    shape = tuple(interface["shape"])
    shape_array = (ctypes.c_int64 * max(1, len(shape)))(*shape)
    strides_array = None
    if interface.get("strides") is not None:
        byte_strides = interface["strides"]
        if any(s % itemsize for s in byte_strides):
            raise ValueError(f"{name}: strides {byte_strides} are not multiples of the element size {itemsize}")
        strides_array = (ctypes.c_int64 * max(1, len(shape)))(*(s // itemsize for s in byte_strides))
    tensor = _abi.DLTensor()
    tensor.data = (address or 0) + interface.get("offset", 0)
    tensor.device = _abi.DLDevice(_abi.KDL_CPU, 0)
    tensor.ndim = len(shape)
    tensor.dtype = _abi.DLDataType(_TYPESTR_CODES[typestr[1]], itemsize * 8, 1)
    tensor.shape = shape_array
    if strides_array is not None:
        tensor.strides = strides_array
    return Exported(tensor, (obj, shape_array, strides_array))


def export(obj, name, *, writable=False, stream_handle=0):
    """The DLTensor of ``obj`` for the argument ``name``.

    Args:
        obj: an object with ``__dlpack__`` (NumPy, PyTorch, CuPy, JAX, ...),
            a NumPy-style ``__array_interface__``, or a :func:`reinterpret`
            wrapper of either.
        name: the argument's name, for messages.
        writable: the library writes the tensor (outputs, workspace).
        stream_handle: the stream the library runs on (int, 0 = default).

    Raises:
        TypeError: ``obj`` is no tensor.
        ValueError / BufferError: it cannot be exported as needed (read-only
            output, a producer's refusal).
    """
    if isinstance(obj, Reinterpreted):
        exported = export(obj.tensor, name, writable=writable, stream_handle=stream_handle)
        dtype = exported.tensor.dtype
        if dtype.bits * dtype.lanes != obj.bits:
            raise ValueError(f"{name}: cannot reinterpret {dtype.bits * dtype.lanes}-bit elements "
                             f"as {obj.dtype} ({obj.bits} bits)")
        exported.tensor.dtype = _abi.DLDataType(obj.code, obj.bits, 1)
        return exported
    if hasattr(obj, "__dlpack__"):
        try:
            capsule = _call_dlpack(obj, _dlpack_stream(obj, stream_handle))
        except BufferError as e:
            # NumPy 1.x refuses read-only arrays; its array interface says
            # whether the array is read-only, so inputs still pass.
            if hasattr(obj, "__array_interface__"):
                return _from_array_interface(obj, name, writable)
            raise BufferError(f"{name}: {e}") from e
        return _from_capsule(capsule, name, writable, obj)
    if hasattr(obj, "__array_interface__"):
        return _from_array_interface(obj, name, writable)
    raise TypeError(f"{name}: expected a tensor with __dlpack__ (NumPy array, PyTorch tensor, ...), "
                    f"got {type(obj).__name__}")
