#include "core/tensor_view.h"

#include <algorithm>

#include "core/checked_int.h"
#include "core/error.h"
#include "core/names.h"

namespace fmha::core {

namespace {

// DLPack 1.1 type codes of the fp8 formats (absent from DLPack 0.6); the
// offset from kFp8CodeE4m3fn is the fmha_fp8_format.
constexpr uint8_t kFp8CodeE4m3fn = 10;
constexpr uint8_t kFp8CodeE4m3fnuz = 11;
constexpr int64_t kFp8PerWord = 4;

struct Dims {
  int32_t ndim = 0;
  int64_t shape[FMHA_MAX_VIEW_RANK] = {};
  int64_t stride[FMHA_MAX_VIEW_RANK] = {};
};

struct Form {
  bool omit_g;
  bool merged_rows;
};

std::string expected_text(const TensorRule &rule) {
  std::string text = "[";
  for (size_t axis = 0; axis < rule.dims.size(); ++axis) {
    const DimSpec &dim = rule.dims[axis];
    text += cat(axis ? ", " : "", dim.name, "=");
    text += dim.extent == kAnyExtent ? std::string("*") : cat(dim.extent);
  }
  text += "]";
  std::string forms;
  const auto add = [&forms](const std::string &form) { forms += (forms.empty() ? " (" : "; ") + form; };
  if (rule.g_axis >= 0) add("G may be left out when it is 1");
  if (rule.rows_may_merge) add("num_pages and page_size may be one dim of num_pages * page_size rows");
  if (rule.broadcast_head_axis >= 0) add(cat("1 head may be given as ", rule.broadcast_heads, " heads with stride 0"));
  if (rule.scalar_ok) add("or 0-d");
  if (rule.fp8_words) add("fp8 as int32 words: the last dim holds D / 4 words");
  return forms.empty() ? text : text + forms + ")";
}

// "float16 (problem.q_dtype = FMHA_DTYPE_F16)": the accepted types, said.
std::string elems_text(const TensorRule &rule) {
  if (rule.elems_field == nullptr) return rule.elems_text;
  return cat(rule.elems_text, " (problem.", rule.elems_field, " = ", dtype_name(rule.elems_dtype), ")");
}

// The element type of `tensor` under `rule`; `words` is set for fp8 given as
// int32 words.
int32_t element_type(const DLTensor &tensor, const TensorRule &rule, bool &words) {
  const DLDataType dtype = tensor.dtype;
  const bool fp8 = (rule.elems & elem_bit(FMHA_ELEM_FP8)) != 0;
  int32_t elem = FMHA_ELEM_NONE;
  words = false;
  if (dtype.lanes == 1) {
    if (dtype.code == kDLFloat && dtype.bits == 16) elem = FMHA_ELEM_F16;
    if (dtype.code == kDLFloat && dtype.bits == 32) elem = FMHA_ELEM_F32;
    if (dtype.code == kDLFloat && dtype.bits == 64) elem = FMHA_ELEM_F64;
    if (dtype.code == kDLBfloat && dtype.bits == 16) elem = FMHA_ELEM_BF16;
    if (dtype.code == kDLInt && dtype.bits == 32) {
      elem = FMHA_ELEM_I32;
      if ((rule.elems & elem_bit(FMHA_ELEM_I32)) == 0 && fp8 && rule.fp8_words) {
        elem = FMHA_ELEM_FP8;
        words = true;
      }
    }
    if (fp8 && dtype.bits == 8 &&
        (dtype.code == kDLUInt || dtype.code == kFp8CodeE4m3fn || dtype.code == kFp8CodeE4m3fnuz)) {
      if (dtype.code != kDLUInt && dtype.code - kFp8CodeE4m3fn != rule.fp8_format)
        invalid(cat(rule.name, " has dtype ", dl_dtype_string(dtype), " but problem.fp8_format = ", rule.fp8_format,
                    " (", rule.fp8_format == FMHA_FP8_E4M3FN ? "FMHA_FP8_E4M3FN" : "FMHA_FP8_E4M3FNUZ", ")"));
      elem = FMHA_ELEM_FP8;
    }
  }
  if (elem == FMHA_ELEM_NONE || (rule.elems & elem_bit(static_cast<fmha_elem_type>(elem))) == 0)
    invalid(cat(rule.name, " has dtype ", dl_dtype_string(dtype), "; expected ", elems_text(rule)));
  return elem;
}

// The caller's shape and strides (compact row-major when strides is NULL).
Dims given_dims(const DLTensor &tensor, const TensorRule &rule) {
  const Quantity size("the size of ", rule.name);
  if (tensor.ndim < 0 || tensor.ndim > FMHA_MAX_VIEW_RANK)
    invalid(cat(rule.name, " has ndim = ", tensor.ndim, "; expected ", expected_text(rule)));
  if (tensor.ndim > 0 && tensor.shape == nullptr) invalid(cat(rule.name, "->shape is NULL"));
  Dims dims;
  dims.ndim = tensor.ndim;
  for (int32_t axis = 0; axis < dims.ndim; ++axis) {
    dims.shape[axis] = tensor.shape[axis];
    if (dims.shape[axis] < 0) invalid(cat(rule.name, "->shape[", axis, "] = ", dims.shape[axis], " is negative"));
  }
  int64_t compact = 1;
  for (int32_t axis = dims.ndim - 1; axis >= 0; --axis) {
    if (tensor.strides != nullptr) {
      dims.stride[axis] = tensor.strides[axis];
      if (dims.stride[axis] < 0)
        invalid(cat(rule.name, "->strides[", axis, "] = ", dims.stride[axis],
                    " is negative (reversed views are not supported)"));
    } else {
      dims.stride[axis] = compact;
      compact = checked_product({compact, std::max<int64_t>(dims.shape[axis], 1)}, size);
    }
  }
  return dims;
}

void check_last_dim_contiguous(const Dims &dims, const TensorRule &rule) {
  const int32_t last = dims.ndim - 1;
  if (last >= 0 && dims.shape[last] > 1 && dims.stride[last] != 1)
    invalid(cat(rule.name, " has last-dim stride ", dims.stride[last], "; the last dim must be contiguous (stride 1)"));
}

// Re-expresses int32 words of four fp8 values as bytes.
void words_to_bytes(Dims &dims, const TensorRule &rule) {
  const Quantity size("the size of ", rule.name);
  if (dims.ndim == 0) invalid(cat(rule.name, " is 0-d; expected ", expected_text(rule)));
  check_last_dim_contiguous(dims, rule);
  const int32_t last = dims.ndim - 1;
  for (int32_t axis = 0; axis < last; ++axis)
    dims.stride[axis] = checked_product({dims.stride[axis], kFp8PerWord}, size);
  dims.shape[last] = checked_product({dims.shape[last], kFp8PerWord}, size);
  dims.stride[last] = 1;
}

// The caller's dims laid out in canonical order under `form`; false when the
// form does not fit.
bool expand(const Dims &given, Form form, const TensorRule &rule, Dims &canonical) {
  const auto rank = static_cast<int32_t>(rule.dims.size());
  canonical.ndim = rank;
  int32_t source = 0;
  for (int32_t axis = 0; axis < rank; ++axis) {
    if (form.merged_rows && axis == 0) {
      const int64_t page_size = rule.dims[1].extent;
      const int64_t rows = given.shape[source];
      if (page_size <= 0 || rows % page_size != 0) return false;
      canonical.shape[0] = rows / page_size;
      canonical.stride[0] =
          checked_product({given.stride[source], page_size}, Quantity("the page stride of ", rule.name));
      canonical.shape[1] = page_size;
      canonical.stride[1] = given.stride[source];
      ++source;
      ++axis;
    } else if (form.omit_g && axis == rule.g_axis) {
      canonical.shape[axis] = 1;
      canonical.stride[axis] = 0;
    } else {
      canonical.shape[axis] = given.shape[source];
      canonical.stride[axis] = given.stride[source];
      ++source;
    }
  }
  return true;
}

bool matches(Dims &canonical, const TensorRule &rule) {
  for (int32_t axis = 0; axis < canonical.ndim; ++axis) {
    const int64_t expected = rule.dims[static_cast<size_t>(axis)].extent;
    if (expected == kAnyExtent || canonical.shape[axis] == expected) continue;
    const bool broadcast = axis == rule.broadcast_head_axis && expected == 1 &&
                           canonical.shape[axis] == rule.broadcast_heads && canonical.stride[axis] == 0;
    if (!broadcast) return false;
    canonical.shape[axis] = 1;
  }
  return true;
}

Dims canonical_dims(const Dims &given, const TensorRule &rule, const DLTensor &tensor) {
  const auto rank = static_cast<int32_t>(rule.dims.size());
  Dims canonical;
  if (rule.scalar_ok && given.ndim == 0 && rank == 1) {
    canonical.ndim = 1;
    canonical.shape[0] = 1;
    canonical.stride[0] = 1;
    if (matches(canonical, rule)) return canonical;
  }
  for (Form form : {Form{false, false}, Form{true, false}, Form{false, true}, Form{true, true}}) {
    if ((form.omit_g && rule.g_axis < 0) || (form.merged_rows && !rule.rows_may_merge)) continue;
    if (given.ndim != rank - form.omit_g - form.merged_rows) continue;
    if (expand(given, form, rule, canonical) && matches(canonical, rule)) return canonical;
  }
  invalid(cat(rule.name, " has shape ", shape_string(tensor.shape, tensor.ndim), "; expected ", expected_text(rule)));
}

// `given_elem_bytes` is the caller's element size (4 for fp8 as words),
// `element_bytes` the view's.
void check_alignment(uintptr_t address, const Dims &dims, int64_t given_elem_bytes, int64_t element_bytes,
                     const TensorRule &rule, const Placement &placement) {
  if (address % static_cast<uintptr_t>(given_elem_bytes) != 0)
    invalid(cat(rule.name, "->data + byte_offset = 0x", std::hex, address, std::dec, " is not aligned to its ",
                given_elem_bytes, "-byte elements"));
  if (!rule.row_aligned || placement.row_alignment <= 1) return;
  const int32_t wanted = rule.row_alignment_cap > 0 ? std::min(placement.row_alignment, rule.row_alignment_cap)
                                                    : placement.row_alignment;
  const auto alignment = static_cast<uintptr_t>(wanted);
  if (address % alignment != 0)
    invalid(cat(rule.name, "->data + byte_offset = 0x", std::hex, address, std::dec, " is not a multiple of the ",
                alignment, "-byte row alignment of the plan's device"));
  for (int32_t axis = 0; axis + 1 < dims.ndim; ++axis) {
    const int64_t stride_bytes = dims.stride[axis] * element_bytes;
    if (dims.shape[axis] > 1 && stride_bytes % static_cast<int64_t>(alignment) != 0)
      invalid(cat(rule.name, " has stride ", dims.stride[axis], " (", stride_bytes, " bytes) along ",
                  rule.dims[static_cast<size_t>(axis)].name, ", not a multiple of the ", alignment,
                  "-byte row alignment of the plan's device"));
  }
}

}  // namespace

int64_t elem_bytes(int32_t elem) { return static_cast<int64_t>(fmha_elem_bytes(elem)); }

fmha_view canonical_view(const DLTensor &tensor, const TensorRule &rule, const Placement &placement) {
  bool words = false;
  const int32_t elem = element_type(tensor, rule, words);
  Dims given = given_dims(tensor, rule);
  const int64_t given_elem_bytes = words ? 4 : elem_bytes(elem);
  if (words) words_to_bytes(given, rule);
  const Dims dims = canonical_dims(given, rule, tensor);
  if (rule.contiguous_last) check_last_dim_contiguous(dims, rule);

  if (tensor.device.device_type != placement.device_type || tensor.device.device_id != placement.device_id)
    invalid(cat(rule.name, " is on ", dl_device_string(tensor.device), "; expected ",
                dl_device_string(DLDevice{static_cast<DLDeviceType>(placement.device_type), placement.device_id})));

  // The highest byte the tensor reaches must be addressable in int64.
  const Quantity what("the size of ", rule.name);
  int64_t elements = 1;
  int64_t span = 0;
  for (int32_t axis = 0; axis < dims.ndim; ++axis) {
    elements = checked_product({elements, dims.shape[axis]}, what);
    if (dims.shape[axis] > 0)
      span = checked_sum(span, checked_product({dims.shape[axis] - 1, dims.stride[axis]}, what), what);
  }
  checked_product({checked_sum(span, 1, what), elem_bytes(elem)}, what);

  fmha_view view{};
  if (elements > 0) {
    if (tensor.data == nullptr) invalid(cat(rule.name, "->data is NULL but the tensor has ", elements, " elements"));
    const auto base = reinterpret_cast<uintptr_t>(tensor.data);
    if (tensor.byte_offset > UINTPTR_MAX - base)
      invalid(cat(rule.name, "->byte_offset = ", tensor.byte_offset, " overflows the address space"));
    check_alignment(base + tensor.byte_offset, dims, given_elem_bytes, elem_bytes(elem), rule, placement);
    view.data = static_cast<char *>(tensor.data) + tensor.byte_offset;
  }
  view.elem = elem;
  view.ndim = dims.ndim;
  for (int32_t axis = 0; axis < dims.ndim; ++axis) {
    view.shape[axis] = dims.shape[axis];
    view.stride[axis] = dims.stride[axis];
  }
  return view;
}

}  // namespace fmha::core
