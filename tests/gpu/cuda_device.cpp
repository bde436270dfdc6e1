// The GPU suite's device: CUDA device 0, memory from cudaMalloc, one
// non-blocking stream (as inference servers use), CUDA backend. Without a
// usable device (no driver, no GPU, or one older than sm_80) available() is
// false and every test skips, so the suite can be built and listed on CI.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/device.h"
#include "gpu/cuda_util.h"

namespace fmha_test {
namespace {

class CudaDevice final : public Device {
 public:
  CudaDevice() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      return;
    }
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess || major < 8) {
      (void)cudaGetLastError();
      return;
    }
    cuda_check(cudaSetDevice(0), "cudaSetDevice(0)");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    available_ = true;
  }
  // The stream is left to process exit: destroying it from a static
  // destructor races the runtime's own teardown.

  const char *name() const override { return "cuda"; }
  int32_t backend() const override { return FMHA_BACKEND_CUDA; }
  DLDevice dl_device() const override { return {kDLCUDA, 0}; }
  bool available() const override { return available_; }

  DeviceTensor upload(const Tensor &host) override {
    void *p = alloc_raw(host.bytes());
    // Tensor::data() sits 32 bytes into its buffer; the whole buffer (with
    // its poison) travels, so writes outside the elements stay visible.
    cuda_check(cudaMemcpyAsync(p, static_cast<const uint8_t *>(host.data()) - 32, host.bytes(),
                               cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync (upload)");
    synchronize();
    return DeviceTensor(p, [this](void *q) { free_raw(q); }, host, dl_device());
  }

  void download(const DeviceTensor &dev, Tensor &host) override {
    cuda_check(cudaMemcpyAsync(static_cast<uint8_t *>(host.data()) - 32, dev.base(), host.bytes(),
                               cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync (download)");
    synchronize();
  }

  void *alloc_raw(size_t bytes) override {
    void *p = nullptr;
    cuda_check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return p;
  }

  // Called from deleters, which must not throw: a failure is dropped here
  // and shows up in the next checked call.
  void free_raw(void *p) override { (void)cudaFree(p); }

  void *stream() override { return stream_; }

  void synchronize() override { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  bool available_ = false;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

Device &device_under_test() {
  static CudaDevice device;
  return device;
}

}  // namespace fmha_test
