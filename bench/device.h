// Memory, stream and timer of the device a run uses. The CLI links no GPU
// runtime (the library's core is GPU-free, and so is this program): host
// memory serves the CPU backend, and CUDA memory comes from the driver,
// loaded at run time.
#ifndef FMHA_SPLITK_BENCH_DEVICE_H_
#define FMHA_SPLITK_BENCH_DEVICE_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "random_bf16.h"

namespace fmha_cli {

// Work captured once and replayed whole: a CUDA graph.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Enqueues the captured work on the stream it was captured from.
  virtual void replay() = 0;
};

// Every method throws std::runtime_error (with the driver's message) on
// failure.
class Device {
 public:
  virtual ~Device() = default;
  // Where tensors in this memory live, for their DLTensor::device.
  virtual DLDevice dl_device() const = 0;
  // The stream runs are launched on (NULL on the host).
  virtual void *stream() = 0;
  // At least 256-byte aligned, as workspaces must be.
  virtual void *allocate(size_t bytes) = 0;
  virtual void release(void *memory) noexcept = 0;
  virtual void copy_to_device(void *device_dst, const void *host_src, size_t bytes) = 0;
  virtual void copy_to_host(void *host_dst, const void *device_src, size_t bytes) = 0;
  virtual void fill_bytes(void *device_dst, uint8_t value, size_t bytes) = 0;
  // Milliseconds that the work `enqueue` puts on the stream takes; returns
  // when that work is done.
  virtual double time_ms(const std::function<void()> &enqueue) = 0;

  // What `fmha-splitk bench` needs besides.
  // Returns when the work on the stream is done.
  virtual void synchronize() = 0;
  // Enqueues a copy between two buffers of this device.
  virtual void copy_within(void *device_dst, const void *device_src, size_t bytes) = 0;
  // Enqueues the writes of `count` bf16 values ~N(0, 1), value i being
  // random_bf16(seed, i) (random_bf16.h): made where the memory is, so that
  // multi-GB inputs never cross the bus.
  virtual void fill_random_bf16(void *device_dst, size_t count, uint64_t seed) = 0;
  // Enqueues the writes of `count` 32-bit words, word i being
  // random_word(seed, i, pattern) (random_bf16.h), made where the memory is.
  virtual void fill_random_words(void *device_dst, size_t count, uint64_t seed, const WordPattern &pattern) = 0;
  // Enqueues a pass that reads each 16-byte word of `device_src` once and
  // writes nothing (`bytes` a multiple of 16): the read ceiling of work that
  // streams its inputs.
  virtual void read_words(const void *device_src, size_t bytes) = 0;
  // The work `enqueue` puts on the stream, captured instead of run, for
  // replays; NULL on a device without graphs (the host, whose calls compute
  // before they return: there is no queue to capture).
  virtual std::unique_ptr<DeviceGraph> capture(const std::function<void()> &enqueue) = 0;
};

std::unique_ptr<Device> make_host_device();
// Device `device_id` through libcuda.so.1 (its primary context, a new stream).
std::unique_ptr<Device> make_cuda_device(int32_t device_id);

// Memory on a Device, released with it.
class DeviceBuffer {
 public:
  DeviceBuffer(Device &device, size_t bytes)
      : device_(&device), data_(bytes ? device.allocate(bytes) : nullptr), bytes_(bytes) {}
  ~DeviceBuffer() { device_->release(data_); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void *data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  Device *device_;
  void *data_;
  size_t bytes_;
};

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_DEVICE_H_
