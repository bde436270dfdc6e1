// Checking a caller's DLTensor against what the plan or merge expects and
// turning it into a canonical fmha_view (backend_api.h): dtype, rank and
// shape (with the accepted short forms), strides, span, pointer, alignment
// and device.
#ifndef FMHA_SPLITK_CORE_TENSOR_VIEW_H_
#define FMHA_SPLITK_CORE_TENSOR_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>

#include "core/backend_api.h"

namespace fmha::core {

// An extent the problem does not fix (a packed total, a page-id count).
constexpr int64_t kAnyExtent = -1;

struct DimSpec {
  const char *name;  // "B", "Mq", "G", "Hq", "Dqk", ...
  int64_t extent;    // or kAnyExtent
};

// The dims of a rule, held inline (at most FMHA_MAX_VIEW_RANK, the rank of
// a view) so that the rules built on every run allocate nothing.
class DimList {
 public:
  DimList() = default;
  DimList(std::initializer_list<DimSpec> dims) { append(dims); }

  void push_back(const DimSpec &dim) {
    // Rules are the library's own: more dims than a view holds is its bug.
    if (size_ == FMHA_MAX_VIEW_RANK) throw std::length_error("a tensor rule has more than FMHA_MAX_VIEW_RANK dims");
    dims_[size_++] = dim;
  }
  void append(std::initializer_list<DimSpec> dims) {
    for (const DimSpec &dim : dims) push_back(dim);
  }
  void push_front(const DimSpec &dim) {
    push_back(dim);
    for (size_t axis = size_ - 1; axis > 0; --axis) dims_[axis] = dims_[axis - 1];
    dims_[0] = dim;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  DimSpec &operator[](size_t axis) { return dims_[axis]; }
  const DimSpec &operator[](size_t axis) const { return dims_[axis]; }
  const DimSpec *begin() const { return dims_; }
  const DimSpec *end() const { return dims_ + size_; }

 private:
  DimSpec dims_[FMHA_MAX_VIEW_RANK] = {};
  size_t size_ = 0;
};

constexpr uint32_t elem_bit(fmha_elem_type elem) { return 1u << elem; }
constexpr uint32_t kFloatElems = elem_bit(FMHA_ELEM_F16) | elem_bit(FMHA_ELEM_BF16) | elem_bit(FMHA_ELEM_F32);

// What one tensor must look like, in canonical order (outermost first).
// Texts are borrowed, not copied (a rule is built on every run): whoever
// builds the rule keeps them alive while it is used.
struct TensorRule {
  const char *name = "";  // "args.q", "args.o_list[2]"
  DimList dims;
  // Accepted element types (elem_bit of each), and how to say so:
  // elems_text, then " (problem.<elems_field> = <dtype name of
  // elems_dtype>)" when elems_field is set ("float16 (problem.q_dtype =
  // FMHA_DTYPE_F16)"), put together only for a message.
  uint32_t elems = 0;
  const char *elems_text = "";
  const char *elems_field = nullptr;
  int32_t elems_dtype = 0;
  // FP8: DLPack codes 10 / 11 must match this fmha_fp8_format (uint8 is
  // taken as it); int32 words of four values are accepted too when set, and
  // re-expressed as bytes.
  int32_t fp8_format = FMHA_FP8_E4M3FN;
  bool fp8_words = false;
  // Canonical axis the caller may leave out (then it has extent 1): G.
  int g_axis = -1;
  // Canonical axes 0 and 1 ([num_pages, page_size]) may come as one axis of
  // num_pages * page_size rows.
  bool rows_may_merge = false;
  // Canonical axis where `broadcast_heads` heads with stride 0 stand for one
  // head (the reference's MQA form of K/V); -1 when not allowed.
  int broadcast_head_axis = -1;
  int64_t broadcast_heads = 0;
  // A 0-d tensor stands for shape [1] (per-tensor scales).
  bool scalar_ok = false;
  // Q/K/V/O and partial outputs: the last dim is contiguous (DESIGN 4);
  // other tensors may have any non-negative strides.
  bool contiguous_last = false;
  // Q/K/V/O: data and row strides aligned to Placement::row_alignment.
  bool row_aligned = false;
  // When > 0, rows need no more than this many bytes of alignment even on a
  // device whose row alignment is larger (fp8 K/V: the GPU kernels copy
  // such rows in 4-byte pieces).
  int32_t row_alignment_cap = 0;
};

// Where every tensor of a call must be.
struct Placement {
  int32_t device_type;
  int32_t device_id;
  // Bytes; 0 checks the element size only.
  int32_t row_alignment;
};

// The canonical view of `tensor` (not NULL) under `rule`; INVALID_ARGUMENT
// naming rule.name and the values otherwise.
fmha_view canonical_view(const DLTensor &tensor, const TensorRule &rule, const Placement &placement);

// Bytes of one element of a view type.
int64_t elem_bytes(int32_t elem);

}  // namespace fmha::core

#endif  // FMHA_SPLITK_CORE_TENSOR_VIEW_H_
