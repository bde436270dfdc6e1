// Host tensors for the fuzz targets. Each tensor is built from the shape and
// dtype a valid call would pass, then, as the input decides, left alone or
// mutated (shape, rank, dtype, device, strides, byte_offset, NULL pointers,
// aliasing). The buffer behind a tensor holds exactly the bytes its shape,
// strides and byte_offset describe, so any access outside them is an ASan
// report rather than a silent read of a neighbour.
#ifndef FMHA_SPLITK_TESTS_FUZZ_FUZZ_TENSORS_H_
#define FMHA_SPLITK_TESTS_FUZZ_FUZZ_TENSORS_H_

#include <dlpack/dlpack.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <vector>

namespace fmha_fuzz {

// Larger (but addressable) extents are not allocated; a call that would be
// given one is skipped, since the library may rightly accept it.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 22;

inline DLDataType dl_f16() { return {kDLFloat, 16, 1}; }
inline DLDataType dl_bf16() { return {kDLBfloat, 16, 1}; }
inline DLDataType dl_f32() { return {kDLFloat, 32, 1}; }
inline DLDataType dl_i32() { return {kDLInt, 32, 1}; }
inline DLDataType dl_u8() { return {kDLUInt, 8, 1}; }

// What a tensor's memory is, from the harness's point of view.
enum class Extent {
  kOwned,          // every described byte is inside `storage`
  kTooLarge,       // addressable in principle, larger than we allocate
  kUnaddressable,  // negative dim, bad rank, or an offset overflowing int64
};

struct FuzzTensor {
  DLTensor dl{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  bool null_strides = false;
  std::unique_ptr<uint8_t[]> storage;
  int64_t storage_bytes = 0;
  int64_t min_offset = 0;  // of an element, in elements, relative to dl.data + byte_offset
  Extent extent = Extent::kOwned;
};

inline int64_t element_bytes(DLDataType dtype) {
  const int64_t bits = int64_t{dtype.bits} * (dtype.lanes == 0 ? 1 : dtype.lanes);
  return bits <= 0 ? 1 : (bits + 7) / 8;
}

inline std::vector<int64_t> contiguous_strides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) {
    int64_t next = 0;
    if (__builtin_mul_overflow(strides[i], shape[i] > 1 ? shape[i] : 1, &next)) next = 1;
    strides[i - 1] = next;
  }
  return strides;
}

class Tensors {
 public:
  explicit Tensors(FuzzedDataProvider &input) : input_(input), fill_(input.ConsumeIntegral<uint32_t>()) {}

  // A tensor of `dtype` and `shape` on kDLCPU, contiguous; mutated when the
  // input says so (about one tensor in `one_in`). May return NULL.
  const DLTensor *make(DLDataType dtype, std::vector<int64_t> shape, int one_in = 8) {
    DLDevice device{kDLCPU, 0};
    std::vector<int64_t> strides = contiguous_strides(shape);
    bool null_strides = false;
    uint64_t byte_offset = 0;
    if (input_.ConsumeIntegralInRange<int>(0, one_in - 1) == 0) {
      const int mutations = input_.ConsumeIntegralInRange<int>(1, 2);
      for (int m = 0; m < mutations; ++m) {
        switch (input_.ConsumeIntegralInRange<int>(0, 10)) {
          case 0:
            return nullptr;
          case 1:
            if (!made_.empty()) return &made_[input_.ConsumeIntegralInRange<size_t>(0, made_.size() - 1)].dl;
            break;
          case 2:
            if (!shape.empty()) {
              const size_t dim = input_.ConsumeIntegralInRange<size_t>(0, shape.size() - 1);
              shape[dim] = pick_dim(shape[dim]);
              strides = contiguous_strides(shape);
            }
            break;
          case 3:
            if (!shape.empty() && input_.ConsumeBool()) {
              shape.erase(shape.begin());
            } else {
              shape.insert(shape.begin(), input_.ConsumeIntegralInRange<int64_t>(1, 2));
            }
            strides = contiguous_strides(shape);
            break;
          case 4:
            dtype.code = input_.ConsumeIntegralInRange<uint8_t>(0, 13);
            dtype.bits = input_.PickValueInArray<uint8_t>({1, 4, 8, 16, 32, 64});
            dtype.lanes = input_.PickValueInArray<uint16_t>({1, 1, 2, 0});
            break;
          case 5:
            device = input_.PickValueInArray<DLDevice>(
                {DLDevice{kDLCUDA, 0}, DLDevice{kDLCPU, 1}, DLDevice{kDLROCM, 0}, DLDevice{kDLCUDAHost, 0},
                 // Any value DLPack's enum can hold in C++ (0..15: its
                 // largest enumerator is kDLCUDAManaged = 13); beyond that,
                 // merely loading the field is undefined behaviour.
                 DLDevice{static_cast<DLDeviceType>(input_.ConsumeIntegralInRange<int>(0, 15)), -1}});
            break;
          case 6:
            if (!strides.empty()) {
              const size_t dim = input_.ConsumeIntegralInRange<size_t>(0, strides.size() - 1);
              strides[dim] = pick_stride(strides[dim]);
            }
            break;
          case 7:
            null_strides = true;
            break;
          case 8:
            // (Not huge: the library cannot tell a huge offset into memory
            // the caller does not have from a real one.)
            byte_offset = input_.PickValueInArray<uint64_t>({1, 2, 3, 4, 16, 256});
            break;
          case 9:
            if (strides.size() >= 2) {
              const size_t a = input_.ConsumeIntegralInRange<size_t>(0, strides.size() - 1);
              const size_t b = input_.ConsumeIntegralInRange<size_t>(0, strides.size() - 1);
              std::swap(strides[a], strides[b]);
            }
            break;
          default:
            // Padding between rows: a valid non-contiguous layout.
            if (strides.size() >= 2) {
              const size_t dim = input_.ConsumeIntegralInRange<size_t>(0, strides.size() - 2);
              for (size_t i = 0; i <= dim; ++i)
                if (__builtin_mul_overflow(strides[i], 2, &strides[i])) strides[i] = 0;
            }
            break;
        }
      }
    }
    made_.emplace_back();
    FuzzTensor &tensor = made_.back();
    tensor.shape = std::move(shape);
    tensor.strides = std::move(strides);
    tensor.null_strides = null_strides;
    allocate(tensor, dtype, byte_offset);
    tensor.dl.device = device;
    tensor.dl.ndim = static_cast<int32_t>(tensor.shape.size());
    tensor.dl.dtype = dtype;
    tensor.dl.shape = tensor.shape.data();
    tensor.dl.strides = null_strides ? nullptr : tensor.strides.data();
    tensor.dl.byte_offset = byte_offset;
    if (input_.ConsumeIntegralInRange<int>(0, 4 * one_in) == 0) tensor.dl.data = nullptr;
    return &tensor.dl;
  }

  // Writes `value(index...)` into an int32 tensor of rank 1 or 2 made here,
  // element by element, where the element lies in the tensor's own storage
  // (a mutated tensor may describe other shapes: those elements stay random).
  template <class Value>
  void write_i32(const DLTensor *dl, Value value) {
    FuzzTensor *tensor = find(dl);
    if (tensor == nullptr || tensor->extent != Extent::kOwned || dl->data == nullptr) return;
    if (dl->dtype.code != kDLInt || dl->dtype.bits != 32 || dl->dtype.lanes != 1) return;
    const int64_t rows = dl->ndim >= 1 ? dl->shape[0] : 1;
    const int64_t cols = dl->ndim >= 2 ? dl->shape[1] : 1;
    const std::vector<int64_t> &strides = tensor->null_strides ? contiguous_strides(tensor->shape) : tensor->strides;
    for (int64_t r = 0; r < rows && r < 4096; ++r)
      for (int64_t c = 0; c < cols && c < 4096; ++c) {
        const int64_t element = (dl->ndim >= 1 ? r * strides[0] : 0) + (dl->ndim >= 2 ? c * strides[1] : 0);
        const int64_t byte = static_cast<int64_t>(dl->byte_offset) + element * 4;
        uint8_t *base = static_cast<uint8_t *>(dl->data);
        const int64_t from_storage = (base - tensor->storage.get()) + byte;
        if (from_storage < 0 || from_storage + 4 > tensor->storage_bytes) continue;
        const int32_t v = value(r, c);
        std::memcpy(tensor->storage.get() + from_storage, &v, 4);
      }
  }

  // True when a tensor made here is larger than the harness allocates
  // (then the call is skipped).
  bool any_too_large() const {
    for (const FuzzTensor &tensor : made_)
      if (tensor.extent == Extent::kTooLarge) return true;
    return false;
  }
  // True when `dl`, made here, describes memory that cannot exist (a
  // negative dim, or an extent overflowing int64): a call that succeeds
  // with it has skipped a check.
  bool unaddressable(const DLTensor *dl) {
    const FuzzTensor *tensor = find(dl);
    return tensor != nullptr && tensor->extent == Extent::kUnaddressable && dl->data != nullptr;
  }

  // With FMHA_FUZZ_VERBOSE set (triage of a crash input), every tensor
  // made, on stderr.
  void dump(const char *name, const DLTensor *dl) {
    if (std::getenv("FMHA_FUZZ_VERBOSE") == nullptr) return;
    std::fprintf(stderr, "%s:", name);
    const FuzzTensor *tensor = find(dl);
    if (dl == nullptr || tensor == nullptr) {
      std::fprintf(stderr, " %s\n", dl == nullptr ? "NULL" : "(not made here)");
      return;
    }
    std::fprintf(stderr, " dtype %d/%d/%d device %d:%d offset %llu data %s extent %d storage %lld shape",
                 dl->dtype.code, dl->dtype.bits, dl->dtype.lanes, static_cast<int>(dl->device.device_type),
                 dl->device.device_id, static_cast<unsigned long long>(dl->byte_offset), dl->data ? "set" : "NULL",
                 static_cast<int>(tensor->extent), static_cast<long long>(tensor->storage_bytes));
    for (int64_t extent : tensor->shape) std::fprintf(stderr, " %lld", static_cast<long long>(extent));
    std::fprintf(stderr, " strides");
    if (tensor->null_strides) std::fprintf(stderr, " NULL");
    else for (int64_t stride : tensor->strides) std::fprintf(stderr, " %lld", static_cast<long long>(stride));
    std::fprintf(stderr, "\n");
  }

 private:
  FuzzTensor *find(const DLTensor *dl) {
    for (FuzzTensor &tensor : made_)
      if (&tensor.dl == dl) return &tensor;
    return nullptr;
  }

  int64_t pick_dim(int64_t dim) {
    switch (input_.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: return 0;
      case 1: return 1;
      case 2: return static_cast<int64_t>(static_cast<uint64_t>(dim) + 1);
      case 3: return static_cast<int64_t>(static_cast<uint64_t>(dim) - 1);
      case 4: return -1;
      case 5: return std::numeric_limits<int64_t>::max() / 2;
      case 6: return int64_t{1} << 31;
      default: return input_.ConsumeIntegralInRange<int64_t>(0, 80);
    }
  }

  // Wrapping arithmetic: a second mutation may start from an extreme stride.
  int64_t pick_stride(int64_t stride) {
    const uint64_t bits = static_cast<uint64_t>(stride);
    switch (input_.ConsumeIntegralInRange<int>(0, 7)) {
      case 0: return 0;
      case 1: return static_cast<int64_t>(0 - bits);
      case 2: return static_cast<int64_t>(bits * 2);
      case 3: return static_cast<int64_t>(bits + 1);
      case 4: return int64_t{1} << 62;
      case 5: return std::numeric_limits<int64_t>::min();
      case 6: return int64_t{1} << 33;
      default: return input_.ConsumeIntegralInRange<int64_t>(-100, 100);
    }
  }

  // Sizes and allocates the buffer so that every element the shape and
  // strides reach, after byte_offset, lies inside it.
  void allocate(FuzzTensor &tensor, DLDataType dtype, uint64_t byte_offset) {
    const int64_t elem = element_bytes(dtype);
    const std::vector<int64_t> strides = tensor.null_strides ? contiguous_strides(tensor.shape) : tensor.strides;
    int64_t lo = 0, hi = 0;
    bool empty = false, negative = false, overflow = false;
    for (size_t i = 0; i < tensor.shape.size(); ++i) {
      if (tensor.shape[i] < 0) negative = true;
      if (tensor.shape[i] <= 0) empty = true;
    }
    // An empty tensor has no extent, whatever its strides.
    for (size_t i = 0; i < tensor.shape.size() && !empty && !overflow; ++i) {
      int64_t reach = 0;
      if (__builtin_mul_overflow(tensor.shape[i] - 1, strides[i], &reach)) {
        overflow = true;
        break;
      }
      if (__builtin_add_overflow(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi)) overflow = true;
    }
    int64_t bytes = 0;
    if (!overflow && !empty &&
        (__builtin_sub_overflow(hi, lo, &bytes) || __builtin_add_overflow(bytes, 1, &bytes) ||
         __builtin_mul_overflow(bytes, elem, &bytes)))
      overflow = true;
    if (overflow || negative) {
      tensor.extent = Extent::kUnaddressable;
    } else if (bytes > kMaxTensorBytes - static_cast<int64_t>(byte_offset)) {
      tensor.extent = Extent::kTooLarge;
    }
    if (tensor.extent != Extent::kOwned || empty) {
      // Something non-NULL to point at; nothing may be read through it.
      tensor.storage_bytes = 1;
      tensor.storage.reset(new uint8_t[1]);
      tensor.dl.data = tensor.storage.get();
      return;
    }
    tensor.storage_bytes = bytes + static_cast<int64_t>(byte_offset);
    tensor.storage.reset(new uint8_t[static_cast<size_t>(tensor.storage_bytes)]);
    // Small values (fp16 / bf16 / fp32 around +-1), with an occasional byte
    // pattern of the input's choosing (NaN, Inf, denormals).
    const uint8_t odd = static_cast<uint8_t>(fill_());
    for (int64_t i = 0; i < tensor.storage_bytes; ++i) {
      const uint32_t r = fill_();
      tensor.storage[i] = (r & 0xff) < 4 ? odd : static_cast<uint8_t>((i & 1) ? 0x3a + (r >> 29) : r >> 8);
    }
    // data + byte_offset + lo * elem is the first byte of the buffer.
    tensor.min_offset = lo;
    tensor.dl.data = tensor.storage.get() - lo * elem;
  }

  FuzzedDataProvider &input_;
  std::minstd_rand fill_;
  // A deque keeps the DLTensor of each element in place as more are made.
  std::deque<FuzzTensor> made_;
};

}  // namespace fmha_fuzz

#endif  // FMHA_SPLITK_TESTS_FUZZ_FUZZ_TENSORS_H_
