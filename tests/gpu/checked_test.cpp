// Checked mode (FMHA_FLAG_CHECKED) on the CUDA backend: each kind of bad
// device-side metadata is fed to a checked plan with NaN-poisoned outputs.
// fmha_splitk_check_status must then answer INVALID_ARGUMENT naming the
// sequence and the value (once: the next call answers SUCCESS), the bad
// sequences' output rows must be left untouched, and every good sequence
// must get the bits of the clean run. A clean checked run must report
// nothing and give the bits of the unchecked run. Meant to run under
// compute-sanitizer memcheck too: no bad entry may be dereferenced.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "features/harness.h"
#include "gpu/cuda_util.h"
#include "oracle/oracle.h"

namespace fmha_test {
namespace {

// The metadata tensor a case corrupts.
enum class Field { kv_seqlen, block_table, kv_indptr, kv_indices, q_seqstart };

// One entry set to a bad value, and what the report must say.
struct Corruption {
  Field field;
  std::vector<int64_t> at;  // index into the field's tensor
  int32_t value;
  std::vector<std::string> message_parts;
  std::vector<int64_t> bad_sequences;  // every sequence the check must skip
  // False when the bad sequence's own query rows are not known any more
  // (a corrupted q_seqstart): its rows are then not checked for poison.
  bool bad_rows_known = true;
};

struct CheckedCase {
  std::string name;
  int32_t kv_layout;
  int32_t q_layout;
  // Forced (> 0): every sequence's result is independent of the others'
  // lengths, so good sequences keep the clean run's bits; 0: balanced.
  int32_t split_k;
  bool own_workspace;
  std::function<Corruption(const AttentionData &)> corrupt;
};

std::string case_name(const ::testing::TestParamInfo<CheckedCase> &info) { return info.param.name; }

// How GoogleTest prints a case parameter (instead of its bytes).
void PrintTo(const CheckedCase &c, std::ostream *os) { *os << c.name; }

AttentionCase spec_for(const CheckedCase &c) {
  AttentionCase spec;
  spec.name = c.name;
  spec.dtype = Dtype::bf16;
  spec.kv_layout = c.kv_layout;
  spec.q_layout = c.q_layout;
  spec.kv_len = {37, 80, 5, 64};
  spec.q_len = c.q_layout == FMHA_Q_VARLEN ? std::vector<int32_t>{2, 1, 3, 2} : std::vector<int32_t>{2};
  spec.heads_q = 4;
  spec.heads_kv = 2;
  spec.head_dim = 64;
  spec.page_size = 16;
  spec.split_k = c.split_k;
  spec.null_workspace = c.own_workspace;
  return spec;
}

// The output rows of sequence b: index `batch` of dim 0, rows [begin, end)
// of the query axis (O: axis 1; LSE [B, G, Hq, M]: the last).
struct SeqRows {
  int64_t batch, begin, end;
};

SeqRows rows_of(const AttentionData &data, int64_t b) {
  if (data.problem.q_layout != FMHA_Q_VARLEN) return SeqRows{b, 0, data.problem.max_q_seqlen};
  return SeqRows{0, static_cast<int64_t>(data.q_seqstart->get({b})),
                 static_cast<int64_t>(data.q_seqstart->get({b + 1}))};
}

template <class F>
void for_rows(const Tensor &t, int row_axis, const SeqRows &rows, F &&f) {
  t.for_each_index([&](const std::vector<int64_t> &i) {
    if (i[0] == rows.batch && i[static_cast<size_t>(row_axis)] >= rows.begin &&
        i[static_cast<size_t>(row_axis)] < rows.end)
      f(i);
  });
}

const uint8_t *element(const Tensor &t, const std::vector<int64_t> &i) {
  return static_cast<const uint8_t *>(t.data()) + t.offset(i) * static_cast<int64_t>(dtype_bytes(t.dtype()));
}

// Sequence b's rows hold the same bits in `got` as in `want`.
::testing::AssertionResult rows_identical(const Tensor &got, const Tensor &want, int row_axis, const SeqRows &rows,
                                          const char *what, int64_t b) {
  int64_t differ = 0;
  const size_t n = dtype_bytes(got.dtype());
  for_rows(got, row_axis, rows, [&](const std::vector<int64_t> &i) {
    if (std::memcmp(element(got, i), element(want, i), n) != 0) ++differ;
  });
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << differ << " elements of good sequence " << b
                                       << " differ from the clean run";
}

// Sequence b's rows agree with `want` within `tolerance` (relative, over the
// sequence): the balanced schedule cuts the batch by its total key count, so
// skipping a sequence may move the other sequences' cuts (not their values
// beyond rounding).
::testing::AssertionResult rows_close(const Tensor &got, const Tensor &want, int row_axis, const SeqRows &rows,
                                      double tolerance, const char *what, int64_t b) {
  std::vector<double> out, ref;
  for_rows(got, row_axis, rows, [&](const std::vector<int64_t> &i) {
    out.push_back(got.get(i));
    ref.push_back(want.get(i));
  });
  const double error = relative_error(out, ref);
  if (error <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": good sequence " << b << " is off the clean run by " << error
                                       << " (bound " << tolerance << ")";
}

// Sequence b's rows still hold the poison: nothing was written there.
::testing::AssertionResult rows_poisoned(const Tensor &t, int row_axis, const SeqRows &rows, const char *what,
                                         int64_t b) {
  int64_t written = 0;
  const size_t n = dtype_bytes(t.dtype());
  for_rows(t, row_axis, rows, [&](const std::vector<int64_t> &i) {
    const uint8_t *p = element(t, i);
    if (std::any_of(p, p + n, [](uint8_t byte) { return byte != 0xff; })) ++written;
  });
  if (written == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << written << " elements of bad sequence " << b
                                       << " were written";
}

std::optional<Tensor> &host_field(AttentionData &data, Field field) {
  switch (field) {
    case Field::kv_seqlen:
      return data.kv_seqlen;
    case Field::block_table:
      return data.block_table;
    case Field::kv_indptr:
      return data.kv_indptr;
    case Field::kv_indices:
      return data.kv_indices;
    default:
      return data.q_seqstart;
  }
}

std::optional<DeviceTensor> &device_field(DeviceInputs &in, Field field) {
  switch (field) {
    case Field::kv_seqlen:
      return in.kv_seqlen;
    case Field::block_table:
      return in.block_table;
    case Field::kv_indptr:
      return in.kv_indptr;
    case Field::kv_indices:
      return in.kv_indices;
    default:
      return in.q_seqstart;
  }
}

// One run of `plan` over `in` into freshly poisoned O / LSE, downloaded.
struct Outputs {
  Tensor o, lse;
};

Outputs run_once(const AttentionData &data, const DeviceInputs &in, fmha_splitk_plan_t plan,
                 const DeviceBuffer *workspace, const Stream &stream) {
  Device &device = device_under_test();
  Outputs out{data.make_o(), data.make_lse()};
  const DeviceTensor o_dev = device.upload(out.o), lse_dev = device.upload(out.lse);
  poison_async(o_dev, stream.get());
  poison_async(lse_dev, stream.get());
  const fmha_splitk_args args = run_args(in, o_dev, &lse_dev, workspace != nullptr ? workspace->get() : nullptr,
                                         workspace != nullptr ? workspace->bytes() : 0, stream.get());
  fmha_check(fmha_splitk_run(plan, &args), "fmha_splitk_run");
  copy_to_host(o_dev, out.o, stream.get());
  copy_to_host(lse_dev, out.lse, stream.get());
  return out;
}

class CheckedMode : public ::testing::TestWithParam<CheckedCase> {};

TEST_P(CheckedMode, ReportsTheViolationAndSkipsOnlyTheBadSequences) {
  FMHA_SKIP_WITHOUT_CUDA();
  const CheckedCase &c = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  const AttentionCase spec = spec_for(c);
  SCOPED_TRACE(spec.describe());
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  DeviceInputs in = upload_inputs(*data);

  fmha_splitk_problem checked = data->problem;
  checked.flags |= FMHA_FLAG_CHECKED;
  const PlanPtr plan = make_plan(checked);
  const PlanPtr unchecked_plan = make_plan(data->problem);
  std::optional<DeviceBuffer> workspace;
  if (!c.own_workspace) workspace.emplace(workspace_size(plan.get()));
  // The unchecked run takes the same kind of workspace: on a plan's own
  // the split's slots merge inside the forward kernel, on a caller's in
  // the combine pass, and the two sum in another order (backends/gpu/
  // forward.cu), so only like against like is bitwise (run 78 met a seed
  // whose bf16 O differed).
  std::optional<DeviceBuffer> unchecked_workspace;
  if (!c.own_workspace && workspace_size(unchecked_plan.get()) > 0)
    unchecked_workspace.emplace(workspace_size(unchecked_plan.get()));
  const DeviceBuffer *ws = workspace ? &*workspace : nullptr;
  void *const ws_ptr = ws != nullptr ? ws->get() : nullptr;
  const Stream stream;

  // Clean: nothing to report, the oracle's result, the unchecked run's bits.
  const Outputs clean = run_once(*data, in, plan.get(), ws, stream);
  EXPECT_EQ(fmha_splitk_check_status(plan.get(), ws_ptr, stream.get()), FMHA_STATUS_SUCCESS)
      << fmha_last_error_message();
  const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(data->oracle_inputs()).forward();
  EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(clean.o), ref,
                        attention_tolerance(spec.dtype, output_dtype(spec), ref.o)));
  EXPECT_TRUE(lse_matches(fmha_oracle::to_doubles(clean.lse), ref.lse));
  const Outputs unchecked =
      run_once(*data, in, unchecked_plan.get(), unchecked_workspace ? &*unchecked_workspace : nullptr, stream);
  EXPECT_TRUE(bitwise_equal(clean.o, unchecked.o)) << "a clean checked run must match the unchecked run";
  EXPECT_TRUE(bitwise_equal(clean.lse, unchecked.lse)) << "a clean checked run must match the unchecked run";

  // Corrupted: one entry of one metadata tensor.
  const Corruption bad = c.corrupt(*data);
  Tensor corrupted = *host_field(*data, bad.field);
  corrupted.set(bad.at, bad.value);
  copy_to_device_async(corrupted, *device_field(in, bad.field), stream.get());
  const Outputs got = run_once(*data, in, plan.get(), ws, stream);
  const fmha_status status = fmha_splitk_check_status(plan.get(), ws_ptr, stream.get());
  const std::string message = fmha_last_error_message();
  EXPECT_EQ(status, FMHA_STATUS_INVALID_ARGUMENT) << fmha_status_string(status) << ": " << message;
  for (const std::string &part : bad.message_parts)
    EXPECT_NE(message.find(part), std::string::npos) << "message \"" << message << "\" does not name \"" << part
                                                     << "\"";
  EXPECT_NE(message.find("sequence " + std::to_string(bad.bad_sequences.front()) + " was skipped"),
            std::string::npos)
      << message;
  // Reported once: the record is cleared.
  EXPECT_EQ(fmha_splitk_check_status(plan.get(), ws_ptr, stream.get()), FMHA_STATUS_SUCCESS)
      << fmha_last_error_message();

  for (int64_t b = 0; b < data->problem.batch; ++b) {
    const SeqRows rows = rows_of(*data, b);  // from the clean q_seqstart
    const bool is_bad =
        std::find(bad.bad_sequences.begin(), bad.bad_sequences.end(), b) != bad.bad_sequences.end();
    if (!is_bad && c.split_k > 0) {
      EXPECT_TRUE(rows_identical(got.o, clean.o, 1, rows, "O", b));
      EXPECT_TRUE(rows_identical(got.lse, clean.lse, 3, rows, "LSE", b));
    } else if (!is_bad) {
      EXPECT_TRUE(rows_close(got.o, clean.o, 1, rows, 2e-2, "O", b));
      EXPECT_TRUE(rows_close(got.lse, clean.lse, 3, rows, 1e-4, "LSE", b));
    } else if (bad.bad_rows_known) {
      EXPECT_TRUE(rows_poisoned(got.o, 1, rows, "O", b));
      EXPECT_TRUE(rows_poisoned(got.lse, 3, rows, "LSE", b));
    }
  }
  EXPECT_TRUE(outside_untouched(got.o, "O"));
  EXPECT_TRUE(outside_untouched(got.lse, "LSE"));

  // Repaired: the next run is clean again and gives the clean bits.
  copy_to_device_async(*host_field(*data, bad.field), *device_field(in, bad.field), stream.get());
  const Outputs again = run_once(*data, in, plan.get(), ws, stream);
  EXPECT_EQ(fmha_splitk_check_status(plan.get(), ws_ptr, stream.get()), FMHA_STATUS_SUCCESS)
      << fmha_last_error_message();
  EXPECT_TRUE(bitwise_equal(again.o, clean.o));
}

int32_t at(const std::optional<Tensor> &t, std::vector<int64_t> i) { return static_cast<int32_t>(t->get(i)); }
std::string num(int64_t v) { return std::to_string(v); }

// kv_len {37, 80, 5, 64}, page_size 16: pages {3, 5, 1, 4}; PADDED
// capacity 85 (80 + padded_extra 5); VARLEN q_len {2, 1, 3, 2}: q_seqstart
// {0, 2, 3, 6, 8}.
const std::vector<CheckedCase> &cases() {
  static const std::vector<CheckedCase> all = {
      {"padded_kv_seqlen_over_capacity", FMHA_KV_PADDED, FMHA_Q_FIXED, 2, false,
       [](const AttentionData &d) {
         const int64_t capacity = d.problem.max_kv_seqlen;
         return Corruption{Field::kv_seqlen, {2}, static_cast<int32_t>(capacity + 1000),
                           {"kv_seqlen[2] = " + num(capacity + 1000), "exceeds the capacity " + num(capacity)},
                           {2}};
       }},
      {"padded_kv_seqlen_negative", FMHA_KV_PADDED, FMHA_Q_FIXED, 2, true,
       [](const AttentionData &) {
         return Corruption{Field::kv_seqlen, {1}, -3, {"kv_seqlen[1] = -3 is negative"}, {1}};
       }},
      {"paged_kv_seqlen_over_max", FMHA_KV_PAGED, FMHA_Q_FIXED, 2, false,
       [](const AttentionData &d) {
         return Corruption{Field::kv_seqlen, {0}, 5000,
                           {"kv_seqlen[0] = 5000", "max_kv_seqlen = " + num(d.problem.max_kv_seqlen)}, {0}};
       }},
      {"paged_block_table_past_the_pages", FMHA_KV_PAGED, FMHA_Q_FIXED, 2, false,
       [](const AttentionData &d) {
         const int64_t bad = d.problem.num_pages + 500;
         return Corruption{Field::block_table, {1, 2}, static_cast<int32_t>(bad),
                           {"block_table[1][2] = " + num(bad), "not a page id",
                            "(k has " + num(d.problem.num_pages) + " pages)"},
                           {1}};
       }},
      {"paged_block_table_negative", FMHA_KV_PAGED, FMHA_Q_FIXED, 0, false,
       [](const AttentionData &) {
         return Corruption{Field::block_table, {3, 1}, -7, {"block_table[3][1] = -7", "not a page id"}, {3}};
       }},
      {"paged_block_table_negative_own_workspace", FMHA_KV_PAGED, FMHA_Q_FIXED, 2, true,
       [](const AttentionData &) {
         return Corruption{Field::block_table, {0, 0}, -1, {"block_table[0][0] = -1"}, {0}};
       }},
      {"ragged_kv_indptr_not_monotonic", FMHA_KV_RAGGED, FMHA_Q_FIXED, 2, false,
       [](const AttentionData &d) {
         // indptr {0, 3, 8, 9, 13} -> {0, 3, 1, 9, 13}: sequence 1 runs
         // backwards, sequence 2 gets 8 pages (too many keys); 1 is reported.
         const int32_t prev = at(d.kv_indptr, {1});
         return Corruption{Field::kv_indptr, {2}, prev - 2,
                           {"kv_indptr[2] = " + num(prev - 2) + " < kv_indptr[1] = " + num(prev) +
                                " (not monotonic)",
                            "2 sequences failed"},
                           {1, 2}};
       }},
      {"ragged_kv_indptr_past_kv_indices", FMHA_KV_RAGGED, FMHA_Q_FIXED, 0, false,
       [](const AttentionData &d) {
         const int64_t nnz = d.kv_indices->shape()[0];
         return Corruption{Field::kv_indptr, {4}, static_cast<int32_t>(nnz + 7),
                           {"kv_indptr[4] = " + num(nnz + 7), "entries of kv_indices"}, {3}};
       }},
      {"ragged_kv_indices_past_the_pages", FMHA_KV_RAGGED, FMHA_Q_FIXED, 2, false,
       [](const AttentionData &d) {
         const int64_t entry = at(d.kv_indptr, {3}) + 1;  // sequence 3's second page
         const int64_t bad = d.problem.num_pages + 3;
         return Corruption{Field::kv_indices, {entry}, static_cast<int32_t>(bad),
                           {"kv_indices[" + num(entry) + "] = " + num(bad) + " (sequence 3)", "not a page id"},
                           {3}};
       }},
      {"varlen_q_seqstart_not_monotonic", FMHA_KV_PADDED, FMHA_Q_VARLEN, 2, false,
       [](const AttentionData &) {
         // {0, 2, 3, 6, 8} -> {0, 2, 1, 6, 8}: sequence 1 runs backwards,
         // sequence 2 gets 5 queries (more than max_q_seqlen 3).
         return Corruption{Field::q_seqstart, {2}, 1,
                           {"q_seqstart[2] = 1 < q_seqstart[1] = 2 (not monotonic)"}, {1, 2}, false};
       }},
      {"varlen_q_seqstart_past_total_q", FMHA_KV_PAGED, FMHA_Q_VARLEN, 0, false,
       [](const AttentionData &) {
         return Corruption{Field::q_seqstart, {4}, 13, {"q_seqstart[4] = 13 exceeds total_q = 8"}, {3}, false};
       }},
      {"varlen_q_seqstart_negative", FMHA_KV_RAGGED, FMHA_Q_VARLEN, 2, false,
       [](const AttentionData &) {
         return Corruption{Field::q_seqstart, {0}, -1, {"q_seqstart[0] = -1 is negative"}, {0}, false};
       }},
  };
  return all;
}

INSTANTIATE_TEST_SUITE_P(Violations, CheckedMode, ::testing::ValuesIn(cases()), case_name);

// Block-table entries past a sequence's last page are not its pages: a
// checked run must not report them (tables keep stale ids there).
TEST(CheckedModeClean, UnusedBlockTableEntriesAreNotChecked) {
  FMHA_SKIP_WITHOUT_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  CheckedCase c{"paged_unused_columns", FMHA_KV_PAGED, FMHA_Q_FIXED, 0, false, nullptr};
  const AttentionCase spec = spec_for(c);
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  // Sequence 2 (5 keys) uses column 0 only.
  const int64_t columns = data->block_table->shape()[1];
  for (int64_t col = 1; col < columns; ++col) data->block_table->set({2, col}, col % 2 ? -1 : 1 << 30);
  const DeviceInputs in = upload_inputs(*data);
  fmha_splitk_problem checked = data->problem;
  checked.flags |= FMHA_FLAG_CHECKED;
  const PlanPtr plan = make_plan(checked);
  const DeviceBuffer workspace(workspace_size(plan.get()));
  const Stream stream;
  const Outputs out = run_once(*data, in, plan.get(), &workspace, stream);
  EXPECT_EQ(fmha_splitk_check_status(plan.get(), workspace.get(), stream.get()), FMHA_STATUS_SUCCESS)
      << fmha_last_error_message();
  const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(data->oracle_inputs()).forward();
  EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(out.o), ref, attention_tolerance(spec.dtype, output_dtype(spec), ref.o)));
}

// A checked plan's workspace that no run has used yet reads as clean, and
// the report of one run is replaced by the next run's.
TEST(CheckedModeClean, FreshWorkspaceAndLaterRunsReadClean) {
  FMHA_SKIP_WITHOUT_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  CheckedCase c{"padded_fresh", FMHA_KV_PADDED, FMHA_Q_FIXED, 2, false, nullptr};
  const AttentionCase spec = spec_for(c);
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  DeviceInputs in = upload_inputs(*data);
  fmha_splitk_problem checked = data->problem;
  checked.flags |= FMHA_FLAG_CHECKED;
  const PlanPtr plan = make_plan(checked);
  const DeviceBuffer workspace(workspace_size(plan.get()));
  const Stream stream;
  cuda_check(cudaMemsetAsync(workspace.get(), 0, workspace.bytes(), stream.get()), "cudaMemsetAsync");
  EXPECT_EQ(fmha_splitk_check_status(plan.get(), workspace.get(), stream.get()), FMHA_STATUS_SUCCESS);
  EXPECT_EQ(fmha_splitk_check_status(plan.get(), nullptr, stream.get()), FMHA_STATUS_SUCCESS);

  Tensor lengths = *data->kv_seqlen;
  lengths.set({0}, -1);
  copy_to_device_async(lengths, *in.kv_seqlen, stream.get());
  (void)run_once(*data, in, plan.get(), &workspace, stream);
  copy_to_device_async(*data->kv_seqlen, *in.kv_seqlen, stream.get());
  (void)run_once(*data, in, plan.get(), &workspace, stream);
  EXPECT_EQ(fmha_splitk_check_status(plan.get(), workspace.get(), stream.get()), FMHA_STATUS_SUCCESS)
      << "each run starts from a clean record: " << fmha_last_error_message();
}

// A checked plan with FMHA_FLAG_EXTERNAL_WORKSPACE owns no workspace: its
// runs and status reads need the caller's, and say so when it is missing.
TEST(CheckedModeClean, ExternalWorkspaceIsNamedWhenMissing) {
  FMHA_SKIP_WITHOUT_CUDA();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed_note(seed));
  CheckedCase c{"padded_external", FMHA_KV_PADDED, FMHA_Q_FIXED, 2, false, nullptr};
  const AttentionCase spec = spec_for(c);
  const std::unique_ptr<AttentionData> data = build_attention(spec, seed);
  const DeviceInputs in = upload_inputs(*data);
  fmha_splitk_problem checked = data->problem;
  checked.flags |= FMHA_FLAG_CHECKED | FMHA_FLAG_EXTERNAL_WORKSPACE;
  const PlanPtr plan = make_plan(checked);
  const DeviceBuffer workspace(workspace_size(plan.get()));
  const Stream stream;
  const Outputs out = run_once(*data, in, plan.get(), &workspace, stream);
  EXPECT_EQ(fmha_splitk_check_status(plan.get(), workspace.get(), stream.get()), FMHA_STATUS_SUCCESS)
      << fmha_last_error_message();
  EXPECT_EQ(fmha_splitk_check_status(plan.get(), nullptr, stream.get()), FMHA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fmha_last_error_message()).find("FMHA_FLAG_EXTERNAL_WORKSPACE"), std::string::npos)
      << fmha_last_error_message();
  const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(data->oracle_inputs()).forward();
  EXPECT_TRUE(o_matches(fmha_oracle::to_doubles(out.o), ref, attention_tolerance(spec.dtype, output_dtype(spec), ref.o)));
}

}  // namespace
}  // namespace fmha_test
