// Fuzz target: fmha_splitk_run() on the CPU backend. The input picks a small
// problem (every layout, dtype, quantisation, mask and flag), and when the
// plan is created, the tensors a valid run would pass, each possibly
// mutated (fuzz_tensors.h), with host metadata (lengths, offsets, block
// tables, page ids) mostly in range and sometimes not. The CPU backend reads
// that metadata on the host, so an unchecked value reads or writes outside a
// tensor's buffer: ASan reports it. Beyond "no crash": a run given memory
// that cannot exist (an extent overflowing int64) must fail, and a failure
// names itself in the message.
#include <fmha_splitk/fmha_splitk.h>

#include <cstring>
#include <vector>

#include "fuzz_tensors.h"

namespace {

using fmha_fuzz::Tensors;

void trap_if(bool broken, const char *what) {
  if (!broken) return;
  std::fprintf(stderr, "fuzz_run: %s\n", what);
  __builtin_trap();
}

DLDataType dl_of(int32_t fmha_dtype) {
  switch (fmha_dtype) {
    case FMHA_DTYPE_BF16: return fmha_fuzz::dl_bf16();
    case FMHA_DTYPE_F32: return fmha_fuzz::dl_f32();
    case FMHA_DTYPE_FP8: return fmha_fuzz::dl_u8();
    default: return fmha_fuzz::dl_f16();
  }
}

// A metadata value: mostly `valid`, sometimes just outside or far outside.
int32_t near(FuzzedDataProvider &input, int64_t valid) {
  switch (input.ConsumeIntegralInRange<int>(0, 31)) {
    case 0: return -1;
    case 1: return static_cast<int32_t>(valid + 1);
    case 2: return std::numeric_limits<int32_t>::max();
    case 3: return std::numeric_limits<int32_t>::min();
    case 4: return input.ConsumeIntegral<int32_t>();
    default: return static_cast<int32_t>(valid);
  }
}

// values[index], or 0 past the end: a mutated metadata tensor may have
// more entries than the problem's sequences.
int64_t at(const std::vector<int64_t> &values, int64_t index) {
  return index >= 0 && index < static_cast<int64_t>(values.size()) ? values[static_cast<size_t>(index)] : 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FuzzedDataProvider input(data, size);
  fmha_splitk_problem p = FMHA_SPLITK_PROBLEM_INIT;
  p.backend = FMHA_BACKEND_CPU;
  p.batch = input.ConsumeIntegralInRange<int64_t>(0, 3);
  p.max_q_seqlen = input.ConsumeIntegralInRange<int64_t>(0, 4);
  p.max_kv_seqlen = input.ConsumeIntegralInRange<int64_t>(0, 40);
  p.groups = input.ConsumeIntegralInRange<int32_t>(0, 2);
  p.heads_kv = input.ConsumeIntegralInRange<int32_t>(1, 2);
  p.heads_q = p.heads_kv * input.ConsumeIntegralInRange<int32_t>(1, 2);
  p.head_dim_qk = input.PickValueInArray<int32_t>({16, 16, 32, 64, 24, 576});
  p.head_dim_v = input.PickValueInArray<int32_t>({0, 0, 16, 32, 512});
  p.q_layout = input.ConsumeIntegralInRange<int32_t>(0, 1);
  p.kv_layout = input.ConsumeIntegralInRange<int32_t>(0, 4);
  p.page_size = input.PickValueInArray<int32_t>({0, 1, 2, 4, 8, 16});
  p.q_dtype = input.PickValueInArray<int32_t>({FMHA_DTYPE_F16, FMHA_DTYPE_BF16, FMHA_DTYPE_FP8});
  p.kv_dtype = input.PickValueInArray<int32_t>({0, FMHA_DTYPE_F16, FMHA_DTYPE_BF16});
  p.o_dtype = input.PickValueInArray<int32_t>({0, FMHA_DTYPE_F16, FMHA_DTYPE_BF16, FMHA_DTYPE_F32});
  p.kv_quant = input.ConsumeIntegralInRange<int32_t>(0, 2);
  p.kv_quant_groups = input.PickValueInArray<int32_t>({0, 1, 2});
  p.fp8_format = input.ConsumeIntegralInRange<int32_t>(0, 1);
  p.kv_scale_kind = input.ConsumeIntegralInRange<int32_t>(0, 1);
  p.kv_scale_granularity = input.ConsumeIntegralInRange<int32_t>(0, 2);
  p.q_scale_granularity = input.ConsumeIntegralInRange<int32_t>(0, 2);
  p.mask = input.ConsumeIntegralInRange<int32_t>(0, 3);
  p.window_left = input.ConsumeIntegralInRange<int32_t>(0, 8);
  p.window_right = input.ConsumeIntegralInRange<int32_t>(0, 8);
  p.has_bias = input.ConsumeIntegralInRange<int>(0, 3) == 0;
  p.has_sinks = input.ConsumeIntegralInRange<int>(0, 3) == 0;
  p.softcap = input.PickValueInArray<float>({0.0f, 0.0f, 5.0f});
  p.split_k = input.ConsumeIntegralInRange<int32_t>(0, 4);
  p.kv_chunk_size = input.PickValueInArray<int32_t>({0, 8, 16});
  p.flags = input.ConsumeIntegralInRange<uint32_t>(0, 31);
  p.num_pages = input.ConsumeIntegralInRange<int64_t>(0, 12);
  p.max_pages_per_seq = input.ConsumeIntegralInRange<int64_t>(0, 12);
  fmha_splitk_plan_t plan = nullptr;
  if (fmha_splitk_create_plan(&p, &plan) != FMHA_STATUS_SUCCESS) return 0;

  // The resolved problem, as the library documents its defaults.
  const int64_t B = p.batch, Mq = p.max_q_seqlen, Mkv = p.max_kv_seqlen;
  const int64_t G = p.groups ? p.groups : 1, Hq = p.heads_q, Hkv = p.heads_kv;
  const int64_t Dqk = p.head_dim_qk, Dv = p.head_dim_v ? p.head_dim_v : p.head_dim_qk;
  const int64_t page = p.page_size ? p.page_size : 1;
  const bool fp8_q = p.q_dtype == FMHA_DTYPE_FP8;
  const int32_t kv_dtype = p.kv_dtype ? p.kv_dtype : (fp8_q ? FMHA_DTYPE_BF16 : p.q_dtype);
  const int32_t o_dtype = p.o_dtype ? p.o_dtype : (fp8_q ? FMHA_DTYPE_BF16 : p.q_dtype);
  const bool varlen = p.q_layout == FMHA_Q_VARLEN;
  const bool v_from_k = (p.flags & FMHA_FLAG_V_FROM_K) != 0;
  const bool partials = (p.flags & FMHA_FLAG_WRITE_PARTIALS) != 0;
  const bool with_g = G > 1 || input.ConsumeBool();

  Tensors tensors(input);
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  auto heads = [&](std::vector<int64_t> lead, int64_t h, int64_t d) {
    if (with_g) lead.push_back(G);
    lead.push_back(h);
    if (d > 0) lead.push_back(d);
    return lead;
  };

  // Queries: FIXED [B, Mq, ...]; VARLEN [1, total_q, ...] with q_seqstart.
  std::vector<int64_t> q_lengths(static_cast<size_t>(B));
  int64_t total_q = 0;
  for (int64_t &length : q_lengths) total_q += (length = varlen ? input.ConsumeIntegralInRange<int64_t>(0, Mq) : Mq);
  const int64_t q_rows_b = varlen ? 1 : B, q_rows = varlen ? total_q : Mq;
  args.q = tensors.make(dl_of(p.q_dtype), heads({q_rows_b, q_rows}, Hq, Dqk));
  args.o = tensors.make(dl_of(o_dtype), heads({q_rows_b, q_rows}, Hq, Dv));
  if (input.ConsumeBool()) args.lse = tensors.make(fmha_fuzz::dl_f32(), with_g ? std::vector<int64_t>{q_rows_b, G, Hq, q_rows} : std::vector<int64_t>{q_rows_b, Hq, q_rows});
  if (varlen) {
    args.q_seqstart = tensors.make(fmha_fuzz::dl_i32(), {B + 1});
    std::vector<int64_t> starts(static_cast<size_t>(B) + 1, 0);
    for (int64_t b = 0; b < B; ++b) starts[b + 1] = starts[b] + q_lengths[b];
    tensors.write_i32(args.q_seqstart, [&](int64_t b, int64_t) { return near(input, at(starts, b)); });
  }

  // Keys: lengths first, then the layout's rows.
  std::vector<int64_t> kv_lengths(static_cast<size_t>(B));
  int64_t total_kv = 0;
  for (int64_t &length : kv_lengths)
    total_kv += (length = p.kv_layout == FMHA_KV_DENSE ? Mkv : input.ConsumeIntegralInRange<int64_t>(0, Mkv));
  const int64_t num_pages = p.num_pages;
  const bool paged = p.kv_layout == FMHA_KV_PAGED || p.kv_layout == FMHA_KV_RAGGED;
  const bool pages_4d = paged && input.ConsumeBool();
  std::vector<int64_t> kv_lead;
  if (paged) kv_lead = pages_4d ? std::vector<int64_t>{num_pages * page} : std::vector<int64_t>{num_pages, page};
  else if (p.kv_layout == FMHA_KV_GAPPY) kv_lead = {1, total_kv + input.ConsumeIntegralInRange<int64_t>(0, 2)};
  else kv_lead = {B, Mkv};
  auto kv_tensor = [&](int64_t d) {
    switch (p.kv_quant) {
      case FMHA_KV_QUANT_INT4: return tensors.make(fmha_fuzz::dl_i32(), heads(kv_lead, Hkv, std::max(1, p.kv_quant_groups) + d / 8));
      case FMHA_KV_QUANT_FP8: return tensors.make(fmha_fuzz::dl_u8(), heads(kv_lead, Hkv, d));
      default: return tensors.make(dl_of(kv_dtype), heads(kv_lead, Hkv, d));
    }
  };
  args.k = kv_tensor(Dqk);
  if (!v_from_k) args.v = kv_tensor(Dv);
  if (p.kv_layout == FMHA_KV_PADDED || p.kv_layout == FMHA_KV_GAPPY || p.kv_layout == FMHA_KV_PAGED) {
    args.kv_seqlen = tensors.make(fmha_fuzz::dl_i32(), {B});
    tensors.write_i32(args.kv_seqlen, [&](int64_t b, int64_t) { return near(input, at(kv_lengths, b)); });
  }
  if (p.kv_layout == FMHA_KV_GAPPY || (p.kv_layout == FMHA_KV_PAGED && input.ConsumeBool())) {
    args.kv_seqstart = tensors.make(fmha_fuzz::dl_i32(), {B});
    int64_t start = 0;
    tensors.write_i32(args.kv_seqstart, [&](int64_t b, int64_t) {
      const int64_t here = p.kv_layout == FMHA_KV_GAPPY ? start : input.ConsumeIntegralInRange<int64_t>(0, page);
      start += at(kv_lengths, b);
      return near(input, here);
    });
  }
  if (p.kv_layout == FMHA_KV_PAGED) {
    args.block_table = tensors.make(fmha_fuzz::dl_i32(), {B, p.max_pages_per_seq});
    tensors.write_i32(args.block_table, [&](int64_t, int64_t) {
      return near(input, num_pages > 0 ? input.ConsumeIntegralInRange<int64_t>(0, num_pages - 1) : 0);
    });
  }
  if (p.kv_layout == FMHA_KV_RAGGED) {
    std::vector<int64_t> indptr(static_cast<size_t>(B) + 1, 0);
    for (int64_t b = 0; b < B; ++b) indptr[b + 1] = indptr[b] + (kv_lengths[b] + page - 1) / page;
    args.kv_indptr = tensors.make(fmha_fuzz::dl_i32(), {B + 1});
    tensors.write_i32(args.kv_indptr, [&](int64_t b, int64_t) { return near(input, at(indptr, b)); });
    args.kv_indices = tensors.make(fmha_fuzz::dl_i32(), {indptr[B]});
    tensors.write_i32(args.kv_indices, [&](int64_t, int64_t) {
      return near(input, num_pages > 0 ? input.ConsumeIntegralInRange<int64_t>(0, num_pages - 1) : 0);
    });
    if (input.ConsumeBool()) {
      args.kv_last_page_len = tensors.make(fmha_fuzz::dl_i32(), {B});
      tensors.write_i32(args.kv_last_page_len, [&](int64_t b, int64_t) {
        const int64_t length = at(kv_lengths, b), rest = length % page;
        return near(input, length == 0 ? 0 : (rest == 0 ? page : rest));
      });
    }
  }

  // fp8 scales: per row, per head or per tensor.
  auto scale_shape = [&](int32_t granularity, const std::vector<int64_t> &rows, int64_t h) {
    if (granularity == FMHA_SCALE_PER_TENSOR) return std::vector<int64_t>{1};
    if (granularity == FMHA_SCALE_PER_HEAD) return with_g ? std::vector<int64_t>{G, h} : std::vector<int64_t>{h};
    return heads(rows, h, 0);
  };
  if (p.kv_quant == FMHA_KV_QUANT_FP8) {
    const DLDataType scale_type = p.kv_scale_kind == FMHA_KV_SCALE_F32 ? fmha_fuzz::dl_f32() : fmha_fuzz::dl_i32();
    const std::vector<int64_t> rows = paged ? std::vector<int64_t>{num_pages * page} : kv_lead;
    args.k_scale = tensors.make(scale_type, scale_shape(p.kv_scale_granularity, rows, Hkv));
    if (!v_from_k) args.v_scale = tensors.make(scale_type, scale_shape(p.kv_scale_granularity, rows, Hkv));
  }
  if (p.flags & FMHA_FLAG_FP8_QK)
    args.q_scale = tensors.make(fmha_fuzz::dl_f32(), scale_shape(p.q_scale_granularity, {q_rows_b, q_rows}, Hq));
  if (p.has_bias)
    args.bias = tensors.make(input.ConsumeBool() ? fmha_fuzz::dl_f32() : fmha_fuzz::dl_f16(),
                             with_g ? std::vector<int64_t>{B, G, Hq, Mq, Mkv} : std::vector<int64_t>{B, Hq, Mq, Mkv});
  if (p.has_sinks)
    args.sinks = tensors.make(fmha_fuzz::dl_f32(), with_g ? std::vector<int64_t>{G, Hq} : std::vector<int64_t>{Hq});
  if (partials) {
    const int64_t split = p.split_k;
    args.o_partial = tensors.make(fmha_fuzz::dl_f32(), heads({split, q_rows_b, q_rows}, Hq, Dv));
    args.lse_partial = tensors.make(fmha_fuzz::dl_f32(), with_g ? std::vector<int64_t>{split, q_rows_b, G, Hq, q_rows}
                                                                : std::vector<int64_t>{split, q_rows_b, Hq, q_rows});
    if (input.ConsumeBool()) args.o = nullptr;
  }

  // The workspace: the plan's size, 256-byte aligned; or too small,
  // misaligned, or the plan's own (NULL).
  size_t workspace_size = 0;
  trap_if(fmha_splitk_plan_workspace_size(plan, &workspace_size) != FMHA_STATUS_SUCCESS, "workspace_size failed");
  std::unique_ptr<uint8_t, decltype(&std::free)> workspace(nullptr, &std::free);
  if (workspace_size > 0 && workspace_size < (size_t{1} << 26)) {
    workspace.reset(static_cast<uint8_t *>(std::aligned_alloc(256, (workspace_size + 255) / 256 * 256)));
    args.workspace = workspace.get();
    args.workspace_size = workspace_size;
    switch (input.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: args.workspace_size = input.ConsumeIntegralInRange<size_t>(0, workspace_size - 1); break;
      case 1: args.workspace = nullptr; args.workspace_size = 0; break;
      case 2: args.workspace = workspace.get() + 16; args.workspace_size = workspace_size - 16; break;
      default: break;
    }
  }
  if (input.ConsumeIntegralInRange<int>(0, 31) == 0) args.struct_size = input.ConsumeIntegralInRange<size_t>(0, sizeof(args));

  if (std::getenv("FMHA_FUZZ_VERBOSE") != nullptr)
    std::fprintf(stderr, "problem: B %lld Mq %lld Mkv %lld G %d Hq %d Hkv %d Dqk %d Dv %d q_layout %d kv_layout %d page %d "
                 "q %d kv %d o %d quant %d/%d fp8 %d scale %d/%d/%d mask %d bias %d sinks %d split %d flags %u pages %lld/%lld\n",
                 static_cast<long long>(p.batch), static_cast<long long>(p.max_q_seqlen), static_cast<long long>(p.max_kv_seqlen),
                 p.groups, p.heads_q, p.heads_kv, p.head_dim_qk, p.head_dim_v, p.q_layout, p.kv_layout, p.page_size, p.q_dtype,
                 p.kv_dtype, p.o_dtype, p.kv_quant, p.kv_quant_groups, p.fp8_format, p.kv_scale_kind, p.kv_scale_granularity,
                 p.q_scale_granularity, p.mask, p.has_bias, p.has_sinks, p.split_k, p.flags,
                 static_cast<long long>(p.num_pages), static_cast<long long>(p.max_pages_per_seq));
  const char *names[] = {"q", "k", "v", "o", "lse", "bias", "sinks", "kv_seqlen", "kv_seqstart", "q_seqstart",
                         "block_table", "kv_indptr", "kv_indices", "kv_last_page_len", "k_scale", "v_scale", "q_scale",
                         "o_partial", "lse_partial"};
  const DLTensor *given[] = {args.q, args.k, args.v, args.o, args.lse, args.bias, args.sinks, args.kv_seqlen,
                             args.kv_seqstart, args.q_seqstart, args.block_table, args.kv_indptr, args.kv_indices,
                             args.kv_last_page_len, args.k_scale, args.v_scale, args.q_scale, args.o_partial,
                             args.lse_partial};
  for (size_t i = 0; i < sizeof(given) / sizeof(given[0]); ++i) tensors.dump(names[i], given[i]);
  if (!tensors.any_too_large()) {
    const fmha_status status = fmha_splitk_run(plan, input.ConsumeIntegralInRange<int>(0, 63) == 0 ? nullptr : &args);
    for (const DLTensor *tensor : given)
      trap_if(status == FMHA_STATUS_SUCCESS && tensors.unaddressable(tensor), "run accepted a tensor that cannot exist");
    trap_if(status != FMHA_STATUS_SUCCESS && fmha_last_error_message()[0] == '\0', "a failed run left no message");
  }
  fmha_splitk_destroy_plan(plan);
  return 0;
}
