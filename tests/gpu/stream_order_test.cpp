// Stream order across runs: the forward kernels are launched as
// programmatic dependent launches (they may start while the stream's
// previous kernel finishes) and wait for that kernel before any global
// access. Here run 1 is long and unsplit (a few CTAs, each over 16K keys,
// which let dependents launch at their start) and run 2 reads run 1's O as
// its Q right behind it on the same stream: without the wait, run 2 would
// read the poison that O held before run 1 wrote it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "features/harness.h"
#include "gpu/cuda_util.h"
#include "oracle/oracle.h"

namespace fmha_test {
namespace {

// Unequal lengths travel in a padded K/V tensor (DENSE needs equal ones).
AttentionCase gqa_case(const char *name, std::vector<int32_t> kv_len, int32_t split_k) {
  AttentionCase c;
  c.name = name;
  c.kv_layout = FMHA_KV_PADDED;
  c.kv_len = std::move(kv_len);
  c.heads_q = 8;
  c.heads_kv = 2;
  c.head_dim = 128;
  c.split_k = split_k;
  return c;
}

class StreamOrder : public ::testing::TestWithParam<int32_t> {};

TEST_P(StreamOrder, NextRunReadsThePreviousRunsOutput) {
  FMHA_SKIP_WITHOUT_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  // Run 1: 2 sequences x 2 K/V heads = 4 CTAs of 16384 keys each.
  const std::unique_ptr<AttentionData> first = build_attention(gqa_case("long_unsplit", {16384, 16384}, 1), seed);
  // Run 2: the same Q shape (B 2, Mq 1, Hq 8, D 128), short sequences.
  const std::unique_ptr<AttentionData> second = build_attention(gqa_case("short", {300, 77}, GetParam()), seed + 1);

  Device &device = device_under_test();
  const DeviceInputs in1 = upload_inputs(*first), in2 = upload_inputs(*second);
  const PlanPtr plan1 = make_plan(first->problem), plan2 = make_plan(second->problem);
  const DeviceBuffer ws1(workspace_size(plan1.get())), ws2(workspace_size(plan2.get()));
  Tensor o1 = first->make_o(), o2 = second->make_o(), lse2 = second->make_lse();
  ASSERT_EQ(o1.shape(), second->q->shape());
  const DeviceTensor o1_dev = device.upload(o1), o2_dev = device.upload(o2), lse2_dev = device.upload(lse2);
  const Stream stream;

  const fmha_splitk_args args1 = run_args(in1, o1_dev, nullptr, ws1.get(), ws1.bytes(), stream.get());
  fmha_splitk_args args2 = run_args(in2, o2_dev, &lse2_dev, ws2.get(), ws2.bytes(), stream.get());
  args2.q = o1_dev.dl();  // run 2's Q is run 1's O
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    poison_async(o1_dev, stream.get());
    poison_async(o2_dev, stream.get());
    poison_async(lse2_dev, stream.get());
    fmha_check(fmha_splitk_run(plan1.get(), &args1), "fmha_splitk_run (run 1)");
    fmha_check(fmha_splitk_run(plan2.get(), &args2), "fmha_splitk_run (run 2)");
    copy_to_host(o1_dev, o1, stream.get());
    copy_to_host(o2_dev, o2, stream.get());
    copy_to_host(lse2_dev, lse2, stream.get());

    const fmha_oracle::AttentionOutput ref1 = fmha_oracle::AttentionOracle(first->oracle_inputs()).forward();
    EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(o1), ref1, attention_tolerance(Dtype::bf16, Dtype::bf16, ref1.o)));
    // Run 2 against the oracle of the Q that run 1 wrote.
    fmha_oracle::AttentionInputs oracle2 = second->oracle_inputs();
    oracle2.q = &o1;
    const fmha_oracle::AttentionOutput ref2 = fmha_oracle::AttentionOracle(oracle2).forward();
    EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(o2), ref2, attention_tolerance(Dtype::bf16, Dtype::bf16, ref2.o)));
    EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(lse2), ref2.lse));
  }
}

INSTANTIATE_TEST_SUITE_P(Runs, StreamOrder, ::testing::Values(1, 3), [](const ::testing::TestParamInfo<int32_t> &info) {
  return "second_split" + std::to_string(info.param);
});

}  // namespace
}  // namespace fmha_test
