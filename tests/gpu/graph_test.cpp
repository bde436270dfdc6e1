// fmha_splitk_run captured once in a CUDA graph and replayed while the
// device-side lengths (and block tables) change between replays, as a
// decode server does: the copies happen outside the graph, on the stream,
// before each replay. Every replay is checked against the oracle of the
// inputs it saw, with NaN-poisoned outputs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "features/harness.h"
#include "gpu/cuda_util.h"
#include "oracle/oracle.h"

namespace fmha_test {
namespace {

struct GraphCase {
  std::string name;
  int32_t kv_layout;
  Dtype dtype;
  int32_t batch, max_kv, q_len;
  int32_t heads_q, heads_kv, head_dim;
  int32_t page_size = 16;
  int32_t split_k = 0;  // 0: the plan balances by the lengths it reads at run time
  bool batch_invariant = false;
  int32_t mask = FMHA_MASK_NONE;
  // NULL workspace: the plan's own, on which split runs merge inside the
  // forward kernel (one launch); the lengths, and so each sequence's
  // slots, change between replays while its counters carry over.
  bool own_workspace = false;
};

std::string case_name(const ::testing::TestParamInfo<GraphCase> &info) { return info.param.name; }

class CudaGraph : public ::testing::TestWithParam<GraphCase> {};

Tensor int_tensor(const std::vector<int32_t> &values, std::vector<int64_t> shape) {
  Tensor t(Dtype::i32, std::move(shape));
  t.fill_int(values);
  return t;
}

TEST_P(CudaGraph, ReplaysFollowLengthsAndBlockTables) {
  FMHA_SKIP_WITHOUT_CUDA();
  const GraphCase &c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));

  AttentionCase spec;
  spec.name = c.name;
  spec.dtype = c.dtype;
  spec.kv_layout = c.kv_layout;
  spec.kv_len.assign(static_cast<size_t>(c.batch), c.max_kv);  // the capture sees full lengths
  spec.q_len = {c.q_len};
  spec.heads_q = c.heads_q;
  spec.heads_kv = c.heads_kv;
  spec.head_dim = c.head_dim;
  spec.page_size = c.page_size;
  spec.split_k = c.split_k;
  spec.batch_invariant = c.batch_invariant;
  spec.mask = c.mask;
  SCOPED_TRACE(spec.describe());
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  // Real keys in every page and every padded row (the builder fills the
  // unused ones with large garbage), so that any block table and any length
  // up to the capacity is a valid input.
  std::mt19937_64 rng(seed + 1);
  data->k->fill_normal(rng);
  data->v->fill_normal(rng);

  Device &device = device_under_test();
  const DeviceInputs in = upload_inputs(*data);
  const PlanPtr plan = make_plan(data->problem);
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  fmha_check(fmha_splitk_get_plan_info(plan.get(), &info), "fmha_splitk_get_plan_info");
  SCOPED_TRACE(std::string("plan: split_k ") + std::to_string(info.split_k) + ", kernel " + info.kernel_name);
  const DeviceBuffer workspace(workspace_size(plan.get()));
  Tensor o = data->make_o(), lse = data->make_lse();
  const DeviceTensor o_dev = device.upload(o), lse_dev = device.upload(lse);
  const Stream stream;

  const fmha_splitk_args args = c.own_workspace
                                    ? run_args(in, o_dev, &lse_dev, nullptr, 0, stream.get())
                                    : run_args(in, o_dev, &lse_dev, workspace.get(), workspace.bytes(), stream.get());
  if (c.own_workspace) {
    EXPECT_NE(std::string(info.kernel_name).find("+fused_merge"), std::string::npos) << info.kernel_name;
  }
  GraphExec graph;
  graph.capture(stream.get(), [&] { fmha_check(fmha_splitk_run(plan.get(), &args), "fmha_splitk_run (captured)"); });

  const int64_t capacity = data->problem.max_kv_seqlen;
  const int64_t num_pages = data->problem.num_pages;
  std::uniform_int_distribution<int32_t> length(0, static_cast<int32_t>(capacity));
  Tensor last_o;
  constexpr int kReplays = 5;
  for (int replay = 0; replay < kReplays; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    std::vector<int32_t> lengths(static_cast<size_t>(c.batch));
    for (int32_t &l : lengths) l = length(rng);
    // Edge lengths on some replays: an empty sequence, a full one, one key.
    if (replay == 1) lengths.front() = 0;
    if (replay == 2) lengths.back() = static_cast<int32_t>(capacity);
    if (replay == 3) lengths.front() = 1;
    const Tensor kv_seqlen = int_tensor(lengths, {c.batch});
    copy_to_device_async(kv_seqlen, *in.kv_seqlen, stream.get());
    std::optional<Tensor> block_table;
    if (c.kv_layout == FMHA_KV_PAGED) {
      // Fresh page ids in every column, pages shared between sequences
      // allowed, as a prefix cache does.
      block_table = *data->block_table;
      std::uniform_int_distribution<int32_t> page(0, static_cast<int32_t>(num_pages - 1));
      block_table->for_each_index([&](const std::vector<int64_t> &i) { block_table->set(i, page(rng)); });
      copy_to_device_async(*block_table, *in.block_table, stream.get());
    }
    poison_async(o_dev, stream.get());
    poison_async(lse_dev, stream.get());
    graph.launch(stream.get());
    copy_to_host(o_dev, o, stream.get());
    copy_to_host(lse_dev, lse, stream.get());

    fmha_oracle::AttentionInputs oracle_in = data->oracle_inputs();
    oracle_in.kv_seqlen = &kv_seqlen;
    if (block_table) oracle_in.block_table = &*block_table;
    const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(oracle_in).forward();
    EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(o), ref, attention_tolerance(c.dtype, output_dtype(spec), ref.o)));
    EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(lse), ref.lse));
    EXPECT_TRUE(outside_untouched(o, "O"));
    EXPECT_TRUE(outside_untouched(lse, "LSE"));
    last_o = o;
  }

  // The same inputs replayed again give the same bits.
  poison_async(o_dev, stream.get());
  graph.launch(stream.get());
  copy_to_host(o_dev, o, stream.get());
  EXPECT_TRUE(bitwise_equal(o, last_o)) << "a second replay of the same inputs";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CudaGraph,
    ::testing::Values(
        GraphCase{"paged_gqa_bf16", FMHA_KV_PAGED, Dtype::bf16, 6, 700, 1, 8, 2, 128},
        GraphCase{"paged_page64_f16_mq2", FMHA_KV_PAGED, Dtype::f16, 3, 2000, 2, 4, 4, 64, 64},
        GraphCase{"paged_page1_bf16", FMHA_KV_PAGED, Dtype::bf16, 4, 300, 1, 4, 1, 64, 1},
        GraphCase{"padded_mqa_bf16", FMHA_KV_PADDED, Dtype::bf16, 5, 1500, 1, 16, 1, 128},
        GraphCase{"padded_causal_mq4_f16", FMHA_KV_PADDED, Dtype::f16, 4, 900, 4, 8, 2, 128, 16, 0, false,
                  FMHA_MASK_CAUSAL},
        GraphCase{"paged_forced_split4_bf16", FMHA_KV_PAGED, Dtype::bf16, 4, 1000, 1, 8, 8, 128, 16, 4},
        GraphCase{"paged_batch_invariant_bf16", FMHA_KV_PAGED, Dtype::bf16, 5, 1200, 1, 8, 2, 128, 32, 0, true},
        GraphCase{"padded_b1_fused_merge_bf16", FMHA_KV_PADDED, Dtype::bf16, 1, 5000, 1, 8, 2, 128, 16, 0, false,
                  FMHA_MASK_NONE, true},
        GraphCase{"padded_split5_fused_merge_f16", FMHA_KV_PADDED, Dtype::f16, 3, 1100, 2, 8, 2, 64, 16, 5, false,
                  FMHA_MASK_CAUSAL, true},
        GraphCase{"paged_split4_fused_merge_mqa_mq2", FMHA_KV_PAGED, Dtype::bf16, 3, 900, 2, 16, 1, 128, 16, 4, false,
                  FMHA_MASK_NONE, true}),
    case_name);

}  // namespace
}  // namespace fmha_test
