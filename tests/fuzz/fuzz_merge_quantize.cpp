// Fuzz target: fmha_merge(), fmha_merge_backward() and fmha_quantize_kv()
// on host tensors. The input picks the call, the shape letters (N partials,
// B, M, G, H, D), the stacked or list form of each operand, and then each
// tensor as a valid call would pass it, possibly mutated (fuzz_tensors.h):
// shape, rank, dtype, device, strides, byte_offset, NULL, aliasing. Beyond
// "no crash": a call given memory that cannot exist must fail, and a
// failure names itself in the message.
#include <fmha_splitk/fmha_splitk.h>

#include <vector>

#include "fuzz_tensors.h"

namespace {

using fmha_fuzz::Tensors;

void trap_if(bool broken, const char *what) {
  if (!broken) return;
  std::fprintf(stderr, "fuzz_merge_quantize: %s\n", what);
  __builtin_trap();
}

struct Letters {
  int64_t n, b, m, g, h, d;
  bool with_g;
  std::vector<int64_t> o(bool stacked) const {
    std::vector<int64_t> shape = {b, m};
    if (with_g) shape.push_back(g);
    shape.push_back(h);
    shape.push_back(d);
    if (stacked) shape.insert(shape.begin(), n);
    return shape;
  }
  std::vector<int64_t> lse(bool stacked) const {
    std::vector<int64_t> shape = {b};
    if (with_g) shape.push_back(g);
    shape.push_back(h);
    shape.push_back(m);
    if (stacked) shape.insert(shape.begin(), n);
    return shape;
  }
};

DLDataType float_type(FuzzedDataProvider &input) {
  return input.PickValueInArray<DLDataType>({fmha_fuzz::dl_f32(), fmha_fuzz::dl_f16(), fmha_fuzz::dl_bf16()});
}

// Either a stacked tensor or a list of `n` tensors (the list array itself
// holds exactly `count` pointers, which may differ from n).
struct Operand {
  const DLTensor *stacked = nullptr;
  std::vector<const DLTensor *> list;
  size_t count = 0;
  const DLTensor *const *list_data() const { return list.empty() ? nullptr : list.data(); }
};

Operand make_operand(FuzzedDataProvider &input, Tensors &tensors, const Letters &x, bool stacked, bool lse,
                     DLDataType dtype) {
  Operand made;
  if (stacked) {
    made.stacked = tensors.make(dtype, lse ? x.lse(true) : x.o(true));
    return made;
  }
  made.count = input.ConsumeIntegralInRange<int>(0, 15) == 0 ? input.ConsumeIntegralInRange<size_t>(0, 4) : x.n;
  for (size_t i = 0; i < made.count; ++i) made.list.push_back(tensors.make(dtype, lse ? x.lse(false) : x.o(false), 16));
  return made;
}

size_t pick_struct_size(FuzzedDataProvider &input, size_t size) {
  return input.ConsumeIntegralInRange<int>(0, 31) == 0 ? input.ConsumeIntegralInRange<size_t>(0, size) : size;
}

// Whether a tensor the call may read (lists: the first num_partials
// entries) cannot exist.
bool any_unaddressable(Tensors &tensors, std::initializer_list<const DLTensor *> given,
                       std::initializer_list<const Operand *> operands, size_t num_partials) {
  for (const DLTensor *tensor : given)
    if (tensors.unaddressable(tensor)) return true;
  for (const Operand *operand : operands) {
    if (tensors.unaddressable(operand->stacked)) return true;
    for (size_t i = 0; i < operand->list.size() && i < num_partials; ++i)
      if (tensors.unaddressable(operand->list[i])) return true;
  }
  return false;
}

void check(fmha_status status, bool unaddressable) {
  trap_if(status == FMHA_STATUS_SUCCESS && unaddressable, "accepted a tensor that cannot exist");
  trap_if(status != FMHA_STATUS_SUCCESS && fmha_last_error_message()[0] == '\0', "a failure left no message");
}

void fuzz_merge(FuzzedDataProvider &input, Tensors &tensors, const Letters &x) {
  const bool stacked = input.ConsumeBool();
  const Operand o = make_operand(input, tensors, x, stacked, false, float_type(input));
  const Operand lse = make_operand(input, tensors, x, stacked, true, fmha_fuzz::dl_f32());
  fmha_merge_args args = FMHA_MERGE_ARGS_INIT;
  args.struct_size = pick_struct_size(input, sizeof(args));
  args.o_stacked = o.stacked;
  args.lse_stacked = lse.stacked;
  // The list arrays hold num_partials pointers or more (the library reads
  // that many); with the stacked form, num_partials is anything.
  args.num_partials = stacked ? (input.ConsumeBool() ? 0 : input.ConsumeIntegral<size_t>()) : std::min(o.count, lse.count);
  args.o_list = o.list_data();
  args.lse_list = lse.list_data();
  args.o = tensors.make(float_type(input), x.o(false));
  if (input.ConsumeBool()) args.lse = tensors.make(fmha_fuzz::dl_f32(), x.lse(false));
  tensors.dump("o", args.o);
  tensors.dump("lse", args.lse);
  for (const DLTensor *tensor : o.list) tensors.dump("o_list[]", tensor);
  for (const DLTensor *tensor : lse.list) tensors.dump("lse_list[]", tensor);
  tensors.dump("o_stacked", o.stacked);
  tensors.dump("lse_stacked", lse.stacked);
  if (tensors.any_too_large()) return;
  check(fmha_merge(input.ConsumeIntegralInRange<int>(0, 63) == 0 ? nullptr : &args),
        any_unaddressable(tensors, {args.o, args.lse}, {&o, &lse}, args.num_partials));
}

void fuzz_merge_backward(FuzzedDataProvider &input, Tensors &tensors, const Letters &x) {
  const bool stacked = input.ConsumeBool(), grads_stacked = input.ConsumeBool();
  const DLDataType o_type = float_type(input);
  const Operand o = make_operand(input, tensors, x, stacked, false, o_type);
  const Operand lse = make_operand(input, tensors, x, stacked, true, fmha_fuzz::dl_f32());
  const Operand grad_o = make_operand(input, tensors, x, grads_stacked, false, fmha_fuzz::dl_f32());
  const Operand grad_lse = make_operand(input, tensors, x, grads_stacked, true, fmha_fuzz::dl_f32());
  fmha_merge_backward_args args = FMHA_MERGE_BACKWARD_ARGS_INIT;
  args.struct_size = pick_struct_size(input, sizeof(args));
  args.o_stacked = o.stacked;
  args.lse_stacked = lse.stacked;
  size_t lists = SIZE_MAX;
  for (const Operand *operand : {&o, &lse, &grad_o, &grad_lse})
    if (!operand->list.empty() || operand->stacked == nullptr) lists = std::min(lists, operand->count);
  args.num_partials = lists == SIZE_MAX ? 0 : lists;
  args.o_list = o.list_data();
  args.lse_list = lse.list_data();
  args.o = tensors.make(o_type, x.o(false));
  args.lse = tensors.make(fmha_fuzz::dl_f32(), x.lse(false));
  args.grad_o = tensors.make(float_type(input), x.o(false));
  if (input.ConsumeBool()) args.grad_lse = tensors.make(fmha_fuzz::dl_f32(), x.lse(false));
  args.grad_o_stacked = grad_o.stacked;
  args.grad_lse_stacked = grad_lse.stacked;
  args.grad_o_list = grad_o.list_data();
  args.grad_lse_list = grad_lse.list_data();
  if (tensors.any_too_large()) return;
  check(fmha_merge_backward(&args),
        any_unaddressable(tensors, {args.o, args.lse, args.grad_o, args.grad_lse}, {&o, &lse, &grad_o, &grad_lse},
                          args.num_partials));
}

void fuzz_quantize(FuzzedDataProvider &input, Tensors &tensors, const Letters &x) {
  fmha_quantize_kv_args args = FMHA_QUANTIZE_KV_ARGS_INIT;
  args.struct_size = pick_struct_size(input, sizeof(args));
  args.kv_quant = input.ConsumeIntegralInRange<int32_t>(0, 15) == 0 ? input.ConsumeIntegral<int32_t>()
                                                                    : input.ConsumeIntegralInRange<int32_t>(0, 2);
  args.kv_quant_groups = input.PickValueInArray<int32_t>({0, 1, 2, 4, 8, 3, -1});
  args.fp8_format = input.ConsumeIntegralInRange<int32_t>(-1, 2);
  args.kv_scale_kind = input.ConsumeIntegralInRange<int32_t>(-1, 2);
  args.scale_granularity = input.ConsumeIntegralInRange<int32_t>(-1, 3);
  args.reserved0 = input.ConsumeIntegralInRange<int>(0, 31) == 0;
  // src [B, M, G, H, D] (or without G); D a multiple of 8 mostly.
  const int64_t d = input.ConsumeBool() ? x.d : x.d + input.ConsumeIntegralInRange<int64_t>(-3, 3);
  std::vector<int64_t> rows = {x.b, x.m};
  if (x.with_g) rows.push_back(x.g);
  rows.push_back(x.h);
  std::vector<int64_t> src_shape = rows;
  src_shape.push_back(d);
  args.src = tensors.make(float_type(input), src_shape);
  std::vector<int64_t> dst_shape = rows;
  const int32_t groups = std::max(1, args.kv_quant_groups);
  if (args.kv_quant == FMHA_KV_QUANT_INT4) {
    dst_shape.push_back(groups + d / 8);
    args.dst = tensors.make(fmha_fuzz::dl_i32(), dst_shape);
  } else {
    const bool words = input.ConsumeBool();
    dst_shape.push_back(words ? d / 4 : d);
    args.dst = tensors.make(words ? fmha_fuzz::dl_i32()
                                  : input.PickValueInArray<DLDataType>({fmha_fuzz::dl_u8(), DLDataType{10, 8, 1},
                                                                        DLDataType{11, 8, 1}}),
                            dst_shape);
    std::vector<int64_t> scale_shape;
    switch (args.scale_granularity) {
      case FMHA_SCALE_PER_ROW: scale_shape = rows; break;
      case FMHA_SCALE_PER_HEAD:
        scale_shape = x.with_g ? std::vector<int64_t>{x.g, x.h} : std::vector<int64_t>{x.h};
        break;
      default: scale_shape = {1}; break;
    }
    args.scale = tensors.make(args.kv_scale_kind == FMHA_KV_SCALE_F32 ? fmha_fuzz::dl_f32() : fmha_fuzz::dl_i32(),
                              scale_shape);
  }
  if (input.ConsumeIntegralInRange<int>(0, 15) == 0) args.dst = args.src;  // aliasing: must be refused
  if (tensors.any_too_large()) return;
  check(fmha_quantize_kv(&args), any_unaddressable(tensors, {args.src, args.dst, args.scale}, {}, 0));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FuzzedDataProvider input(data, size);
  const int call = input.ConsumeIntegralInRange<int>(0, 2);
  Letters x;
  x.n = input.ConsumeIntegralInRange<int64_t>(0, 4);
  x.b = input.ConsumeIntegralInRange<int64_t>(0, 3);
  x.m = input.ConsumeIntegralInRange<int64_t>(0, 4);
  x.g = input.ConsumeIntegralInRange<int64_t>(1, 2);
  x.h = input.ConsumeIntegralInRange<int64_t>(1, 4);
  x.d = input.PickValueInArray<int64_t>({8, 16, 32, 64, 128, 576});
  x.with_g = x.g > 1 || input.ConsumeBool();
  Tensors tensors(input);
  switch (call) {
    case 0: fuzz_merge(input, tensors, x); break;
    case 1: fuzz_merge_backward(input, tensors, x); break;
    default: fuzz_quantize(input, tensors, x); break;
  }
  return 0;
}
