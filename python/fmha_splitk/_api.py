"""Plans, runs, autotuning and the tuning cache, merges, quantisation,
backends and version."""
import ctypes
import dataclasses
import operator
import os

from . import _abi
from ._dlpack import export
from ._library import check, lib

# Problem fields whose value is an enum: the enum accepts members, ints and
# (case-insensitive) names.
_ENUM_FIELDS = {
    "backend": _abi.Backend,
    "q_layout": _abi.QLayout,
    "kv_layout": _abi.KvLayout,
    "q_dtype": _abi.Dtype,
    "kv_dtype": _abi.Dtype,
    "o_dtype": _abi.Dtype,
    "kv_quant": _abi.KvQuant,
    "fp8_format": _abi.Fp8Format,
    "kv_scale_kind": _abi.KvScaleKind,
    "kv_scale_granularity": _abi.ScaleGranularity,
    "q_scale_granularity": _abi.ScaleGranularity,
    "mask": _abi.Mask,
}

# Other spellings of the dtypes (NumPy / PyTorch names).
_DTYPE_ALIASES = {
    "float16": _abi.Dtype.F16,
    "half": _abi.Dtype.F16,
    "bfloat16": _abi.Dtype.BF16,
    "float32": _abi.Dtype.F32,
    "float": _abi.Dtype.F32,
    "float8": _abi.Dtype.FP8,
    "float8_e4m3fn": _abi.Dtype.FP8,
    "float8_e4m3fnuz": _abi.Dtype.FP8,
    "uint8": _abi.Dtype.FP8,
}

# Fields the binding fills itself.
_PRIVATE_FIELDS = {"struct_size", "reserved0", "kv_seqlen_hint"}
PROBLEM_FIELDS = tuple(name for name, _ in _abi.Problem._fields_ if name not in _PRIVATE_FIELDS) + (
    "kv_seqlen_hint",)


def _enum_value(enum_type, value, field):
    """An enum field's integer from a member, an int or a name."""
    if isinstance(value, enum_type):
        return int(value)
    if hasattr(value, "__index__") and not isinstance(value, bool):
        return operator.index(value)  # ints, NumPy integers
    if enum_type is _abi.Dtype and not isinstance(value, str):
        # numpy.float16 (a type), numpy.dtype('float16'), torch.float16.
        value = getattr(value, "__name__", None) or getattr(value, "name", None) or str(value)
        value = value.rsplit(".", 1)[-1]
    if isinstance(value, str):
        key = value.strip().upper()
        if key in enum_type.__members__:
            return int(enum_type[key])
        if enum_type is _abi.Dtype and value.lower() in _DTYPE_ALIASES:
            return int(_DTYPE_ALIASES[value.lower()])
    names = ", ".join(m.lower() for m in enum_type.__members__)
    raise ValueError(f"{field}: {value!r} is not one of {names}")


def _flags_value(value):
    """``flags`` from an int, a Flag, a name, or an iterable of those."""
    if isinstance(value, (int, _abi.Flag)) and not isinstance(value, bool):
        return int(value)
    items = [value] if isinstance(value, str) else list(value)
    total = 0
    for item in items:
        if isinstance(item, str):
            key = item.strip().upper()
            if key not in _abi.Flag.__members__:
                names = ", ".join(m.lower() for m in _abi.Flag.__members__)
                raise ValueError(f"flags: {item!r} is not one of {names}")
            total |= int(_abi.Flag[key])
        else:
            total |= int(item)
    return total


def _stream_handle(stream):
    """A ``void*`` stream as an int: None (0, the default stream), an int
    (a cudaStream_t / hipStream_t), or an object with ``cuda_stream``
    (torch.cuda.Stream) or ``ptr`` (cupy.cuda.Stream)."""
    if stream is None:
        return 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attribute in ("cuda_stream", "ptr"):
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int):
            return handle
    raise TypeError(f"stream: expected None, an int handle or a stream object, got {type(stream).__name__}")


class _Call:
    """Exports the tensors of one library call and keeps them alive for it."""

    def __init__(self, stream):
        self.stream = _stream_handle(stream)
        self._alive = []

    def tensor(self, obj, name, *, writable=False):
        """``DLTensor*`` for an optional tensor argument (NULL for None)."""
        if obj is None:
            return None
        exported = export(obj, name, writable=writable, stream_handle=self.stream)
        self._alive.append(exported)
        return exported.pointer()

    def tensor_list(self, objs, name, *, writable=False):
        """``const DLTensor* const*`` for a list of tensors."""
        pointers = [self.tensor(obj, f"{name}[{i}]", writable=writable) for i, obj in enumerate(objs)]
        array = (ctypes.POINTER(_abi.DLTensor) * max(1, len(pointers)))(*pointers)
        self._alive.append(array)
        return ctypes.cast(array, ctypes.POINTER(ctypes.POINTER(_abi.DLTensor)))

    def workspace(self, obj):
        """(address, bytes) of a caller's workspace tensor."""
        if obj is None:
            return None, 0
        exported = export(obj, "workspace", writable=True, stream_handle=self.stream)
        self._alive.append(exported)
        return exported.address(), exported.nbytes("workspace")

    def partials(self, args, objs, stacked_field, list_field, name, count, *, writable=False):
        """Sets one partial set, stacked (a tensor) or a list / tuple; returns
        the list's length (or ``count`` when stacked)."""
        if objs is None:
            return count
        if isinstance(objs, (list, tuple)):
            if count is not None and count != len(objs):
                raise ValueError(f"{name}: {len(objs)} partials, but another list has {count}")
            setattr(args, list_field, self.tensor_list(objs, name, writable=writable))
            return len(objs)
        setattr(args, stacked_field, self.tensor(objs, name, writable=writable))
        return count


# Tensors of fmha_splitk_args the library reads, and those it writes.
_RUN_INPUTS = ("q", "k", "v", "bias", "sinks", "kv_seqlen", "kv_seqstart", "q_seqstart", "block_table",
               "kv_indptr", "kv_indices", "kv_last_page_len", "k_scale", "v_scale", "q_scale")
_RUN_OUTPUTS = ("o", "lse", "o_partial", "lse_partial")


def _run_args(call, tensors, workspace=None):
    """``fmha_splitk_args`` for :meth:`Plan.run` and :meth:`Plan.autotune`:
    ``tensors`` maps field names to tensors (None when absent); ``call``
    keeps the exports alive until the library call returns."""
    args = _abi.new_struct(_abi.RunArgs)
    # Fields of absent tensors stay NULL, as the INIT macro left them.
    for name in _RUN_INPUTS:
        if tensors[name] is not None:
            setattr(args, name, call.tensor(tensors[name], name))
    for name in _RUN_OUTPUTS:
        if tensors[name] is not None:
            setattr(args, name, call.tensor(tensors[name], name, writable=True))
    args.workspace, args.workspace_size = call.workspace(workspace)
    args.stream = call.stream or None
    return args


@dataclasses.dataclass(frozen=True)
class PlanInfo:
    """What a plan chose (``fmha_splitk_plan_info``)."""

    #: :class:`Backend` the plan runs on.
    backend: _abi.Backend
    #: Device ordinal within the backend.
    device_id: int
    #: KV chunks per sequence (forced, or the largest the plan expects).
    split_k: int
    #: Keys per chunk (uniform / batch-invariant) or target keys per work item.
    kv_chunk_size: int
    #: Parallel workers the partition targets (SMs, CUs or threads).
    num_workers: int
    #: Upper bound of partial rows kept in the workspace, per head.
    max_partials: int
    #: Workspace bytes a run needs.
    workspace_size: int
    #: "cpu", "cuda" or "hip".
    backend_name: str
    #: Kernel / schedule chosen, for logs.
    kernel_name: str
    #: Device name.
    device_name: str
    #: Index of the configuration the plan runs among :meth:`Plan.configs`.
    config_index: int
    #: :class:`ConfigSource` of that configuration: ``HEURISTIC``,
    #: ``TUNING_CACHE`` (found in the tuning cache when the plan was created)
    #: or ``AUTOTUNE`` (:meth:`Plan.autotune` on this plan).
    config_source: _abi.ConfigSource


@dataclasses.dataclass(frozen=True)
class Config:
    """One configuration a plan can run, with what the plan's last
    :meth:`Plan.autotune` measured for it (``fmha_splitk_config``)."""

    #: Its index among the plan's candidates (0 is the heuristic's choice).
    index: int
    #: The configuration the heuristic chose.
    heuristic: bool
    #: The configuration the plan runs now.
    selected: bool
    #: Work items per worker the partition aims at (0: one range, no
    #: sequence split; -1: fixed by the problem, forced split_k or batch
    #: invariant).
    waves: int
    #: Ranges the batch's keys are cut into (0 when fixed by the problem).
    num_ranges: int
    #: Shortest piece of a split sequence, in keys (the chunk size when
    #: fixed by the problem).
    min_chunk_keys: int
    #: Most chunks a sequence gets for the expected lengths.
    split_k: int
    #: :class:`TuneState` after the last autotune (``UNTIMED`` before one).
    tune_state: _abi.TuneState
    #: Median time of one run in the last autotune, microseconds; -1 if not
    #: timed.
    time_us: float
    #: Deviation of its output from the heuristic's over the dtypes' bound
    #: (above 1: rejected); -1 if not timed.
    error_ratio: float
    #: Workspace bytes a run of this configuration needs.
    workspace_size: int
    #: Kernel and schedule, for logs.
    name: str


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """One backend candidate as the registry saw it (``fmha_backend_info``)."""

    #: :class:`Backend` kind.
    backend: _abi.Backend
    #: Loaded and usable.
    available: bool
    #: The plugin's score (0: no driver, device or arch).
    score: int
    #: Devices the backend can use.
    device_count: int
    #: Backend name.
    name: str
    #: Shared object path ("" for the built-in CPU backend).
    path: str
    #: Why it was or was not taken.
    reason: str
    #: Name of device 0 ("" if none).
    device_name: str


def _text(raw):
    return raw.decode("utf-8", "replace")


def _enum_member(enum_type, value):
    """The member of ``enum_type`` for a value the library returned, or the
    plain int for a value this binding does not know (a newer library)."""
    return enum_type(value) if value in enum_type._value2member_map_ else value


def _backend_kind(value):
    return _enum_member(_abi.Backend, value)


def _config(struct):
    return Config(index=struct.index, heuristic=bool(struct.heuristic), selected=bool(struct.selected),
                  waves=struct.waves, num_ranges=struct.num_ranges, min_chunk_keys=struct.min_chunk_keys,
                  split_k=struct.split_k, tune_state=_enum_member(_abi.TuneState, struct.tune_state),
                  time_us=struct.time_us, error_ratio=struct.error_ratio, workspace_size=struct.workspace_size,
                  name=_text(struct.name))


class Plan:
    """A validated problem: backend, device, split count, kernel, work
    partition and workspace size, chosen once (``fmha_splitk_create_plan``).

    Keyword arguments are the fields of ``fmha_splitk_problem`` (see the C
    header); every field left out is zero, the default, exactly as
    ``FMHA_SPLITK_PROBLEM_INIT`` leaves it. Enum fields take members of the
    enum classes (``Mask.CAUSAL``), ints, or names (``mask="causal"``,
    ``kv_layout="paged"``); dtype fields also take NumPy and PyTorch dtypes
    (``q_dtype=torch.bfloat16``) and their names ("float16", "bf16").
    ``flags`` takes an int, :class:`Flag` members or names.
    ``kv_seqlen_hint`` takes a sequence of ``batch`` ints (read only while the
    plan is created).

    Example::

        with fmha_splitk.Plan(batch=4, max_q_seqlen=1, max_kv_seqlen=4096,
                              heads_q=32, heads_kv=8, head_dim_qk=128,
                              q_dtype="f16") as plan:
            plan.run(q=q, k=k, v=v, o=o)

    A plan may be run from several threads at once, each with its own
    workspace; :meth:`close` (or leaving the ``with`` block) destroys it.
    :meth:`autotune` times its candidate configurations (:meth:`configs`)
    and keeps the fastest; a plan created after another of its problem class
    was tuned starts from the tuning cache's winner (:attr:`info`'s
    ``config_source``).

    Raises:
        TypeError: an unknown field name.
        ValueError: a field value the binding cannot convert.
        Error: the library refused the problem (an :class:`Error` subclass
            carrying the status and the library's message).
    """

    def __init__(self, **problem):
        unknown = sorted(set(problem) - set(PROBLEM_FIELDS))
        if unknown:
            raise TypeError(f"Plan: unknown problem field(s) {', '.join(unknown)}; "
                            f"fields are {', '.join(PROBLEM_FIELDS)}")
        struct = _abi.new_struct(_abi.Problem)
        hint = None
        for field, value in problem.items():
            if value is None:
                continue
            if field in _ENUM_FIELDS:
                value = _enum_value(_ENUM_FIELDS[field], value, field)
            elif field == "flags":
                value = _flags_value(value)
            elif field == "kv_seqlen_hint":
                lengths = [int(x) for x in value]
                # The library reads `batch` entries: a shorter array would be
                # read past its end.
                if len(lengths) != problem.get("batch", 0):
                    raise ValueError(f"kv_seqlen_hint: {len(lengths)} entries for batch {problem.get('batch', 0)}")
                hint = (ctypes.c_int32 * max(1, len(lengths)))(*lengths)
                struct.kv_seqlen_hint = ctypes.cast(hint, ctypes.POINTER(ctypes.c_int32))
                continue
            try:
                setattr(struct, field, value)
            except TypeError as e:
                raise TypeError(f"{field}: {e}") from None
        self._problem = dict(problem)
        handle = ctypes.c_void_p()
        check(lib().fmha_splitk_create_plan(ctypes.byref(struct), ctypes.byref(handle)),
              "fmha_splitk_create_plan")
        # Held by the plan so that a close() from __del__ at interpreter exit
        # does not depend on module globals that may already be gone.
        self._destroy = lib().fmha_splitk_destroy_plan
        self._handle = handle

    def _live_handle(self):
        handle = getattr(self, "_handle", None)
        if handle is None:
            raise ValueError("operation on a closed Plan")
        return handle

    @property
    def closed(self):
        """True once :meth:`close` has run."""
        return getattr(self, "_handle", None) is None

    @property
    def problem(self):
        """The keyword arguments the plan was created with (a copy)."""
        return dict(self._problem)

    @property
    def workspace_size(self):
        """Bytes of workspace a run needs (0 when split_k is 1)."""
        size = ctypes.c_size_t()
        check(lib().fmha_splitk_plan_workspace_size(self._live_handle(), ctypes.byref(size)),
              "fmha_splitk_plan_workspace_size")
        return size.value

    @property
    def info(self):
        """A :class:`PlanInfo`: what the plan chose."""
        struct = _abi.new_struct(_abi.PlanInfoStruct)
        check(lib().fmha_splitk_get_plan_info(self._live_handle(), ctypes.byref(struct)),
              "fmha_splitk_get_plan_info")
        return PlanInfo(backend=_backend_kind(struct.backend), device_id=struct.device_id,
                        split_k=struct.split_k, kv_chunk_size=struct.kv_chunk_size,
                        num_workers=struct.num_workers, max_partials=struct.max_partials,
                        workspace_size=struct.workspace_size, backend_name=_text(struct.backend_name),
                        kernel_name=_text(struct.kernel_name), device_name=_text(struct.device_name),
                        config_index=struct.config_index,
                        config_source=_enum_member(_abi.ConfigSource, struct.config_source))

    def config(self, index):
        """The :class:`Config` of candidate ``index``
        (``fmha_splitk_get_plan_config``).

        Raises:
            InvalidArgumentError: ``index`` is outside 0 .. count - 1 (the
                message names the range).
            TypeError: ``index`` is not an int.
            ValueError: the plan is closed, or ``index`` is not an int32.
        """
        index = operator.index(index)
        handle = self._live_handle()
        if not -2**31 <= index < 2**31:
            # ctypes would wrap it into int32 silently.
            raise ValueError(f"index = {index} is outside the plan's candidates")
        struct = _abi.new_struct(_abi.ConfigStruct)
        check(lib().fmha_splitk_get_plan_config(handle, index, ctypes.byref(struct)),
              "fmha_splitk_get_plan_config")
        return _config(struct)

    def configs(self):
        """Every configuration the plan can run, as a list of :class:`Config`
        in index order (``fmha_splitk_plan_config_count``,
        ``fmha_splitk_get_plan_config``). Index 0 is the heuristic's choice;
        plans whose partition the problem fixes (a forced ``split_k``,
        ``Flag.BATCH_INVARIANT``) have exactly one. After :meth:`autotune`
        each carries its ``tune_state``, ``time_us`` and ``error_ratio``.

        Raises:
            ValueError: the plan is closed.
        """
        count = ctypes.c_int32()
        check(lib().fmha_splitk_plan_config_count(self._live_handle(), ctypes.byref(count)),
              "fmha_splitk_plan_config_count")
        return [self.config(index) for index in range(count.value)]

    def run(self, q, k, v=None, o=None, *, lse=None, bias=None, sinks=None, kv_seqlen=None,
            kv_seqstart=None, q_seqstart=None, block_table=None, kv_indptr=None, kv_indices=None,
            kv_last_page_len=None, k_scale=None, v_scale=None, q_scale=None, o_partial=None,
            lse_partial=None, workspace=None, stream=None):
        """Runs the plan (``fmha_splitk_run``); outputs are written in place.

        Every tensor is any object with ``__dlpack__`` on the plan's device
        (shapes and dtypes as in ``fmha_splitk_args``: Q ``[B, Mq, Hq, Dqk]``
        or ``[B, Mq, G, Hq, Dqk]``, K/V per the key layout, O like Q with Dv,
        LSE ``[B, Hq, Mq]`` float32, ...). Optional ones are None when absent.

        Args:
            q, k, v: inputs (``v`` None with ``Flag.V_FROM_K``).
            o: output, written (None only with ``Flag.WRITE_PARTIALS``).
            lse, o_partial, lse_partial: optional outputs, written.
            bias, sinks, kv_seqlen, kv_seqstart, q_seqstart, block_table,
                kv_indptr, kv_indices, kv_last_page_len, k_scale, v_scale,
                q_scale: optional inputs, as the problem requires.
            workspace: a contiguous tensor of at least :attr:`workspace_size`
                bytes on the plan's device (256-byte aligned, e.g.
                ``torch.empty(plan.workspace_size, dtype=torch.uint8,
                device="cuda")``), or None to use the plan's own (the
                library then serialises runs of this plan; on CUDA a split
                run there merges inside its forward kernel: one launch).
            stream: None (the default stream), an int ``cudaStream_t`` /
                ``hipStream_t``, or a stream object (``torch.cuda.Stream``,
                ``cupy.cuda.Stream``). The CPU backend ignores it and computes
                before returning; on a GPU the call returns once the work is
                queued.

        Raises:
            ValueError: the plan is closed, or a tensor cannot be exported
                as needed (e.g. a read-only output).
            TypeError: an argument is not a tensor.
            Error: the library refused the run (the message names the tensor
                and the values).
        """
        handle = self._live_handle()
        call = _Call(stream)
        args = _run_args(call, dict(q=q, k=k, v=v, o=o, lse=lse, bias=bias, sinks=sinks, kv_seqlen=kv_seqlen,
                                    kv_seqstart=kv_seqstart, q_seqstart=q_seqstart, block_table=block_table,
                                    kv_indptr=kv_indptr, kv_indices=kv_indices, kv_last_page_len=kv_last_page_len,
                                    k_scale=k_scale, v_scale=v_scale, q_scale=q_scale, o_partial=o_partial,
                                    lse_partial=lse_partial), workspace)
        check(lib().fmha_splitk_run(handle, ctypes.byref(args)), "fmha_splitk_run")

    def autotune(self, q, k, v=None, o=None, *, lse=None, bias=None, sinks=None, kv_seqlen=None,
                 kv_seqstart=None, q_seqstart=None, block_table=None, kv_indptr=None, kv_indices=None,
                 kv_last_page_len=None, k_scale=None, v_scale=None, q_scale=None, o_partial=None,
                 lse_partial=None, warmup_runs=0, timed_runs=0, max_total_ms=0.0, cache=True, keep_l2=False,
                 stream=None):
        """Times the plan's candidate configurations on these tensors and
        fixes the fastest whose output agrees with the heuristic's
        (``fmha_splitk_autotune``); returns its :class:`Config`.

        Each candidate (the heuristic's first) runs ``warmup_runs`` untimed
        and ``timed_runs`` timed runs, of which the median counts; one whose
        O or LSE differs from the heuristic's beyond the bound of the
        problem's dtypes is rejected (``TuneState.REJECTED``) and never
        chosen. Unless ``cache`` is False the winner also goes into the
        process-wide tuning cache, from which later plans of the same problem
        class take it when they are created (``ConfigSource.TUNING_CACHE``).

        The tensors are those of :meth:`run`, with the same rules; O and LSE
        are written and end holding the winner's result. There is no
        ``workspace`` argument: autotune allocates its own. The call waits
        for ``stream`` (on a GPU too), so it cannot be captured in a CUDA
        graph: tune first, capture afterwards. The winner may need more
        workspace than the heuristic's choice: read :attr:`workspace_size`
        again before passing a workspace of your own. No other call may use
        this plan meanwhile; other plans may run and tune at once.

        Args:
            q, k, v, o, lse, ...: as in :meth:`run`.
            warmup_runs: untimed runs per candidate (0: the library's
                default, 3).
            timed_runs: timed runs per candidate (0: the default, 20).
            max_total_ms: bound on the whole call in milliseconds (0: the
                default, 2000); candidates not reached in time are skipped
                (``TuneState.SKIPPED``); the heuristic's is always timed.
            cache: False keeps the winner in this plan only
                (``AutotuneFlag.NO_CACHE_STORE``).
            keep_l2: GPU: do not overwrite the L2 cache before each timed
                run (``AutotuneFlag.KEEP_L2``); by default each run reads
                from memory, as in a serving step.
            stream: as in :meth:`run`.

        Raises:
            ValueError: the plan is closed, or a tensor cannot be exported
                as needed.
            TypeError: an argument is not a tensor, or an option has the
                wrong type.
            Error: the library refused the tensors or the options (the
                message names them), the backend cannot time runs
                (``NotSupportedError``), or a run failed; the plan is then
                left as it was.
        """
        handle = self._live_handle()
        call = _Call(stream)
        args = _run_args(call, dict(q=q, k=k, v=v, o=o, lse=lse, bias=bias, sinks=sinks, kv_seqlen=kv_seqlen,
                                    kv_seqstart=kv_seqstart, q_seqstart=q_seqstart, block_table=block_table,
                                    kv_indptr=kv_indptr, kv_indices=kv_indices, kv_last_page_len=kv_last_page_len,
                                    k_scale=k_scale, v_scale=v_scale, q_scale=q_scale, o_partial=o_partial,
                                    lse_partial=lse_partial))
        options = _abi.new_struct(_abi.AutotuneOptions)
        try:
            options.warmup_runs = warmup_runs
            options.timed_runs = timed_runs
            options.max_total_ms = max_total_ms
        except TypeError as e:
            raise TypeError(f"autotune options: {e}") from None
        options.flags = ((0 if cache else _abi.AutotuneFlag.NO_CACHE_STORE) |
                         (_abi.AutotuneFlag.KEEP_L2 if keep_l2 else 0))
        check(lib().fmha_splitk_autotune(handle, ctypes.byref(args), ctypes.byref(options)), "fmha_splitk_autotune")
        return self.config(self.info.config_index)

    def check_status(self, workspace=None, stream=None):
        """Reports what the device-side checks of a checked run found
        (``fmha_splitk_check_status``).

        With ``Flag.CHECKED`` a GPU run validates the lengths, offsets and
        page ids on the device, skips every sequence that fails (its output
        rows are not written) and records the first one in the workspace.
        This waits for ``stream``, raises the record as an error and clears
        it; call it after each run to check, with the same workspace (None:
        the plan's own) and stream. Returns None when nothing was recorded,
        for unchecked plans and on the CPU backend (whose runs reject bad
        metadata themselves).

        Raises:
            InvalidArgumentError: the run met bad metadata; the message names
                the sequence, the field and the value.
            ValueError: the plan is closed.
            Error: synchronising or reading the record failed.
        """
        handle = self._live_handle()
        call = _Call(stream)
        address, _ = call.workspace(workspace)
        check(lib().fmha_splitk_check_status(handle, address, call.stream or None), "fmha_splitk_check_status")

    def close(self):
        """Destroys the plan (``fmha_splitk_destroy_plan``); idempotent. The
        caller must make sure no run using the plan's own workspace is still
        in flight on a GPU stream."""
        handle = getattr(self, "_handle", None)
        if handle is not None:
            self._handle = None
            self._destroy(handle)

    def __enter__(self):
        self._live_handle()
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def __repr__(self):
        if self.closed:
            return "<fmha_splitk.Plan (closed)>"
        info = self.info
        return (f"<fmha_splitk.Plan {info.backend_name} split_k={info.split_k} "
                f"kernel={info.kernel_name!r} workspace={info.workspace_size}>")


def merge(o_partials, lse_partials, o, lse=None, *, stream=None):
    """Merges partial attention results (``fmha_merge``).

    ``LSE = log sum_i exp(LSE_i)``, ``O = sum_i exp(LSE_i - LSE) * O_i``;
    rows where every ``LSE_i`` is -inf give O = 0, LSE = -inf.

    Args:
        o_partials: the partial outputs, stacked (one tensor
            ``[N, B, M, H, D]`` or ``[N, B, M, G, H, D]``) or a list / tuple
            of N tensors ``[B, M, H, D]`` (each with its own strides).
        lse_partials: the partial LSE in the same form: ``[N, B, H, M]``
            (or with G) float32, or a list of ``[B, H, M]``.
        o: merged output ``[B, M, H, D]`` (fp16, bf16 or fp32), written.
        lse: optional merged LSE ``[B, H, M]`` float32, written.
        stream: as in :meth:`Plan.run`; the backend follows the tensors'
            device.

    Raises:
        Error: the library refused the arguments (its message says why).
    """
    call = _Call(stream)
    args = _abi.new_struct(_abi.MergeArgs)
    count = call.partials(args, o_partials, "o_stacked", "o_list", "o_partials", None)
    count = call.partials(args, lse_partials, "lse_stacked", "lse_list", "lse_partials", count)
    args.num_partials = count or 0
    args.o = call.tensor(o, "o", writable=True)
    args.lse = call.tensor(lse, "lse", writable=True)
    args.stream = call.stream or None
    check(lib().fmha_merge(ctypes.byref(args)), "fmha_merge")


def merge_backward(o_partials, lse_partials, o, lse, grad_o, grad_lse=None, *, grad_o_partials,
                   grad_lse_partials, stream=None):
    """Gradients of :func:`merge` (``fmha_merge_backward``).

    With ``w_i = exp(LSE_i - LSE)``: ``dO_i = w_i * dO`` and
    ``dLSE_i = w_i * (dLSE + <O_i - O, dO>)`` (dot over the head dim); rows
    where LSE = -inf give zero gradients.

    Args:
        o_partials, lse_partials: the forward's partials, stacked or lists
            (as in :func:`merge`).
        o, lse: the forward's merged O and LSE.
        grad_o: gradient of the merged O (shape of O).
        grad_lse: gradient of the merged LSE (float32), or None for zero.
        grad_o_partials, grad_lse_partials: the gradients of the partials,
            written (both required), each stacked or a list.
        stream: as in :meth:`Plan.run`.

    Raises:
        Error: the library refused the arguments (its message says why).
    """
    call = _Call(stream)
    args = _abi.new_struct(_abi.MergeBackwardArgs)
    count = call.partials(args, o_partials, "o_stacked", "o_list", "o_partials", None)
    count = call.partials(args, lse_partials, "lse_stacked", "lse_list", "lse_partials", count)
    count = call.partials(args, grad_o_partials, "grad_o_stacked", "grad_o_list", "grad_o_partials", count,
                          writable=True)
    count = call.partials(args, grad_lse_partials, "grad_lse_stacked", "grad_lse_list", "grad_lse_partials",
                          count, writable=True)
    args.num_partials = count or 0
    args.o = call.tensor(o, "o")
    args.lse = call.tensor(lse, "lse")
    args.grad_o = call.tensor(grad_o, "grad_o")
    args.grad_lse = call.tensor(grad_lse, "grad_lse")
    args.stream = call.stream or None
    check(lib().fmha_merge_backward(ctypes.byref(args)), "fmha_merge_backward")


def quantize_kv(src, dst, scale=None, *, kv_quant, kv_quant_groups=0, fp8_format="e4m3fn",
                kv_scale_kind="f16x2_scale_shift", scale_granularity="per_row"):
    """Packs K/V (or fp8 Q) into a quantised format (``fmha_quantize_kv``).

    Runs on the host over CPU tensors: quantise there, then copy to the
    device. The format arguments mirror the problem's fields, so the result
    feeds a plan created with the same values.

    Args:
        src: values ``[..., D]``, float16, bfloat16 or float32, on the CPU.
        dst: packed output, written: int4: int32 ``[..., groups + D/8]``;
            fp8: uint8 ``[..., D]`` (or int32 ``[..., D/4]``).
        scale: fp8 only: the scales, written (shape per
            ``scale_granularity``); None for int4.
        kv_quant: "int4" or "fp8" (or :class:`KvQuant`).
        kv_quant_groups: int4 groups along D: 0 or 1 (row-wise), 2, 4, 8.
        fp8_format: "e4m3fn" or "e4m3fnuz" (:class:`Fp8Format`).
        kv_scale_kind: "f16x2_scale_shift" or "f32" (:class:`KvScaleKind`).
        scale_granularity: "per_row", "per_head" or "per_tensor".

    Raises:
        Error: the library refused the arguments (its message says why).
    """
    call = _Call(None)
    args = _abi.new_struct(_abi.QuantizeKvArgs)
    args.src = call.tensor(src, "src")
    args.dst = call.tensor(dst, "dst", writable=True)
    args.scale = call.tensor(scale, "scale", writable=True)
    args.kv_quant = _enum_value(_abi.KvQuant, kv_quant, "kv_quant")
    args.kv_quant_groups = kv_quant_groups
    args.fp8_format = _enum_value(_abi.Fp8Format, fp8_format, "fp8_format")
    args.kv_scale_kind = _enum_value(_abi.KvScaleKind, kv_scale_kind, "kv_scale_kind")
    args.scale_granularity = _enum_value(_abi.ScaleGranularity, scale_granularity, "scale_granularity")
    check(lib().fmha_quantize_kv(ctypes.byref(args)), "fmha_quantize_kv")


def tuning_cache_save():
    """The process's tuning cache as a versioned, checksummed byte string
    (``fmha_tuning_cache_save``), for :func:`tuning_cache_load` in a process
    with the same library version and devices."""
    library = lib()
    size = ctypes.c_size_t()
    check(library.fmha_tuning_cache_save(None, 0, ctypes.byref(size)), "fmha_tuning_cache_save")
    while True:
        capacity = size.value
        buffer = ctypes.create_string_buffer(max(1, capacity))
        status = library.fmha_tuning_cache_save(buffer, capacity, ctypes.byref(size))
        # Another thread's autotune may have grown the cache since the size
        # was asked for: ask again with the new size.
        if status != _abi.Status.SUCCESS and size.value > capacity:
            continue
        check(status, "fmha_tuning_cache_save")
        return buffer.raw[:size.value]


def tuning_cache_load(data):
    """Adds the entries of a saved tuning cache to the process's
    (``fmha_tuning_cache_load``), replacing entries of the same class and
    device. All or nothing: on failure the cache is left as it was.

    Args:
        data: what :func:`tuning_cache_save` returned: ``bytes``,
            ``bytearray``, a ``memoryview`` or any other bytes-like object.

    Raises:
        TypeError: ``data`` is not bytes-like.
        InvalidArgumentError: a truncated or corrupt buffer (bad magic,
            format, length or checksum).
        NotSupportedError: made by another library version, or for a device
            this process does not have (the message names it).
    """
    raw = memoryview(data).tobytes()
    buffer = ctypes.create_string_buffer(raw, max(1, len(raw)))
    check(lib().fmha_tuning_cache_load(buffer, len(raw)), "fmha_tuning_cache_load")


def _c_path(path):
    """A str, bytes or path-like as a NUL-terminated file name."""
    encoded = os.fsencode(path)
    if b"\0" in encoded:
        # C would stop at the NUL and use another file.
        raise ValueError(f"path: embedded null byte in {path!r}")
    return encoded


def tuning_cache_save_file(path):
    """Writes the tuning cache to the file at ``path`` (a str or path-like;
    created or replaced) (``fmha_tuning_cache_save_file``).

    Raises:
        TypeError: ``path`` is not a str, bytes or path-like.
        ValueError: ``path`` holds a NUL byte.
        InvalidArgumentError: the file cannot be written (with the system's
            reason).
    """
    check(lib().fmha_tuning_cache_save_file(_c_path(path)), "fmha_tuning_cache_save_file")


def tuning_cache_load_file(path):
    """:func:`tuning_cache_load` from the file at ``path``
    (``fmha_tuning_cache_load_file``).

    Raises:
        TypeError, ValueError: as :func:`tuning_cache_save_file`.
        InvalidArgumentError: the file cannot be read (with the system's
            reason), or is truncated or corrupt.
        NotSupportedError: as :func:`tuning_cache_load`.
    """
    check(lib().fmha_tuning_cache_load_file(_c_path(path)), "fmha_tuning_cache_load_file")


def tuning_cache_entries():
    """Number of entries in the tuning cache (``fmha_tuning_cache_entries``)."""
    entries = ctypes.c_size_t()
    check(lib().fmha_tuning_cache_entries(ctypes.byref(entries)), "fmha_tuning_cache_entries")
    return entries.value


def tuning_cache_clear():
    """Empties the tuning cache (``fmha_tuning_cache_clear``); plans already
    created keep their configuration."""
    lib().fmha_tuning_cache_clear()


def backends():
    """The backend candidates the registry considered (``fmha_get_backends``),
    as a list of :class:`BackendInfo`: which loaded, their devices, and why
    each was or was not taken."""
    library = lib()
    count = ctypes.c_size_t()
    check(library.fmha_get_backends(None, 0, ctypes.byref(count)), "fmha_get_backends")
    capacity = count.value
    infos = (_abi.BackendInfoStruct * max(1, capacity))()
    for info in infos:
        info.struct_size = ctypes.sizeof(_abi.BackendInfoStruct)
    check(library.fmha_get_backends(infos, capacity, ctypes.byref(count)), "fmha_get_backends")
    return [BackendInfo(backend=_backend_kind(i.backend), available=bool(i.available), score=i.score,
                        device_count=i.device_count, name=_text(i.name), path=_text(i.path),
                        reason=_text(i.reason), device_name=_text(i.device_name))
            for i in infos[:min(capacity, count.value)]]


def version():
    """The library's version, "MAJOR.MINOR.PATCH" (``fmha_version``)."""
    return _text(lib().fmha_version())


def version_code():
    """The library's version as major * 10000 + minor * 100 + patch."""
    return lib().fmha_version_code()


def status_string(status):
    """The library's static text for a status ("invalid argument", ...)."""
    return _text(lib().fmha_status_string(int(status)))


def last_error_message():
    """The library's detailed message of the last failed call on this thread
    (``fmha_last_error_message``; "" after a success). Every :class:`Error`
    already carries it as ``message``."""
    return _text(lib().fmha_last_error_message())
