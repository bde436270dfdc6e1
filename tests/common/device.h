// Where a suite's tensors live. The feature suites are written once against
// this interface and compiled into both the CPU suite (host memory) and the
// GPU suite (device memory, tests/gpu/cuda_device.cpp), so both backends are
// checked against the same oracle with the same matrix.
#ifndef FMHA_SPLITK_TESTS_COMMON_DEVICE_H_
#define FMHA_SPLITK_TESTS_COMMON_DEVICE_H_

#include <fmha_splitk/fmha_splitk.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/tensor.h"

namespace fmha_test {

// A tensor on the device under test with the same dtype, shape and strides
// as the host tensor it came from.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(void *data, std::function<void(void *)> release, const Tensor &like, DLDevice device)
      : data_(data, std::move(release)), dtype_(like.dtype()), shape_(like.shape()), strides_(like.strides()),
        bytes_(like.bytes()) {
    dl_ = DLTensor{};
    dl_.data = static_cast<uint8_t *>(data_.get()) + 32;  // same 32-byte lead as Tensor
    dl_.device = device;
    dl_.ndim = static_cast<int32_t>(shape_.size());
    dl_.dtype = dl_dtype(dtype_);
    dl_.shape = shape_.data();
    dl_.strides = strides_.data();
  }
  DeviceTensor(DeviceTensor &&) = default;
  DeviceTensor &operator=(DeviceTensor &&) = default;
  const DLTensor *dl() const { return data_ ? &dl_ : nullptr; }
  DLTensor *dl_mutable() { return &dl_; }
  void *base() const { return data_.get(); }  // start of the whole buffer
  size_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<void> data_;
  Dtype dtype_ = Dtype::f32;
  std::vector<int64_t> shape_, strides_;
  size_t bytes_ = 0;
  DLTensor dl_{};
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const char *name() const = 0;
  virtual int32_t backend() const = 0;  // fmha_backend_kind to request
  virtual DLDevice dl_device() const = 0;
  // False when the device is absent (the GPU suite then skips cleanly).
  virtual bool available() const = 0;
  // Copies the whole buffer of `host` (poison included) to the device.
  virtual DeviceTensor upload(const Tensor &host) = 0;
  // Copies the whole buffer back into `host` (same dtype/shape/strides).
  virtual void download(const DeviceTensor &dev, Tensor &host) = 0;
  // Raw device memory (e.g. workspaces); freed with free_raw.
  virtual void *alloc_raw(size_t bytes) = 0;
  virtual void free_raw(void *p) = 0;
  virtual void *stream() = 0;
  virtual void synchronize() = 0;
};

// Defined once per test executable (cpu_device.cpp, cuda_device.cpp).
Device &device_under_test();

}  // namespace fmha_test

#endif  // FMHA_SPLITK_TESTS_COMMON_DEVICE_H_
