#include "decode_problem.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "half.h"
#include "status.h"

namespace fmha_cli {
namespace {

constexpr int64_t kElementBytes = 2;  // fp16 and bf16

float to_float(fmha_dtype dtype, uint16_t bits) {
  return dtype == FMHA_DTYPE_BF16 ? bf16_to_float(bits) : f16_to_float(bits);
}

// SplitMix64: fast, and the same stream for a seed on every platform.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  // Uniform in [-1, 1), from the top 24 bits (exact in float).
  float uniform() {
    state_ += 0x9e3779b97f4a7c15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * 0x1p-23f - 1.0f;
  }

 private:
  uint64_t state_;
};

std::vector<uint16_t> random_values(int64_t count, fmha_dtype dtype, Random &random) {
  std::vector<uint16_t> values(static_cast<size_t>(count));
  for (uint16_t &value : values) {
    const float x = random.uniform();
    value = dtype == FMHA_DTYPE_BF16 ? float_to_bf16(x) : float_to_f16(x);
  }
  return values;
}

// Copies sequence `from` of a [B, ...] array whose sequences hold `per_sequence`
// elements into slot `to` of another.
void copy_sequence(const std::vector<uint16_t> &src, int64_t from, std::vector<uint16_t> &dst, int64_t to,
                   int64_t per_sequence) {
  std::memcpy(dst.data() + to * per_sequence, src.data() + from * per_sequence,
              static_cast<size_t>(per_sequence * kElementBytes));
}

}  // namespace

DLDataType dl_dtype(fmha_dtype dtype) {
  switch (dtype) {
    case FMHA_DTYPE_BF16:
      return DLDataType{kDLBfloat, 16, 1};
    case FMHA_DTYPE_F32:
      return DLDataType{kDLFloat, 32, 1};
    default:
      return DLDataType{kDLFloat, 16, 1};
  }
}

DenseTensor::DenseTensor(void *data, DLDevice device, fmha_dtype dtype, std::vector<int64_t> shape)
    : DenseTensor(data, device, dl_dtype(dtype), std::move(shape)) {}

DenseTensor::DenseTensor(void *data, DLDevice device, DLDataType dtype, std::vector<int64_t> shape)
    : shape_(std::move(shape)), strides_(shape_.size()) {
  int64_t stride = 1;
  for (size_t d = shape_.size(); d-- > 0;) {
    strides_[d] = stride;
    stride *= shape_[d];
  }
  dl_.data = data;
  dl_.device = device;
  dl_.ndim = static_cast<int32_t>(shape_.size());
  dl_.dtype = dtype;
  dl_.shape = shape_.data();
  dl_.strides = strides_.data();
}

fmha_splitk_problem make_problem(const DecodeShape &shape, int32_t backend, int32_t split_k) {
  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  problem.backend = backend;
  problem.batch = shape.batch;
  problem.max_q_seqlen = shape.q_len;
  problem.max_kv_seqlen = shape.kv_len;
  problem.groups = 1;
  problem.heads_q = shape.heads_q;
  problem.heads_kv = shape.heads_kv;
  problem.head_dim_qk = shape.head_dim;
  problem.q_layout = FMHA_Q_FIXED;
  problem.kv_layout = FMHA_KV_DENSE;
  problem.q_dtype = shape.dtype;
  problem.kv_dtype = shape.dtype;
  problem.o_dtype = shape.dtype;
  problem.split_k = split_k;
  return problem;
}

HostInputs random_inputs(const DecodeShape &shape, uint64_t seed) {
  Random random(seed);
  HostInputs inputs;
  inputs.q = random_values(shape.q_elements(), shape.dtype, random);
  inputs.k = random_values(shape.kv_elements(), shape.dtype, random);
  inputs.v = random_values(shape.kv_elements(), shape.dtype, random);
  return inputs;
}

double relative_error_against_cpu(const DecodeShape &shape, const HostInputs &inputs, const std::vector<uint16_t> &o,
                                  const std::vector<int64_t> &sequences) {
  DecodeShape sample = shape;
  sample.batch = static_cast<int64_t>(sequences.size());
  const int64_t q_per_sequence = shape.q_len * shape.heads_q * shape.head_dim;
  const int64_t kv_per_sequence = shape.kv_len * shape.heads_kv * shape.head_dim;
  HostInputs sampled{std::vector<uint16_t>(static_cast<size_t>(sample.q_elements())),
                     std::vector<uint16_t>(static_cast<size_t>(sample.kv_elements())),
                     std::vector<uint16_t>(static_cast<size_t>(sample.kv_elements()))};
  for (int64_t slot = 0; slot < sample.batch; ++slot) {
    const int64_t b = sequences[static_cast<size_t>(slot)];
    copy_sequence(inputs.q, b, sampled.q, slot, q_per_sequence);
    copy_sequence(inputs.k, b, sampled.k, slot, kv_per_sequence);
    copy_sequence(inputs.v, b, sampled.v, slot, kv_per_sequence);
  }

  fmha_splitk_problem problem = make_problem(sample, FMHA_BACKEND_CPU, 1);
  problem.o_dtype = FMHA_DTYPE_F32;  // the reference keeps fp32, so only the tested output is rounded
  fmha_splitk_plan_t raw_plan = nullptr;
  check_status(fmha_splitk_create_plan(&problem, &raw_plan), "reference plan on the CPU backend");
  const std::unique_ptr<fmha_splitk_plan_s, void (*)(fmha_splitk_plan_t)> plan(raw_plan, fmha_splitk_destroy_plan);

  std::vector<float> reference(static_cast<size_t>(sample.q_elements()));
  const DLDevice host{kDLCPU, 0};
  const DenseTensor q(sampled.q.data(), host, shape.dtype, {sample.batch, shape.q_len, shape.heads_q, shape.head_dim});
  const DenseTensor k(sampled.k.data(), host, shape.dtype,
                      {sample.batch, shape.kv_len, shape.heads_kv, shape.head_dim});
  const DenseTensor v(sampled.v.data(), host, shape.dtype,
                      {sample.batch, shape.kv_len, shape.heads_kv, shape.head_dim});
  const DenseTensor out(reference.data(), host, FMHA_DTYPE_F32,
                        {sample.batch, shape.q_len, shape.heads_q, shape.head_dim});
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = q.dl();
  args.k = k.dl();
  args.v = v.dl();
  args.o = out.dl();
  check_status(fmha_splitk_run(plan.get(), &args), "reference run on the CPU backend");

  double error_squared = 0.0;
  double reference_squared = 0.0;
  for (int64_t slot = 0; slot < sample.batch; ++slot) {
    const int64_t b = sequences[static_cast<size_t>(slot)];
    for (int64_t i = 0; i < q_per_sequence; ++i) {
      const double expected = reference[static_cast<size_t>(slot * q_per_sequence + i)];
      const double got = to_float(shape.dtype, o[static_cast<size_t>(b * q_per_sequence + i)]);
      error_squared += (got - expected) * (got - expected);
      reference_squared += expected * expected;
    }
  }
  return std::sqrt(error_squared / reference_squared);
}

double error_limit(fmha_dtype dtype) { return dtype == FMHA_DTYPE_BF16 ? 2e-3 : 1e-3; }

}  // namespace fmha_cli
