// What every feature suite does to one case: build fresh random host
// tensors in the layout the case names, run the public API on the device
// under test with NaN-poisoned outputs, download, and compare with the
// float64 oracle. Compiled into the CPU suite and the GPU suite alike, so it
// only reaches device memory through fmha_test::Device.
#ifndef FMHA_SPLITK_TESTS_FEATURES_HARNESS_H_
#define FMHA_SPLITK_TESTS_FEATURES_HARNESS_H_

#include <fmha_splitk/fmha_splitk.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/device.h"
#include "common/tensor.h"
#include "oracle/oracle.h"

namespace fmha_test {

// The seed of this test's random data: FMHA_TEST_SEED when set (to replay a
// failure), else fresh from std::random_device. Tests print it on failure.
uint64_t fresh_seed();
std::string seed_note(uint64_t seed);

// Strides of `shape` stored in the physical dim order `order` (outermost
// first), the innermost physical dim padded by `pad` elements.
std::vector<int64_t> strides_for(const std::vector<int64_t> &shape, const std::vector<size_t> &order, int64_t pad);
// An int32 tensor holding `values` in row-major order.
Tensor int_tensor(const std::vector<int32_t> &values, std::vector<int64_t> shape);

// How fp8 tensors are handed over (fmha_dtype FP8 accepts all three).
enum class Fp8Storage {
  bytes,        // DLPack uint8
  dlpack_code,  // DLPack 1.1 codes 10 (e4m3fn) / 11 (e4m3fnuz), 8 bits
  words         // int32 words of four values (value 4w + j is byte j of word w)
};

// One forward problem, described by shape and features; the data is drawn
// from the seed when it is built.
struct AttentionCase {
  std::string name;
  Dtype dtype = Dtype::bf16;             // Q, K and V
  int32_t o_dtype = FMHA_DTYPE_DEFAULT;  // fmha_dtype of O
  int32_t q_layout = FMHA_Q_FIXED;
  int32_t kv_layout = FMHA_KV_DENSE;
  // Keys per sequence (DENSE: all equal; RAGGED without kv_last_page_len:
  // rounded up to whole pages). Its size is the batch.
  std::vector<int32_t> kv_len{64};
  // Queries per sequence (FIXED: all equal).
  std::vector<int32_t> q_len{1};
  int32_t groups = 1, heads_q = 1, heads_kv = 1;
  // MQA as in the reference: K/V carry Hq heads with a head stride of 0
  // (heads_kv must then be 1).
  bool kv_head_stride0 = false;
  bool four_d = false;  // 4-D tensors (groups must be 1)
  int32_t head_dim = 64;
  int32_t page_size = 16;
  bool kv_page_dim = false;     // PAGED/RAGGED K/V as [num_pages, page_size, ...]
  bool paged_seqstart = false;  // PAGED with a logical start per sequence
  bool last_page_len = true;    // RAGGED with kv_last_page_len
  int32_t padded_extra = 5;     // PADDED capacity beyond the longest sequence
  // K/V rows that hold no key of any sequence (padding, spare pages, page
  // slots before a start or past an end) hold NaN instead of large finite
  // garbage: they must not leak into any result.
  bool nan_padding = false;
  int32_t mask = FMHA_MASK_NONE;
  int32_t window_left = 0, window_right = 0;
  bool bias = false;
  Dtype bias_dtype = Dtype::f32;
  bool bias_masks_first_row = false;  // bias row 0 of every sequence is -inf
  float softcap = 0.0f;
  bool sinks = false;
  float softmax_scale = 0.0f;
  double q_amplitude = 1.0;  // scales Q: larger scores (softcap cases)
  int v_row_spread = 0;      // V rows scaled by 2^-n .. 2^n (far-apart per-row V scales)
  int32_t split_k = 0;
  bool batch_invariant = false;
  int32_t kv_chunk_size = 0;
  bool length_hint = false;        // pass kv_seqlen_hint ...
  bool stale_length_hint = false;  // ... with other lengths than the runs use
  bool lse = true;
  bool null_workspace = false;
  bool strided_q_o = false;  // Q and O with padded head strides
  bool strided_lse = false;  // LSE [B, G, Hq, Mq] stored in O's row order [B, Mq, G, Hq]
  bool strided_kv = false;   // K/V with a transposed batch or padded rows
  bool write_partials = false;

  // Quantised K/V (DESIGN 5.6): the K/V values drawn as above are quantised
  // row by row into the packed format, and the oracle attends over the
  // dequantised values (so the quantisation error itself is not measured).
  // Needs contiguous K/V with distinct heads (no strided_kv, no
  // kv_head_stride0). With nan_padding, rows that hold no key get NaN codes
  // and NaN (or infinite) scales.
  int32_t kv_quant = FMHA_KV_QUANT_NONE;
  int32_t kv_quant_groups = 1;  // int4
  int32_t fp8_format = FMHA_FP8_E4M3FN;
  int32_t kv_scale_kind = FMHA_KV_SCALE_F16X2_SCALE_SHIFT;
  int32_t kv_scale_granularity = FMHA_SCALE_PER_ROW;
  Fp8Storage fp8_storage = Fp8Storage::bytes;
  // fp8 K/V codes (bytes storage) with 4 poisoned bytes (NaN codes) after
  // each head's row: rows only 4-byte aligned, so a GPU backend must take
  // its 4-byte copies (the CUDA MLA kernel's fallback to the tile kernel).
  bool fp8_rows_4byte_aligned = false;
  // FMHA_FLAG_FP8_QK: Q quantised to fp8 with q_scale (dtype must be bf16,
  // the natural type of fp8 Q).
  bool fp8_qk = false;
  int32_t q_scale_granularity = FMHA_SCALE_PER_ROW;
  bool fp8_pv = false;  // FMHA_FLAG_FP8_PV
  // MLA (FMHA_FLAG_V_FROM_K): V is the first head_dim_v dims of K; no V
  // tensor (nor v_scale) is passed.
  bool v_from_k = false;
  int32_t head_dim_v = 0;
  // Relative error bound of O before the output rounding; 0 takes the
  // input dtype's (DESIGN 6). Modes that round inside the math (fp8
  // compute) set theirs (docs/numerics.md).
  double error_bound = 0.0;

  int64_t batch() const { return static_cast<int64_t>(kv_len.size()); }
  std::string describe() const;
};

// Host tensors and the problem of one case. Not copyable once built: the
// oracle inputs point into it.
struct AttentionData {
  AttentionCase spec;
  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  std::vector<int32_t> length_hint;
  std::optional<Tensor> q, k, v, bias, sinks, kv_seqlen, kv_seqstart, q_seqstart, block_table, kv_indptr, kv_indices,
      kv_last_page_len;
  // fp8 scales (quantised cases).
  std::optional<Tensor> k_scale, v_scale, q_scale;
  // What the oracle reads instead of q, k, v when set: the dequantised
  // (float64) inputs, and V taken from K's rows (V_FROM_K).
  std::optional<Tensor> q_ref, k_ref, v_ref;
  std::vector<int32_t> kv_len;  // keys per sequence actually laid out

  AttentionData() = default;
  AttentionData(const AttentionData &) = delete;
  AttentionData &operator=(const AttentionData &) = delete;

  fmha_oracle::AttentionInputs oracle_inputs() const;
  int64_t head_dim_v() const { return problem.head_dim_v ? problem.head_dim_v : problem.head_dim_qk; }
  // Output tensors in the case's dtype and strides, poisoned with NaN.
  Tensor make_o() const;
  Tensor make_lse() const;
  Tensor make_o_partial(int32_t splits) const;
  Tensor make_lse_partial(int32_t splits) const;
};

// How GoogleTest prints a case parameter (instead of its bytes).
void PrintTo(const AttentionCase &spec, std::ostream *os);

std::unique_ptr<AttentionData> build_attention(const AttentionCase &spec, uint64_t seed);

// Input tensors uploaded to the device, kept alive for any number of runs.
struct DeviceInputs {
  std::optional<DeviceTensor> q, k, v, bias, sinks, kv_seqlen, kv_seqstart, q_seqstart, block_table, kv_indptr,
      kv_indices, kv_last_page_len, k_scale, v_scale, q_scale;
};
DeviceInputs upload_inputs(const AttentionData &data);

// What one run returned, downloaded to the host.
struct RunResult {
  fmha_status status = FMHA_STATUS_INTERNAL_ERROR;
  std::string error;  // which call failed and fmha_last_error_message()
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  Tensor o, lse, o_partial, lse_partial;
};

// Plans and runs `problem` (backend forced to the device's) on uploaded
// inputs; NaN-poisoned outputs are uploaded, written and downloaded.
RunResult run_attention(const AttentionData &data, const DeviceInputs &inputs, const fmha_splitk_problem &problem);
RunResult run_attention(const AttentionData &data);
// One run of `plan`, made for `problem` (data.problem with the device's
// backend), as run_attention does it: any number of runs of one plan.
RunResult run_planned(const AttentionData &data, const DeviceInputs &inputs, const fmha_splitk_problem &problem,
                      fmha_splitk_plan_t plan);

// ||round(ref) - ref|| / ||ref||: what storing the exact result in `output`
// costs by itself.
double rounding_error(Dtype output, const std::vector<double> &ref);
// ||out - ref|| / ||ref|| bound for a forward case: the bound of its input
// dtype (DESIGN 6) plus the rounding to the output dtype.
double attention_tolerance(Dtype input, Dtype output, const std::vector<double> &ref);
// The same for a case: its own error_bound when it sets one.
double case_tolerance(const AttentionCase &spec, Dtype output, const std::vector<double> &ref);
// ||out - ref|| / ||ref|| (0 when both are 0).
double relative_error(const std::vector<double> &out, const std::vector<double> &ref);

// O (logical elements, row-major) against the oracle: no NaN, relative
// error within `tolerance`, exactly 0 on rows where the oracle sees no key.
::testing::AssertionResult o_matches(const std::vector<double> &o, const fmha_oracle::AttentionOutput &ref,
                                     double tolerance);
// LSE against the oracle: -inf exactly where the oracle has -inf, finite
// entries within `tolerance` (absolute, or relative above 1).
::testing::AssertionResult lse_matches(const std::vector<double> &lse, const std::vector<double> &ref_lse,
                                       double tolerance = 1e-3);
// The bytes of `t`'s buffer that belong to no element still hold the
// poison: the library wrote nothing outside the tensor.
::testing::AssertionResult outside_untouched(const Tensor &t, const char *what);

// Runs one case end to end with every check: O and LSE against the oracle
// and outside their elements untouched; with write_partials, every chunk's
// partial against the oracle of its key range, and the partials merged with
// fmha_merge against the oracle and the direct (merged-by-run) result.
void check_attention_case(const AttentionCase &spec);
// The same, for modes a backend may not implement yet: skips with the
// library's message when fmha_splitk_create_plan answers NOT_SUPPORTED.
void check_attention_case_if_supported(const AttentionCase &spec);

// Error bounds of the fp8 compute modes (docs/numerics.md), before the
// output rounding. FP8_QK: the fp8 products are exact in float32 and so is
// the dequantisation; the CPU backend measures only the output rounding,
// and the bound is twice that of bf16 to leave room for the fewer
// accumulator bits of a GPU's fp8 tensor cores. FP8_PV rounds P (scaled by
// rowmax / 448) to fp8 with 3 mantissa bits: each probability is off by up
// to 2^-4 relative, and O, an average of V rows, inherits that; worst
// measured on the CPU backend 0.023 (90 random cases), bound about twice.
constexpr double kFp8QkErrorBound = 4e-3;
constexpr double kFp8PvErrorBound = 5e-2;

// The partials of fmha_merge, stacked or as lists (host tensors).
struct MergeInputs {
  const Tensor *o_stacked = nullptr;
  const Tensor *lse_stacked = nullptr;
  std::vector<const Tensor *> o_list, lse_list;
};
// Uploads the partials and the (already poisoned) outputs, runs fmha_merge
// on the device under test, downloads. `lse` may be NULL (not requested).
fmha_status merge_on_device(const MergeInputs &in, Tensor &o, Tensor *lse, std::string &error);

// What a plan chose, for failure messages.
std::string plan_note(const fmha_splitk_plan_info &info);

Dtype output_dtype(const AttentionCase &spec);
std::string dtype_name(Dtype t);

}  // namespace fmha_test

#endif  // FMHA_SPLITK_TESTS_FEATURES_HARNESS_H_
