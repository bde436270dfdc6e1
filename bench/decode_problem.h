// Dense decode attention problems as the CLI builds them: Q [B, Mq, Hq, D],
// K and V [B, L, Hkv, D], O [B, Mq, Hq, D], all in one 16-bit dtype, with
// random inputs made on the host and a check of sampled sequences against
// the CPU backend.
#ifndef FMHA_SPLITK_BENCH_DECODE_PROBLEM_H_
#define FMHA_SPLITK_BENCH_DECODE_PROBLEM_H_

#include <fmha_splitk/fmha_splitk.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fmha_cli {

struct DecodeShape {
  int64_t batch = 0;
  int64_t q_len = 1;   // Mq
  int64_t kv_len = 0;  // L
  int32_t heads_q = 0;
  int32_t heads_kv = 0;
  int32_t head_dim = 0;
  fmha_dtype dtype = FMHA_DTYPE_BF16;  // of Q, K, V and O (FMHA_DTYPE_F16 or _BF16)

  int64_t q_elements() const { return batch * q_len * heads_q * head_dim; }
  int64_t kv_elements() const { return batch * kv_len * heads_kv * head_dim; }
  // Bytes a run must move at least: K and V read once, Q read, O written.
  double bytes_moved() const { return 2.0 * (2.0 * kv_elements() + 2.0 * q_elements()); }
};

// The problem for `shape` on `backend`; split_k 0 lets the plan choose.
fmha_splitk_problem make_problem(const DecodeShape &shape, int32_t backend, int32_t split_k);

// A contiguous tensor over memory owned elsewhere.
class DenseTensor {
 public:
  DenseTensor(void *data, DLDevice device, fmha_dtype dtype, std::vector<int64_t> shape);
  // For element types that are no fmha_dtype (the int32 lengths and block tables).
  DenseTensor(void *data, DLDevice device, DLDataType dtype, std::vector<int64_t> shape);
  DenseTensor(const DenseTensor &) = delete;
  DenseTensor &operator=(const DenseTensor &) = delete;
  const DLTensor *dl() const { return &dl_; }

 private:
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  DLTensor dl_{};
};

DLDataType dl_dtype(fmha_dtype dtype);

// Q, K and V in the shape's dtype, uniform in [-1, 1).
struct HostInputs {
  std::vector<uint16_t> q, k, v;
};
HostInputs random_inputs(const DecodeShape &shape, uint64_t seed);

// Computes `sequences` of the problem on the CPU backend (no split, fp32
// output) and returns ||o - ref|| / ||ref|| over their rows of `o` (all of O,
// in the shape's dtype). NaN in `o` gives NaN.
double relative_error_against_cpu(const DecodeShape &shape, const HostInputs &inputs, const std::vector<uint16_t> &o,
                                  const std::vector<int64_t> &sequences);

// The relative error the test suites allow: 2e-3 for bf16, 1e-3 for fp16.
double error_limit(fmha_dtype dtype);

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_DECODE_PROBLEM_H_
