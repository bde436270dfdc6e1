#include "bench_inputs.h"

#include "random_bf16.h"

namespace fmha_cli {
namespace {

size_t bf16_bytes(const std::vector<int64_t> &shape) {
  int64_t elements = 1;
  for (const int64_t extent : shape) elements *= extent;
  return static_cast<size_t>(elements) * sizeof(uint16_t);
}

// Packed K/V words: only valid encodings, values of order 1. int4: per group
// an fp16 scale in [1/16, 1/8) and shift in (-1, -1/2] (random mantissas),
// then any nibbles. fp8: each code with its top exponent bit clear, so
// |x| <= 1.875 and never E4M3FN's NaN (S.1111.111); for E4M3FNUZ also its
// lowest mantissa bit set, so never its NaN (0x80).
WordPattern kv_words(const BenchCase &c) {
  const KvQuant &quant = c.spec.quant;
  if (quant.kv_quant == FMHA_KV_QUANT_INT4) {
    return WordPattern{static_cast<unsigned long long>(quant.groups + c.spec.head_dim / 8),
                       static_cast<unsigned long long>(quant.groups),
                       0x03ff03ffu,
                       0xb8002c00u,
                       0xffffffffu,
                       0};
  }
  return WordPattern{1, 0, 0, 0, 0xbfbfbfbfu, quant.fp8_format == FMHA_FP8_E4M3FNUZ ? 0x01010101u : 0u};
}

// fp8 scale words, random but valid and unequal, so that a scale applied to
// the wrong row or head shows in the check: float32 in [1/2, 1); fp16x2 a
// scale in [1/2, 1) and a shift of +-[1/8, 1/4).
WordPattern scale_words(const BenchCase &c) {
  if (c.spec.quant.scale_kind == FMHA_KV_SCALE_F32) return WordPattern{1, 0, 0, 0, 0x007fffffu, 0x3f000000u};
  return WordPattern{1, 0, 0, 0, 0x83ff03ffu, 0x30003800u};
}

}  // namespace

std::vector<int64_t> q_shape(const BenchCase &c) {
  return {c.spec.batch, c.spec.q_len, c.spec.heads_q, c.spec.head_dim};
}

std::vector<int64_t> kv_row_dims(const BenchCase &c) {
  if (c.layout == FMHA_KV_PAGED) return {c.kv_rows()};
  return {c.spec.batch, c.max_kv_len};
}

std::vector<int64_t> kv_dims(const BenchCase &c, std::vector<int64_t> rows) {
  const int64_t element_bytes = c.spec.quant.kv_quant == FMHA_KV_QUANT_INT4 ? 4 : c.spec.quant.fp8() ? 1 : 2;
  rows.push_back(c.spec.heads_kv);
  rows.push_back(c.kv_head_bytes() / element_bytes);
  return rows;
}

DLDataType kv_element(const BenchCase &c) {
  if (c.spec.quant.kv_quant == FMHA_KV_QUANT_INT4) return DLDataType{kDLInt, 32, 1};
  if (c.spec.quant.fp8()) return DLDataType{kDLUInt, 8, 1};
  return dl_dtype(FMHA_DTYPE_BF16);
}

std::vector<int64_t> scale_dims(const BenchCase &c, std::vector<int64_t> rows) {
  switch (c.spec.quant.scale_granularity) {
    case FMHA_SCALE_PER_ROW:
      rows.push_back(c.spec.heads_kv);
      return rows;
    case FMHA_SCALE_PER_HEAD:
      return {c.spec.heads_kv};
    default:
      return {1};
  }
}

DLDataType scale_element(const BenchCase &c) {
  return c.spec.quant.scale_kind == FMHA_KV_SCALE_F32 ? DLDataType{kDLFloat, 32, 1} : DLDataType{kDLInt, 32, 1};
}

Metadata::Metadata(Device &device, const BenchCase &c)
    : kv_seqlen_(device, c.layout == FMHA_KV_DENSE ? 0 : c.kv_lengths.size() * sizeof(int32_t)),
      table_(c.layout == FMHA_KV_PAGED ? c.block_table(random_bits(kBenchSeed, 2)) : std::vector<int32_t>()),
      block_table_(device, table_.size() * sizeof(int32_t)) {
  const DLDataType int32{kDLInt, 32, 1};
  if (kv_seqlen_.data()) {
    device.copy_to_device(kv_seqlen_.data(), c.kv_lengths.data(), kv_seqlen_.bytes());
    kv_seqlen_tensor_ =
        std::make_unique<DenseTensor>(kv_seqlen_.data(), device.dl_device(), int32, std::vector<int64_t>{c.spec.batch});
  }
  if (block_table_.data()) {
    device.copy_to_device(block_table_.data(), table_.data(), block_table_.bytes());
    block_table_tensor_ = std::make_unique<DenseTensor>(block_table_.data(), device.dl_device(), int32,
                                                        std::vector<int64_t>{c.spec.batch, c.pages_per_seq});
  }
}

InputSet::InputSet(Device &device, const BenchCase &c, int64_t index, const Metadata &metadata,
                   const DeviceBuffer *workspace)
    : q_(device, bf16_bytes(q_shape(c))),
      k_(device, static_cast<size_t>(c.kv_rows() * c.spec.heads_kv * c.kv_head_bytes())),
      v_(device, k_.bytes()),
      o_(device, bf16_bytes(q_shape(c))),
      k_scale_(device, static_cast<size_t>(c.scale_elements() * c.scale_element_bytes())),
      v_scale_(device, k_scale_.bytes()),
      q_tensor_(q_.data(), device.dl_device(), FMHA_DTYPE_BF16, q_shape(c)),
      k_tensor_(k_.data(), device.dl_device(), kv_element(c), kv_dims(c, kv_row_dims(c))),
      v_tensor_(v_.data(), device.dl_device(), kv_element(c), kv_dims(c, kv_row_dims(c))),
      o_tensor_(o_.data(), device.dl_device(), FMHA_DTYPE_BF16, q_shape(c)),
      k_scale_tensor_(k_scale_.data(), device.dl_device(), scale_element(c), scale_dims(c, kv_row_dims(c))),
      v_scale_tensor_(v_scale_.data(), device.dl_device(), scale_element(c), scale_dims(c, kv_row_dims(c))) {
  const auto seed = [&](uint64_t tensor) {
    return random_bits(kBenchSeed, 16 + 8 * static_cast<uint64_t>(index) + tensor);
  };
  device.fill_random_bf16(q_.data(), q_.bytes() / 2, seed(0));
  if (c.spec.quant.kv_quant == FMHA_KV_QUANT_NONE) {
    device.fill_random_bf16(k_.data(), k_.bytes() / 2, seed(1));
    device.fill_random_bf16(v_.data(), v_.bytes() / 2, seed(2));
  } else {
    device.fill_random_words(k_.data(), k_.bytes() / 4, seed(1), kv_words(c));
    device.fill_random_words(v_.data(), v_.bytes() / 4, seed(2), kv_words(c));
  }
  if (c.spec.quant.fp8()) {
    device.fill_random_words(k_scale_.data(), k_scale_.bytes() / 4, seed(3), scale_words(c));
    device.fill_random_words(v_scale_.data(), v_scale_.bytes() / 4, seed(4), scale_words(c));
    args_.k_scale = k_scale_tensor_.dl();
    args_.v_scale = v_scale_tensor_.dl();
  }
  device.fill_bytes(o_.data(), 0xff, o_.bytes());
  args_.q = q_tensor_.dl();
  args_.k = k_tensor_.dl();
  args_.v = v_tensor_.dl();
  args_.o = o_tensor_.dl();
  args_.kv_seqlen = metadata.kv_seqlen();
  args_.block_table = metadata.block_table();
  args_.workspace = workspace != nullptr ? workspace->data() : nullptr;
  args_.workspace_size = workspace != nullptr ? workspace->bytes() : 0;
  args_.stream = device.stream();
}

}  // namespace fmha_cli
