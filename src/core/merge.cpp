#include "core/merge.h"

#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/names.h"
#include "core/registry.h"
#include "core/tensor_view.h"

namespace fmha::core {

namespace {

// The extents every tensor of a merge agrees on, from the merged O.
struct MergeShape {
  int64_t batch, rows, groups, heads, head_dim;
};

// Partial (or partial-gradient) outputs and LSEs, one view each.
struct PartialSet {
  std::vector<fmha_view> o, lse;
  bool stacked = false;
  int64_t stacked_o_stride = 0;
  int64_t stacked_lse_stride = 0;
};

// The tensors that give one set of partials, stacked or as lists.
struct PartialArgs {
  const char *prefix;  // "" or "grad_", for the argument names
  const DLTensor *o_stacked;
  const DLTensor *lse_stacked;
  const DLTensor *const *o_list;
  const DLTensor *const *lse_list;
};

std::string arg_name(const PartialArgs &partials, const char *field) { return cat("args.", partials.prefix, field); }

// The rules borrow `name` (TensorRule): a temporary lives through the
// canonical_view() call around it.
TensorRule o_rule(const std::string &name, const MergeShape &shape, bool stacked, int64_t count) {
  TensorRule rule;
  rule.name = name.c_str();
  rule.dims = {{"B", shape.batch}, {"M", shape.rows}, {"G", shape.groups}, {"H", shape.heads}, {"D", shape.head_dim}};
  if (stacked) rule.dims.push_front(DimSpec{"N", count});
  rule.g_axis = stacked ? 3 : 2;
  rule.contiguous_last = true;
  rule.elems = kFloatElems;
  rule.elems_text = "float16, bfloat16 or float32";
  return rule;
}

TensorRule lse_rule(const std::string &name, const MergeShape &shape, bool stacked, int64_t count) {
  TensorRule rule;
  rule.name = name.c_str();
  rule.dims = {{"B", shape.batch}, {"G", shape.groups}, {"H", shape.heads}, {"M", shape.rows}};
  if (stacked) rule.dims.push_front(DimSpec{"N", count});
  rule.g_axis = stacked ? 2 : 1;
  rule.elems = elem_bit(FMHA_ELEM_F32);
  rule.elems_text = "float32";
  return rule;
}

// Partial `index` of a stacked view: the view without its leading N axis,
// moved `index` slices along it.
fmha_view slice(const fmha_view &stacked, int64_t index) {
  fmha_view part{};
  if (stacked.data != nullptr)
    part.data = static_cast<char *>(stacked.data) + index * stacked.stride[0] * elem_bytes(stacked.elem);
  part.elem = stacked.elem;
  part.ndim = stacked.ndim - 1;
  for (int32_t axis = 1; axis < stacked.ndim; ++axis) {
    part.shape[axis - 1] = stacked.shape[axis];
    part.stride[axis - 1] = stacked.stride[axis];
  }
  return part;
}

const DLTensor &required(const DLTensor *tensor, const std::string &name, const char *why) {
  if (tensor == nullptr) invalid(cat(name, " is NULL", why));
  return *tensor;
}

// Checks one set of partials. `num_partials` is the length of its lists;
// `count` is the number a stacked set must hold (another set's), or
// kAnyExtent.
PartialSet partial_set(const PartialArgs &args, size_t num_partials, int64_t count, const MergeShape &shape,
                       const Placement &placement) {
  const bool stacked = args.o_stacked != nullptr || args.lse_stacked != nullptr;
  const bool listed = args.o_list != nullptr || args.lse_list != nullptr;
  const std::string forms = cat(arg_name(args, "o_stacked"), " + ", arg_name(args, "lse_stacked"), " or ",
                                arg_name(args, "o_list"), " + ", arg_name(args, "lse_list"));
  if (stacked && listed) invalid(cat("both partial forms are given: give one of ", forms));
  if (!stacked && !listed) invalid(cat("no partials are given: give one of ", forms));

  PartialSet set;
  set.stacked = stacked;
  if (stacked) {
    const char *why = " but the stacked form needs both tensors";
    const DLTensor &o = required(args.o_stacked, arg_name(args, "o_stacked"), why);
    const DLTensor &lse = required(args.lse_stacked, arg_name(args, "lse_stacked"), why);
    const fmha_view o_view = canonical_view(o, o_rule(arg_name(args, "o_stacked"), shape, true, count), placement);
    const int64_t partials = o_view.shape[0];
    if (partials < 1) invalid(cat(arg_name(args, "o_stacked"), " holds N = 0 partials; a merge needs at least 1"));
    const fmha_view lse_view =
        canonical_view(lse, lse_rule(arg_name(args, "lse_stacked"), shape, true, partials), placement);
    for (int64_t index = 0; index < partials; ++index) {
      set.o.push_back(slice(o_view, index));
      set.lse.push_back(slice(lse_view, index));
    }
    set.stacked_o_stride = o_view.stride[0];
    set.stacked_lse_stride = lse_view.stride[0];
    return set;
  }

  for (const auto &[list, field] : {std::pair{args.o_list, "o_list"}, std::pair{args.lse_list, "lse_list"}})
    if (list == nullptr) invalid(cat(arg_name(args, field), " is NULL but the list form needs both lists"));
  if (num_partials < 1 || num_partials > static_cast<size_t>(std::numeric_limits<int64_t>::max()))
    invalid(cat("args.num_partials = ", num_partials, " must be >= 1 with the list form"));
  for (size_t index = 0; index < num_partials; ++index) {
    const std::string o_name = cat(arg_name(args, "o_list"), "[", index, "]");
    const std::string lse_name = cat(arg_name(args, "lse_list"), "[", index, "]");
    set.o.push_back(
        canonical_view(required(args.o_list[index], o_name, ""), o_rule(o_name, shape, false, 0), placement));
    set.lse.push_back(
        canonical_view(required(args.lse_list[index], lse_name, ""), lse_rule(lse_name, shape, false, 0), placement));
    if (set.o[index].elem != set.o[0].elem)
      invalid(cat(o_name, " has dtype ", elem_name(set.o[index].elem), " but ", arg_name(args, "o_list"), "[0] has ",
                  elem_name(set.o[0].elem), "; the partials share one dtype"));
  }
  return set;
}

// The merged O fixes the shape and device of the whole merge.
MergeShape shape_of(const fmha_view &o) { return {o.shape[0], o.shape[1], o.shape[2], o.shape[3], o.shape[4]}; }

Placement placement_of(const DLTensor &o) { return {o.device.device_type, o.device.device_id, 0}; }

fmha_view merged_o_view(const DLTensor &o) {
  const MergeShape any{kAnyExtent, kAnyExtent, kAnyExtent, kAnyExtent, kAnyExtent};
  return canonical_view(o, o_rule("args.o", any, false, 0), placement_of(o));
}

bool empty(const MergeShape &shape) { return shape.batch * shape.rows * shape.groups * shape.heads == 0; }

}  // namespace

void merge(const fmha_merge_args &args) {
  const DLTensor &o = required(args.o, "args.o", "");
  fmha_merge_views views{};
  views.o = merged_o_view(o);
  const MergeShape shape = shape_of(views.o);
  const Placement placement = placement_of(o);
  const BackendChoice backend = Registry::instance().for_device(o.device, "args.o");
  if (args.lse != nullptr) views.lse = canonical_view(*args.lse, lse_rule("args.lse", shape, false, 0), placement);

  const PartialArgs given{"", args.o_stacked, args.lse_stacked, args.o_list, args.lse_list};
  const bool stacked = args.o_stacked != nullptr || args.lse_stacked != nullptr;
  if (stacked && args.o_list == nullptr && args.lse_list == nullptr && args.num_partials != 0)
    invalid(cat("args.num_partials = ", args.num_partials,
                " belongs to the list form, but the stacked form is given: give one form"));
  const PartialSet partials = partial_set(given, args.num_partials, kAnyExtent, shape, placement);
  views.num_partials = static_cast<int64_t>(partials.o.size());
  views.o_parts = partials.o.data();
  views.lse_parts = partials.lse.data();
  views.stacked = partials.stacked;
  views.stacked_o_stride = partials.stacked_o_stride;
  views.stacked_lse_stride = partials.stacked_lse_stride;
  views.stream = args.stream;
  // No rows: nothing to write (and GPU launches of empty grids are errors).
  if (empty(shape)) return;
  BackendMessage message;
  const fmha_backend_v1 &table = *backend.backend->table;
  check_backend(table.merge(&views, message.msg()), message, table.name, "merge");
}

void merge_backward(const fmha_merge_backward_args &args) {
  const DLTensor &o = required(args.o, "args.o", "");
  fmha_merge_backward_views views{};
  views.o = merged_o_view(o);
  const MergeShape shape = shape_of(views.o);
  const Placement placement = placement_of(o);
  const BackendChoice backend = Registry::instance().for_device(o.device, "args.o");
  views.lse = canonical_view(required(args.lse, "args.lse", ""), lse_rule("args.lse", shape, false, 0), placement);
  views.grad_o =
      canonical_view(required(args.grad_o, "args.grad_o", ""), o_rule("args.grad_o", shape, false, 0), placement);
  if (args.grad_lse != nullptr)
    views.grad_lse = canonical_view(*args.grad_lse, lse_rule("args.grad_lse", shape, false, 0), placement);

  const bool any_list = args.o_list != nullptr || args.lse_list != nullptr || args.grad_o_list != nullptr ||
                        args.grad_lse_list != nullptr;
  if (!any_list && args.num_partials != 0)
    invalid(cat("args.num_partials = ", args.num_partials, " belongs to the list form, but no list is given"));
  const PartialArgs given{"", args.o_stacked, args.lse_stacked, args.o_list, args.lse_list};
  const PartialSet partials = partial_set(given, args.num_partials, kAnyExtent, shape, placement);
  const auto count = static_cast<int64_t>(partials.o.size());
  const PartialArgs gradients{"grad_", args.grad_o_stacked, args.grad_lse_stacked, args.grad_o_list,
                              args.grad_lse_list};
  const PartialSet grads = partial_set(gradients, args.num_partials, count, shape, placement);
  if (static_cast<int64_t>(grads.o.size()) != count)
    invalid(cat("the partial gradients number ", grads.o.size(), " but the partials number ", count));

  views.num_partials = count;
  views.o_parts = partials.o.data();
  views.lse_parts = partials.lse.data();
  views.grad_o_parts = grads.o.data();
  views.grad_lse_parts = grads.lse.data();
  views.stream = args.stream;
  if (empty(shape)) return;
  BackendMessage message;
  const fmha_backend_v1 &table = *backend.backend->table;
  check_backend(table.merge_backward(&views, message.msg()), message, table.name, "merge_backward");
}

}  // namespace fmha::core
