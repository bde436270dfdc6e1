"""The C ABI of libfmha_splitk.so.0 as ctypes declarations.

Every struct and enum mirrors include/fmha_splitk/fmha_splitk.h (and the
DLPack structs of <dlpack/dlpack.h>) field for field, with the C names, so
that tests/test_layout.py can compare each size and offset with what the
system C compiler computes from the header itself.
"""
import ctypes
import enum

# The ABI major version these declarations describe (the SONAME's number).
ABI_MAJOR = 0


# --- DLPack ----------------------------------------------------------------


class DLDevice(ctypes.Structure):
    """DLPack's DLDevice: device type (kDLCPU = 1, kDLCUDA = 2, kDLROCM = 10)
    and ordinal."""

    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    """DLPack's DLDataType: type code, bits per lane, lanes."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """DLPack's DLTensor (identical in DLPack 0.6 and 1.x). Strides count
    elements; NULL strides mean compact row-major."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    """What a legacy "dltensor" capsule points to (DLPack < 1.0)."""

    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class DLPackVersion(ctypes.Structure):
    """DLPack 1.x version pair."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    """What a "dltensor_versioned" capsule points to (DLPack >= 1.0). Not in
    Debian's DLPack 0.6 header: its layout is the DLPack 1.x specification's."""

    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# DLManagedTensorVersioned.flags bits (DLPack 1.0).
DLPACK_FLAG_READ_ONLY = 1 << 0
DLPACK_FLAG_IS_COPIED = 1 << 1

# DLDeviceType values the library knows.
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_ROCM = 10
KDL_ROCM_HOST = 11
KDL_CUDA_MANAGED = 13

# DLDataTypeCode values (DLPack 1.1 adds the fp8 codes the library accepts).
KDL_INT = 0
KDL_UINT = 1
KDL_FLOAT = 2
KDL_BFLOAT = 4
KDL_FLOAT8_E4M3FN = 10
KDL_FLOAT8_E4M3FNUZ = 11


# --- Enumerations ------------------------------------------------------------
# Each class records the prefix of its C constants so that the layout test
# can check every value against the header.


class Status(enum.IntEnum):
    """fmha_status: what every fallible function returns."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    NOT_SUPPORTED = 2
    BACKEND_UNAVAILABLE = 3
    INSUFFICIENT_WORKSPACE = 4
    OUT_OF_MEMORY = 5
    DEVICE_ERROR = 6
    INTERNAL_ERROR = 7


class Backend(enum.IntEnum):
    """fmha_backend_kind. AUTO picks by device query (CUDA, then HIP, then
    CPU); the environment variable FMHA_SPLITK_BACKEND=cpu|cuda|hip overrides
    AUTO."""

    AUTO = 0
    CPU = 1
    CUDA = 2
    HIP = 3


class Dtype(enum.IntEnum):
    """fmha_dtype: element types named in a problem."""

    DEFAULT = 0
    F16 = 1
    BF16 = 2
    F32 = 3
    FP8 = 4


class KvQuant(enum.IntEnum):
    """fmha_kv_quant: quantisation of the K/V cache."""

    NONE = 0
    INT4 = 1
    FP8 = 2


class Fp8Format(enum.IntEnum):
    """fmha_fp8_format: E4M3FN (NVIDIA, OCP) or E4M3FNUZ (AMD gfx942)."""

    E4M3FN = 0
    E4M3FNUZ = 1


class KvScaleKind(enum.IntEnum):
    """fmha_kv_scale_kind: how fp8 K/V scales are stored."""

    F16X2_SCALE_SHIFT = 0
    F32 = 1


class ScaleGranularity(enum.IntEnum):
    """fmha_scale_granularity: one fp8 scale per row, per head or per tensor."""

    PER_ROW = 0
    PER_HEAD = 1
    PER_TENSOR = 2


class KvLayout(enum.IntEnum):
    """fmha_kv_layout: where the keys of each sequence are."""

    DENSE = 0
    PADDED = 1
    GAPPY = 2
    PAGED = 3
    RAGGED = 4


class QLayout(enum.IntEnum):
    """fmha_q_layout: where the queries of each sequence are."""

    FIXED = 0
    VARLEN = 1


class Mask(enum.IntEnum):
    """fmha_mask_kind: structural masks (bottom-right aligned)."""

    NONE = 0
    CAUSAL = 1
    LOCAL = 2
    CAUSAL_LOCAL = 3


class Flag(enum.IntFlag):
    """fmha_problem_flags: bits of the problem's ``flags``."""

    BATCH_INVARIANT = 1 << 0
    WRITE_PARTIALS = 1 << 1
    V_FROM_K = 1 << 2
    FP8_QK = 1 << 3
    FP8_PV = 1 << 4
    CHECKED = 1 << 5
    EXTERNAL_WORKSPACE = 1 << 6


class ConfigSource(enum.IntEnum):
    """fmha_config_source: where a plan's configuration came from."""

    HEURISTIC = 0
    TUNING_CACHE = 1
    AUTOTUNE = 2


class TuneState(enum.IntEnum):
    """fmha_tune_state: what the plan's last autotune did with a candidate."""

    UNTIMED = 0
    ACCEPTED = 1
    REJECTED = 2
    SKIPPED = 3
    FAILED = 4


class AutotuneFlag(enum.IntFlag):
    """fmha_autotune_flags: bits of ``fmha_splitk_autotune_options.flags``."""

    NO_CACHE_STORE = 1 << 0
    KEEP_L2 = 1 << 1


# Python enum -> prefix of its constants in the C header.
C_ENUM_PREFIXES = {
    Status: "FMHA_STATUS_",
    Backend: "FMHA_BACKEND_",
    Dtype: "FMHA_DTYPE_",
    KvQuant: "FMHA_KV_QUANT_",
    Fp8Format: "FMHA_FP8_",
    KvScaleKind: "FMHA_KV_SCALE_",
    ScaleGranularity: "FMHA_SCALE_",
    KvLayout: "FMHA_KV_",
    QLayout: "FMHA_Q_",
    Mask: "FMHA_MASK_",
    Flag: "FMHA_FLAG_",
    ConfigSource: "FMHA_CONFIG_",
    TuneState: "FMHA_TUNE_",
    AutotuneFlag: "FMHA_AUTOTUNE_",
}


# --- Public structs ----------------------------------------------------------

_TensorPtr = ctypes.POINTER(DLTensor)
_TensorList = ctypes.POINTER(_TensorPtr)


class Problem(ctypes.Structure):
    """fmha_splitk_problem: everything fixed for a plan."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("backend", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("batch", ctypes.c_int64),
        ("max_q_seqlen", ctypes.c_int64),
        ("max_kv_seqlen", ctypes.c_int64),
        ("groups", ctypes.c_int32),
        ("heads_q", ctypes.c_int32),
        ("heads_kv", ctypes.c_int32),
        ("head_dim_qk", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("q_layout", ctypes.c_int32),
        ("kv_layout", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        ("q_dtype", ctypes.c_int32),
        ("kv_dtype", ctypes.c_int32),
        ("o_dtype", ctypes.c_int32),
        ("kv_quant", ctypes.c_int32),
        ("kv_quant_groups", ctypes.c_int32),
        ("fp8_format", ctypes.c_int32),
        ("kv_scale_kind", ctypes.c_int32),
        ("kv_scale_granularity", ctypes.c_int32),
        ("q_scale_granularity", ctypes.c_int32),
        ("mask", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("has_bias", ctypes.c_int32),
        ("has_sinks", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("softcap", ctypes.c_float),
        ("split_k", ctypes.c_int32),
        ("kv_chunk_size", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("kv_seqlen_hint", ctypes.POINTER(ctypes.c_int32)),
        ("num_pages", ctypes.c_int64),
        ("max_pages_per_seq", ctypes.c_int64),
    ]


class RunArgs(ctypes.Structure):
    """fmha_splitk_args: tensors and memory for one run."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("q", _TensorPtr),
        ("k", _TensorPtr),
        ("v", _TensorPtr),
        ("o", _TensorPtr),
        ("lse", _TensorPtr),
        ("bias", _TensorPtr),
        ("sinks", _TensorPtr),
        ("kv_seqlen", _TensorPtr),
        ("kv_seqstart", _TensorPtr),
        ("q_seqstart", _TensorPtr),
        ("block_table", _TensorPtr),
        ("kv_indptr", _TensorPtr),
        ("kv_indices", _TensorPtr),
        ("kv_last_page_len", _TensorPtr),
        ("k_scale", _TensorPtr),
        ("v_scale", _TensorPtr),
        ("q_scale", _TensorPtr),
        ("o_partial", _TensorPtr),
        ("lse_partial", _TensorPtr),
        ("workspace", ctypes.c_void_p),
        ("workspace_size", ctypes.c_size_t),
        ("stream", ctypes.c_void_p),
    ]


class PlanInfoStruct(ctypes.Structure):
    """fmha_splitk_plan_info: what a plan chose."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("backend", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("split_k", ctypes.c_int32),
        ("kv_chunk_size", ctypes.c_int32),
        ("num_workers", ctypes.c_int32),
        ("max_partials", ctypes.c_int32),
        ("workspace_size", ctypes.c_size_t),
        ("backend_name", ctypes.c_char * 16),
        ("kernel_name", ctypes.c_char * 96),
        ("device_name", ctypes.c_char * 96),
        ("config_index", ctypes.c_int32),
        ("config_source", ctypes.c_int32),
    ]


class ConfigStruct(ctypes.Structure):
    """fmha_splitk_config: one configuration a plan can run, with what the
    last autotune measured for it."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("index", ctypes.c_int32),
        ("heuristic", ctypes.c_int32),
        ("selected", ctypes.c_int32),
        ("waves", ctypes.c_int32),
        ("num_ranges", ctypes.c_int32),
        ("min_chunk_keys", ctypes.c_int32),
        ("split_k", ctypes.c_int32),
        ("tune_state", ctypes.c_int32),
        ("time_us", ctypes.c_double),
        ("error_ratio", ctypes.c_double),
        ("workspace_size", ctypes.c_size_t),
        ("name", ctypes.c_char * 96),
    ]


class AutotuneOptions(ctypes.Structure):
    """fmha_splitk_autotune_options: runs, time budget and flags of an autotune."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("warmup_runs", ctypes.c_int32),
        ("timed_runs", ctypes.c_int32),
        ("max_total_ms", ctypes.c_double),
        ("flags", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
    ]


class MergeArgs(ctypes.Structure):
    """fmha_merge_args: partial results, stacked or as lists, and the output."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("o_stacked", _TensorPtr),
        ("lse_stacked", _TensorPtr),
        ("num_partials", ctypes.c_size_t),
        ("o_list", _TensorList),
        ("lse_list", _TensorList),
        ("o", _TensorPtr),
        ("lse", _TensorPtr),
        ("stream", ctypes.c_void_p),
    ]


class MergeBackwardArgs(ctypes.Structure):
    """fmha_merge_backward_args: the merge's gradients."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("o_stacked", _TensorPtr),
        ("lse_stacked", _TensorPtr),
        ("num_partials", ctypes.c_size_t),
        ("o_list", _TensorList),
        ("lse_list", _TensorList),
        ("o", _TensorPtr),
        ("lse", _TensorPtr),
        ("grad_o", _TensorPtr),
        ("grad_lse", _TensorPtr),
        ("grad_o_stacked", _TensorPtr),
        ("grad_lse_stacked", _TensorPtr),
        ("grad_o_list", _TensorList),
        ("grad_lse_list", _TensorList),
        ("stream", ctypes.c_void_p),
    ]


class BackendInfoStruct(ctypes.Structure):
    """fmha_backend_info: one backend candidate as the registry saw it."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("backend", ctypes.c_int32),
        ("available", ctypes.c_int32),
        ("score", ctypes.c_int32),
        ("device_count", ctypes.c_int32),
        ("name", ctypes.c_char * 16),
        ("path", ctypes.c_char * 512),
        ("reason", ctypes.c_char * 256),
        ("device_name", ctypes.c_char * 96),
    ]


class QuantizeKvArgs(ctypes.Structure):
    """fmha_quantize_kv_args: tensors and format of fmha_quantize_kv()."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("src", _TensorPtr),
        ("dst", _TensorPtr),
        ("scale", _TensorPtr),
        ("kv_quant", ctypes.c_int32),
        ("kv_quant_groups", ctypes.c_int32),
        ("fp8_format", ctypes.c_int32),
        ("kv_scale_kind", ctypes.c_int32),
        ("scale_granularity", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
    ]


# ctypes struct -> C type name, for the layout test.
C_STRUCT_NAMES = {
    DLDevice: "DLDevice",
    DLDataType: "DLDataType",
    DLTensor: "DLTensor",
    DLManagedTensor: "DLManagedTensor",
    Problem: "fmha_splitk_problem",
    RunArgs: "fmha_splitk_args",
    PlanInfoStruct: "fmha_splitk_plan_info",
    ConfigStruct: "fmha_splitk_config",
    AutotuneOptions: "fmha_splitk_autotune_options",
    MergeArgs: "fmha_merge_args",
    MergeBackwardArgs: "fmha_merge_backward_args",
    BackendInfoStruct: "fmha_backend_info",
    QuantizeKvArgs: "fmha_quantize_kv_args",
}


def new_struct(struct_type):
    """A struct as the C *_INIT macros make it: every field zero and
    ``struct_size`` = sizeof(struct) (ctypes zero-fills new structs)."""
    value = struct_type()
    value.struct_size = ctypes.sizeof(struct_type)
    return value
