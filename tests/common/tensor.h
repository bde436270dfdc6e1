// Host tensors for the tests: an owning buffer described by a DLTensor, with
// fp16/bf16 conversions written from the formats' definitions (the tests
// share no code with the library).
#ifndef FMHA_SPLITK_TESTS_COMMON_TENSOR_H_
#define FMHA_SPLITK_TESTS_COMMON_TENSOR_H_

#include <dlpack/dlpack.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace fmha_test {

inline uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) ? 1u : 0u;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else v = std::ldexp(static_cast<float>(mant + 1024), exp - 25);
  return sign ? -v : v;
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

enum class Dtype { f16, bf16, f32, f64, i32, u8 };

inline DLDataType dl_dtype(Dtype t) {
  switch (t) {
    case Dtype::f16: return {kDLFloat, 16, 1};
    case Dtype::bf16: return {kDLBfloat, 16, 1};
    case Dtype::f32: return {kDLFloat, 32, 1};
    case Dtype::f64: return {kDLFloat, 64, 1};
    case Dtype::i32: return {kDLInt, 32, 1};
    case Dtype::u8: return {kDLUInt, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

inline size_t dtype_bytes(Dtype t) {
  switch (t) {
    case Dtype::f16: case Dtype::bf16: return 2;
    case Dtype::f32: case Dtype::i32: return 4;
    case Dtype::f64: return 8;
    case Dtype::u8: return 1;
  }
  return 4;
}

// A host tensor: contiguous by default, or with caller-given strides over a
// buffer large enough for them (to test padded / transposed layouts).
class Tensor {
 public:
  Tensor() = default;
  Tensor(Dtype dtype, std::vector<int64_t> shape) : Tensor(dtype, shape, contiguous_strides(shape)) {}
  Tensor(Dtype dtype, std::vector<int64_t> shape, std::vector<int64_t> strides)
      : dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)) {
    int64_t extent = 1;  // elements spanned
    for (size_t i = 0; i < shape_.size(); ++i)
      if (shape_[i] > 0) extent += (shape_[i] - 1) * strides_[i];
    for (int64_t s : shape_) if (s == 0) extent = 0;
    storage_.assign(static_cast<size_t>(std::max<int64_t>(extent, 1)) * dtype_bytes(dtype_) + 64, 0);
    refresh();
  }
  Tensor(const Tensor &o) : dtype_(o.dtype_), shape_(o.shape_), strides_(o.strides_), storage_(o.storage_) { refresh(); }
  Tensor &operator=(const Tensor &o) {
    dtype_ = o.dtype_; shape_ = o.shape_; strides_ = o.strides_; storage_ = o.storage_; refresh();
    return *this;
  }

  static std::vector<int64_t> contiguous_strides(const std::vector<int64_t> &shape) {
    std::vector<int64_t> s(shape.size(), 1);
    for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * std::max<int64_t>(shape[i + 1], 1);
    return s;
  }

  const DLTensor *dl() const { return &dl_; }
  DLTensor *dl_mutable() { return &dl_; }
  Dtype dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  const std::vector<int64_t> &strides() const { return strides_; }
  int64_t numel() const { int64_t n = 1; for (int64_t s : shape_) n *= s; return n; }
  void *data() { return storage_.data() + 32; }
  const void *data() const { return storage_.data() + 32; }
  size_t bytes() const { return storage_.size(); }

  int64_t offset(const std::vector<int64_t> &idx) const {
    int64_t off = 0;
    for (size_t i = 0; i < idx.size(); ++i) off += idx[i] * strides_[i];
    return off;
  }
  // Element access by flat element offset, converting to/from double.
  double get_at(int64_t off) const {
    const uint8_t *p = static_cast<const uint8_t *>(data()) + off * static_cast<int64_t>(dtype_bytes(dtype_));
    switch (dtype_) {
      case Dtype::f16: { uint16_t h; std::memcpy(&h, p, 2); return half_bits_to_float(h); }
      case Dtype::bf16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_bits_to_float(h); }
      case Dtype::f32: { float f; std::memcpy(&f, p, 4); return f; }
      case Dtype::f64: { double d; std::memcpy(&d, p, 8); return d; }
      case Dtype::i32: { int32_t i; std::memcpy(&i, p, 4); return i; }
      case Dtype::u8: return *p;
    }
    return 0;
  }
  void set_at(int64_t off, double v) {
    uint8_t *p = static_cast<uint8_t *>(data()) + off * static_cast<int64_t>(dtype_bytes(dtype_));
    switch (dtype_) {
      case Dtype::f16: { uint16_t h = float_to_half_bits(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case Dtype::bf16: { uint16_t h = float_to_bf16_bits(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
      case Dtype::f32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
      case Dtype::f64: std::memcpy(p, &v, 8); break;
      case Dtype::i32: { int32_t i = static_cast<int32_t>(v); std::memcpy(p, &i, 4); break; }
      case Dtype::u8: *p = static_cast<uint8_t>(v); break;
    }
  }
  double get(const std::vector<int64_t> &idx) const { return get_at(offset(idx)); }
  void set(const std::vector<int64_t> &idx, double v) { set_at(offset(idx), v); }

  // Calls f(index) for every logical element, row-major.
  template <class F> void for_each_index(F &&f) const {
    std::vector<int64_t> idx(shape_.size(), 0);
    if (numel() == 0) return;
    for (;;) {
      f(idx);
      int d = static_cast<int>(shape_.size()) - 1;
      while (d >= 0 && ++idx[d] == shape_[d]) idx[d--] = 0;
      if (d < 0) return;
    }
  }
  void fill_uniform(std::mt19937_64 &rng, double lo, double hi) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for_each_index([&](const std::vector<int64_t> &i) { set(i, dist(rng)); });
  }
  void fill_normal(std::mt19937_64 &rng, double mean = 0.0, double stddev = 1.0) {
    std::normal_distribution<double> dist(mean, stddev);
    for_each_index([&](const std::vector<int64_t> &i) { set(i, dist(rng)); });
  }
  // Poison every byte of the buffer (NaN for float types: 0xff bytes).
  void poison() { std::memset(storage_.data(), 0xff, storage_.size()); }
  void fill_int(const std::vector<int32_t> &values) {
    int64_t k = 0;
    for_each_index([&](const std::vector<int64_t> &i) { set(i, values[static_cast<size_t>(k++)]); });
  }

 private:
  void refresh() {
    dl_ = DLTensor{};
    dl_.data = data();
    dl_.device = {kDLCPU, 0};
    dl_.ndim = static_cast<int32_t>(shape_.size());
    dl_.dtype = dl_dtype(dtype_);
    dl_.shape = shape_.data();
    dl_.strides = strides_.data();
    dl_.byte_offset = 0;
  }
  Dtype dtype_ = Dtype::f32;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  std::vector<uint8_t> storage_;
  DLTensor dl_{};
};

}  // namespace fmha_test

#endif  // FMHA_SPLITK_TESTS_COMMON_TENSOR_H_
