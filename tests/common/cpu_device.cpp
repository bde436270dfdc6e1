// The CPU suite's device: host memory, CPU backend.
#include <cstdlib>
#include <cstring>

#include "common/device.h"

namespace fmha_test {
namespace {

class CpuDevice final : public Device {
 public:
  const char *name() const override { return "cpu"; }
  int32_t backend() const override { return FMHA_BACKEND_CPU; }
  DLDevice dl_device() const override { return {kDLCPU, 0}; }
  bool available() const override { return true; }
  DeviceTensor upload(const Tensor &host) override {
    void *p = std::aligned_alloc(256, round_up(host.bytes()));
    std::memcpy(p, static_cast<const uint8_t *>(host.data()) - 32, host.bytes());
    return DeviceTensor(p, [](void *q) { std::free(q); }, host, dl_device());
  }
  void download(const DeviceTensor &dev, Tensor &host) override {
    std::memcpy(static_cast<uint8_t *>(host.data()) - 32, dev.base(), host.bytes());
  }
  void *alloc_raw(size_t bytes) override { return std::aligned_alloc(256, round_up(bytes == 0 ? 1 : bytes)); }
  void free_raw(void *p) override { std::free(p); }
  void *stream() override { return nullptr; }
  void synchronize() override {}

 private:
  static size_t round_up(size_t n) { return (n + 255) / 256 * 256; }
};

}  // namespace

Device &device_under_test() {
  static CpuDevice device;
  return device;
}

}  // namespace fmha_test
