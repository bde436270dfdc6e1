// The device memory `bench` and `tune` run a grid problem on: its lengths
// and block table, and input sets of random Q, K and V (packed as the
// problem's quant says) with their scales and O, laid out as BenchCase
// describes (problem_grid.h).
#ifndef FMHA_SPLITK_BENCH_BENCH_INPUTS_H_
#define FMHA_SPLITK_BENCH_BENCH_INPUTS_H_

#include <fmha_splitk/fmha_splitk.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "decode_problem.h"
#include "device.h"
#include "problem_grid.h"

namespace fmha_cli {

// The seed of every random input of `bench` and `tune`.
constexpr uint64_t kBenchSeed = 2026;

// The lengths and block table, shared by every input set: they are small,
// and the same for each.
class Metadata {
 public:
  Metadata(Device &device, const BenchCase &c);
  const DLTensor *kv_seqlen() const { return kv_seqlen_tensor_ ? kv_seqlen_tensor_->dl() : nullptr; }
  const DLTensor *block_table() const { return block_table_tensor_ ? block_table_tensor_->dl() : nullptr; }
  // The host copy of the block table ([B, pages_per_seq]; empty unless PAGED).
  const std::vector<int32_t> &table() const { return table_; }

 private:
  DeviceBuffer kv_seqlen_;
  std::vector<int32_t> table_;
  DeviceBuffer block_table_;
  std::unique_ptr<DenseTensor> kv_seqlen_tensor_;
  std::unique_ptr<DenseTensor> block_table_tensor_;
};

// One of the rotated input sets: its own Q, K, V (with their scales for
// fp8) and O, random on the device; O poisoned with NaN so that a row no
// run writes fails the check. Runs on one stream are ordered, so the sets
// share the workspace (the plan's own or the bench's).
class InputSet {
 public:
  // `workspace` NULL: the runs use the plan's own workspace (args.workspace
  // NULL), where split plans merge inside the forward kernel.
  InputSet(Device &device, const BenchCase &c, int64_t index, const Metadata &metadata, const DeviceBuffer *workspace);
  const fmha_splitk_args &args() const { return args_; }
  const DeviceBuffer &q() const { return q_; }
  const DeviceBuffer &k() const { return k_; }
  const DeviceBuffer &v() const { return v_; }
  const DeviceBuffer &o() const { return o_; }
  const DeviceBuffer &k_scale() const { return k_scale_; }
  const DeviceBuffer &v_scale() const { return v_scale_; }

 private:
  DeviceBuffer q_, k_, v_, o_, k_scale_, v_scale_;
  DenseTensor q_tensor_, k_tensor_, v_tensor_, o_tensor_, k_scale_tensor_, v_scale_tensor_;
  fmha_splitk_args args_ = FMHA_SPLITK_ARGS_INIT;
};

// Shapes and element types of the tensors, for the check against the CPU
// backend, which builds its own over host copies.
std::vector<int64_t> q_shape(const BenchCase &c);
// The row dims of K/V and per-row scales as the bench lays them out.
std::vector<int64_t> kv_row_dims(const BenchCase &c);
// K/V over `rows`: bf16 values, int4 words or fp8 codes per head.
std::vector<int64_t> kv_dims(const BenchCase &c, std::vector<int64_t> rows);
DLDataType kv_element(const BenchCase &c);
// fp8 scales: [rows..., Hkv] per row, [Hkv] per head, [1] per tensor.
std::vector<int64_t> scale_dims(const BenchCase &c, std::vector<int64_t> rows);
DLDataType scale_element(const BenchCase &c);

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_BENCH_INPUTS_H_
