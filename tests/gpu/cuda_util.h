// Helpers of the GPU-only tests: checked CUDA calls, owned streams, graphs
// and plans, stream-ordered copies between host tensors and the device
// tensors of fmha_test::Device, and the run arguments of an uploaded case.
#ifndef FMHA_SPLITK_TESTS_GPU_CUDA_UTIL_H_
#define FMHA_SPLITK_TESTS_GPU_CUDA_UTIL_H_

#include <cuda_runtime.h>
#include <fmha_splitk/fmha_splitk.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/device.h"
#include "common/tensor.h"
#include "features/harness.h"

namespace fmha_test {

// Throws (gtest reports it as a failure of the running test) when a CUDA
// call of the test itself fails.
inline void cuda_check(cudaError_t err, const char *what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                             ")");
}

// Throws with the library's message when an fmha_* call fails.
inline void fmha_check(fmha_status status, const char *what) {
  if (status != FMHA_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + " returned " + fmha_status_string(status) + ": " +
                             fmha_last_error_message());
}

#define FMHA_SKIP_WITHOUT_CUDA()                                                      \
  do {                                                                                \
    if (!::fmha_test::device_under_test().available())                                \
      GTEST_SKIP() << "no CUDA device of compute capability 8.0 or newer is present"; \
  } while (0)

// Sets an environment variable for the scope of one test (the plugin's
// FMHA_SPLITK_TEST_* hooks, read at plan creation).
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

 private:
  const char *name_;
};

class Stream {
 public:
  Stream() { cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  ~Stream() { (void)cudaStreamDestroy(stream_); }
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t stream_ = nullptr;
};

// An instantiated graph captured from one stream.
class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
  }
  GraphExec(const GraphExec &) = delete;
  GraphExec &operator=(const GraphExec &) = delete;

  // Captures what `work` enqueues on `stream` (global mode: any call that
  // is unsafe during capture, on any thread, fails the capture) and
  // instantiates it. The capture is always ended, even when `work` throws.
  template <class Work>
  void capture(cudaStream_t stream, Work &&work) {
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    try {
      work();
    } catch (...) {
      cudaGraph_t abandoned = nullptr;
      if (cudaStreamEndCapture(stream, &abandoned) == cudaSuccess && abandoned != nullptr)
        (void)cudaGraphDestroy(abandoned);
      (void)cudaGetLastError();
      throw;
    }
    cuda_check(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
    cuda_check(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }

  void launch(cudaStream_t stream) const { cuda_check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch"); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

using PlanPtr = std::unique_ptr<fmha_splitk_plan_s, void (*)(fmha_splitk_plan_t)>;

inline PlanPtr make_plan(fmha_splitk_problem problem) {
  problem.backend = FMHA_BACKEND_CUDA;
  fmha_splitk_plan_t plan = nullptr;
  fmha_check(fmha_splitk_create_plan(&problem, &plan), "fmha_splitk_create_plan");
  return PlanPtr(plan, &fmha_splitk_destroy_plan);
}

inline size_t workspace_size(fmha_splitk_plan_t plan) {
  size_t bytes = 0;
  fmha_check(fmha_splitk_plan_workspace_size(plan, &bytes), "fmha_splitk_plan_workspace_size");
  return bytes;
}

// Device memory that the test owns (a workspace).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    if (bytes > 0) cuda_check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
    bytes_ = bytes;
  }
  ~DeviceBuffer() { (void)cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void *get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void *ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Stream-ordered copy of a host tensor's whole buffer onto a device tensor
// made from a host tensor of the same dtype, shape and strides.
inline void copy_to_device_async(const Tensor &host, const DeviceTensor &dev, cudaStream_t stream) {
  if (host.bytes() != dev.bytes()) throw std::logic_error("copy_to_device_async: buffer sizes differ");
  cuda_check(cudaMemcpyAsync(dev.base(), static_cast<const uint8_t *>(host.data()) - 32, host.bytes(),
                             cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync (to device)");
}

// Copies a device tensor's whole buffer back after the work on `stream`.
inline void copy_to_host(const DeviceTensor &dev, Tensor &host, cudaStream_t stream) {
  if (host.bytes() != dev.bytes()) throw std::logic_error("copy_to_host: buffer sizes differ");
  cuda_check(cudaMemcpyAsync(static_cast<uint8_t *>(host.data()) - 32, dev.base(), host.bytes(), cudaMemcpyDeviceToHost,
                             stream),
             "cudaMemcpyAsync (to host)");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

// Fills a device tensor's whole buffer with 0xff bytes (NaN for floats), so
// that an element a run fails to write cannot pass.
inline void poison_async(const DeviceTensor &dev, cudaStream_t stream) {
  cuda_check(cudaMemsetAsync(dev.base(), 0xff, dev.bytes(), stream), "cudaMemsetAsync (poison)");
}

// The arguments of one run over uploaded inputs; `lse` may be absent.
inline fmha_splitk_args run_args(const DeviceInputs &in, const DeviceTensor &o, const DeviceTensor *lse,
                                 void *workspace, size_t workspace_bytes, cudaStream_t stream) {
  auto dl = [](const std::optional<DeviceTensor> &t) { return t ? t->dl() : nullptr; };
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = dl(in.q);
  args.k = dl(in.k);
  args.v = dl(in.v);
  args.o = o.dl();
  args.lse = lse != nullptr ? lse->dl() : nullptr;
  args.bias = dl(in.bias);
  args.sinks = dl(in.sinks);
  args.kv_seqlen = dl(in.kv_seqlen);
  args.kv_seqstart = dl(in.kv_seqstart);
  args.q_seqstart = dl(in.q_seqstart);
  args.block_table = dl(in.block_table);
  args.kv_indptr = dl(in.kv_indptr);
  args.kv_indices = dl(in.kv_indices);
  args.kv_last_page_len = dl(in.kv_last_page_len);
  args.workspace = workspace;
  args.workspace_size = workspace != nullptr ? workspace_bytes : 0;
  args.stream = stream;
  return args;
}

// True when two host tensors of the same layout hold the same bytes
// (determinism checks compare bits, not values within a tolerance).
inline bool bitwise_equal(const Tensor &a, const Tensor &b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.strides() == b.strides() && a.bytes() == b.bytes() &&
         std::memcmp(a.data(), b.data(), a.bytes() - 32) == 0;
}

}  // namespace fmha_test

#endif  // FMHA_SPLITK_TESTS_GPU_CUDA_UTIL_H_
