// Host memory and wall-clock timing, for the CPU backend (which computes
// synchronously inside fmha_splitk_run).
#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>

#include "device.h"
#include "random_bf16.h"

namespace fmha_cli {
namespace {

constexpr std::align_val_t kAlignment{256};

class HostDevice final : public Device {
 public:
  DLDevice dl_device() const override { return DLDevice{kDLCPU, 0}; }
  void *stream() override { return nullptr; }
  void *allocate(size_t bytes) override { return ::operator new(bytes, kAlignment); }
  void release(void *memory) noexcept override {
    if (memory) ::operator delete(memory, kAlignment);
  }
  // memcpy of 0 bytes from or to NULL (an empty buffer) is still undefined.
  void copy_to_device(void *device_dst, const void *host_src, size_t bytes) override {
    if (bytes > 0) std::memcpy(device_dst, host_src, bytes);
  }
  void copy_to_host(void *host_dst, const void *device_src, size_t bytes) override {
    if (bytes > 0) std::memcpy(host_dst, device_src, bytes);
  }
  void fill_bytes(void *device_dst, uint8_t value, size_t bytes) override {
    if (bytes > 0) std::memset(device_dst, value, bytes);
  }
  double time_ms(const std::function<void()> &enqueue) override {
    const auto start = std::chrono::steady_clock::now();
    enqueue();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  void synchronize() override {}
  void copy_within(void *device_dst, const void *device_src, size_t bytes) override {
    if (bytes > 0) std::memcpy(device_dst, device_src, bytes);
  }
  void fill_random_bf16(void *device_dst, size_t count, uint64_t seed) override {
    auto *values = static_cast<uint16_t *>(device_dst);
    for (size_t i = 0; i < count; ++i) values[i] = random_bf16(seed, i);
  }
  void fill_random_words(void *device_dst, size_t count, uint64_t seed, const WordPattern &pattern) override {
    auto *words = static_cast<uint32_t *>(device_dst);
    for (size_t i = 0; i < count; ++i) words[i] = random_word(seed, i, pattern);
  }
  void read_words(const void *device_src, size_t bytes) override {
    // As the GPU kernel, in 8-byte halves: the fold goes to a volatile, so
    // the compiler must keep every load.
    const auto *words = static_cast<const uint64_t *>(device_src);
    uint64_t fold = 0;
    for (size_t i = 0; i < bytes / sizeof(uint64_t); ++i) fold ^= words[i];
    sink_ = fold;
  }
  std::unique_ptr<DeviceGraph> capture(const std::function<void()> &) override { return nullptr; }

 private:
  volatile uint64_t sink_ = 0;
};

}  // namespace

std::unique_ptr<Device> make_host_device() { return std::make_unique<HostDevice>(); }

}  // namespace fmha_cli
