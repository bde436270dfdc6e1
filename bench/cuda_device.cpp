// CUDA memory, stream and event timing through the driver API, loaded with
// dlopen so that fmha-splitk builds and runs without the CUDA toolkit and
// never links the CUDA runtime. A driver stream is a valid cudaStream_t for
// the plugin (the runtime uses the same primary context). The kernels that
// `bench` needs come as PTX (gpu_kernels_ptx.h), compiled by the driver.
#include <dlfcn.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "device.h"
#include "gpu_kernels_ptx.h"

namespace fmha_cli {
namespace {

// The few driver types used, as cuda.h declares them.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void *;
using CUstream = void *;
using CUevent = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUgraph = void *;
using CUgraphExec = void *;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
// Capture refuses calls that are unsafe while capturing (a synchronous copy,
// an allocation) from any thread: such a call inside a captured run is a bug
// to report, not to record.
constexpr int CU_STREAM_CAPTURE_MODE_GLOBAL = 0;

struct DriverApi {
  CUresult (*cuInit)(unsigned int flags);
  CUresult (*cuGetErrorString)(CUresult error, const char **text);
  CUresult (*cuDeviceGet)(CUdevice *device, int ordinal);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *context, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device);
  CUresult (*cuCtxSetCurrent)(CUcontext context);
  CUresult (*cuMemAlloc)(CUdeviceptr *memory, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr memory);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);
  CUresult (*cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char value, size_t count);
  CUresult (*cuStreamCreate)(CUstream *stream, unsigned int flags);
  CUresult (*cuStreamDestroy)(CUstream stream);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuEventCreate)(CUevent *event, unsigned int flags);
  CUresult (*cuEventDestroy)(CUevent event);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventElapsedTime)(float *milliseconds, CUevent start, CUevent end);
  // For `bench`: its kernels, a copy on the device and graphs.
  CUresult (*cuDeviceGetAttribute)(int *value, int attribute, CUdevice device);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*cuModuleLoadData)(CUmodule *module, const void *image);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction *function, CUmodule module, const char *name);
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                             unsigned int block_x, unsigned int block_y, unsigned int block_z,
                             unsigned int shared_bytes, CUstream stream, void **params, void **extra);
  CUresult (*cuStreamBeginCapture)(CUstream stream, int mode);
  CUresult (*cuStreamEndCapture)(CUstream stream, CUgraph *graph);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
  CUresult (*cuGraphLaunch)(CUgraphExec exec, CUstream stream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec exec);
  CUresult (*cuGraphDestroy)(CUgraph graph);
};

template <typename Fn>
void bind(void *library, const char *symbol, Fn *&fn) {
  void *address = dlsym(library, symbol);
  if (!address) throw std::runtime_error(std::string("libcuda.so.1 has no ") + symbol);
  fn = reinterpret_cast<Fn *>(address);
}

// Loaded once and kept for the life of the process: the plugin's runtime
// shares the driver, so unloading it early would pull it from under them.
const DriverApi &driver() {
  static const DriverApi api = [] {
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) throw std::runtime_error(std::string("cannot load the CUDA driver: ") + dlerror());
    DriverApi a{};
    bind(library, "cuInit", a.cuInit);
    bind(library, "cuGetErrorString", a.cuGetErrorString);
    bind(library, "cuDeviceGet", a.cuDeviceGet);
    bind(library, "cuDevicePrimaryCtxRetain", a.cuDevicePrimaryCtxRetain);
    bind(library, "cuDevicePrimaryCtxRelease_v2", a.cuDevicePrimaryCtxRelease);
    bind(library, "cuCtxSetCurrent", a.cuCtxSetCurrent);
    bind(library, "cuMemAlloc_v2", a.cuMemAlloc);
    bind(library, "cuMemFree_v2", a.cuMemFree);
    bind(library, "cuMemcpyHtoD_v2", a.cuMemcpyHtoD);
    bind(library, "cuMemcpyDtoH_v2", a.cuMemcpyDtoH);
    bind(library, "cuMemsetD8_v2", a.cuMemsetD8);
    bind(library, "cuStreamCreate", a.cuStreamCreate);
    bind(library, "cuStreamDestroy_v2", a.cuStreamDestroy);
    bind(library, "cuStreamSynchronize", a.cuStreamSynchronize);
    bind(library, "cuEventCreate", a.cuEventCreate);
    bind(library, "cuEventDestroy_v2", a.cuEventDestroy);
    bind(library, "cuEventRecord", a.cuEventRecord);
    bind(library, "cuEventSynchronize", a.cuEventSynchronize);
    bind(library, "cuEventElapsedTime", a.cuEventElapsedTime);
    bind(library, "cuDeviceGetAttribute", a.cuDeviceGetAttribute);
    bind(library, "cuMemcpyDtoDAsync_v2", a.cuMemcpyDtoDAsync);
    bind(library, "cuModuleLoadData", a.cuModuleLoadData);
    bind(library, "cuModuleUnload", a.cuModuleUnload);
    bind(library, "cuModuleGetFunction", a.cuModuleGetFunction);
    bind(library, "cuLaunchKernel", a.cuLaunchKernel);
    bind(library, "cuStreamBeginCapture_v2", a.cuStreamBeginCapture);
    bind(library, "cuStreamEndCapture", a.cuStreamEndCapture);
    bind(library, "cuGraphInstantiateWithFlags", a.cuGraphInstantiateWithFlags);
    bind(library, "cuGraphLaunch", a.cuGraphLaunch);
    bind(library, "cuGraphExecDestroy", a.cuGraphExecDestroy);
    bind(library, "cuGraphDestroy", a.cuGraphDestroy);
    return a;
  }();
  return api;
}

void check(CUresult result, const char *call) {
  if (result == CUDA_SUCCESS) return;
  const char *text = nullptr;
  if (driver().cuGetErrorString(result, &text) != CUDA_SUCCESS || !text) text = "unknown error";
  throw std::runtime_error(std::string(call) + " failed: " + text + " (CUresult " + std::to_string(result) + ")");
}

CUdeviceptr device_pointer(const void *memory) { return reinterpret_cast<CUdeviceptr>(memory); }

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(const DriverApi &cu, CUgraphExec exec, CUstream stream) : cu_(cu), exec_(exec), stream_(stream) {}
  ~CudaGraph() override { cu_.cuGraphExecDestroy(exec_); }
  CudaGraph(const CudaGraph &) = delete;
  CudaGraph &operator=(const CudaGraph &) = delete;
  void replay() override { check(cu_.cuGraphLaunch(exec_, stream_), "cuGraphLaunch"); }

 private:
  const DriverApi &cu_;
  CUgraphExec exec_;
  CUstream stream_;
};

// Threads per block of the bench kernels, and blocks per multiprocessor: 2048
// resident threads on an SM of the A100 and H100 generations.
constexpr unsigned int kBlockThreads = 256;
constexpr unsigned int kBlocksPerSm = 8;

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int32_t device_id) : cu_(driver()), device_id_(device_id) {
    check(cu_.cuInit(0), "cuInit");
    check(cu_.cuDeviceGet(&device_, device_id), "cuDeviceGet");
    check(cu_.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
    check(cu_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
    // Default flags: the stream waits for the uploads and fills, which run
    // on the legacy default stream.
    check(cu_.cuStreamCreate(&stream_, 0), "cuStreamCreate");
    check(cu_.cuEventCreate(&start_, 0), "cuEventCreate");
    check(cu_.cuEventCreate(&end_, 0), "cuEventCreate");
  }
  ~CudaDevice() override {
    if (module_) cu_.cuModuleUnload(module_);
    if (sink_) cu_.cuMemFree(sink_);
    cu_.cuEventDestroy(end_);
    cu_.cuEventDestroy(start_);
    cu_.cuStreamDestroy(stream_);
    cu_.cuDevicePrimaryCtxRelease(device_);
  }
  CudaDevice(const CudaDevice &) = delete;
  CudaDevice &operator=(const CudaDevice &) = delete;

  DLDevice dl_device() const override { return DLDevice{kDLCUDA, device_id_}; }
  void *stream() override { return stream_; }
  void *allocate(size_t bytes) override {
    CUdeviceptr memory = 0;
    check(cu_.cuMemAlloc(&memory, bytes), "cuMemAlloc");
    return reinterpret_cast<void *>(memory);  // NOLINT(performance-no-int-to-ptr): the driver's pointers are integers
  }
  void release(void *memory) noexcept override {
    if (memory) cu_.cuMemFree(device_pointer(memory));
  }
  void copy_to_device(void *device_dst, const void *host_src, size_t bytes) override {
    check(cu_.cuMemcpyHtoD(device_pointer(device_dst), host_src, bytes), "cuMemcpyHtoD");
  }
  void copy_to_host(void *host_dst, const void *device_src, size_t bytes) override {
    check(cu_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    check(cu_.cuMemcpyDtoH(host_dst, device_pointer(device_src), bytes), "cuMemcpyDtoH");
  }
  void fill_bytes(void *device_dst, uint8_t value, size_t bytes) override {
    check(cu_.cuMemsetD8(device_pointer(device_dst), value, bytes), "cuMemsetD8");
  }
  double time_ms(const std::function<void()> &enqueue) override {
    check(cu_.cuEventRecord(start_, stream_), "cuEventRecord");
    enqueue();
    check(cu_.cuEventRecord(end_, stream_), "cuEventRecord");
    check(cu_.cuEventSynchronize(end_), "cuEventSynchronize");
    float milliseconds = 0.0f;
    check(cu_.cuEventElapsedTime(&milliseconds, start_, end_), "cuEventElapsedTime");
    return milliseconds;
  }
  void synchronize() override { check(cu_.cuStreamSynchronize(stream_), "cuStreamSynchronize"); }
  void copy_within(void *device_dst, const void *device_src, size_t bytes) override {
    check(cu_.cuMemcpyDtoDAsync(device_pointer(device_dst), device_pointer(device_src), bytes, stream_),
          "cuMemcpyDtoDAsync");
  }
  void fill_random_bf16(void *device_dst, size_t count, uint64_t seed) override {
    load_kernels();
    CUdeviceptr dst = device_pointer(device_dst);
    unsigned long long elements = count;
    unsigned long long seed_value = seed;
    void *params[] = {&dst, &elements, &seed_value};
    launch(fill_random_bf16_, count, params, "cuLaunchKernel(fmha_bench_fill_random_bf16)");
  }
  void fill_random_words(void *device_dst, size_t count, uint64_t seed, const WordPattern &pattern) override {
    load_kernels();
    CUdeviceptr dst = device_pointer(device_dst);
    unsigned long long words = count;
    unsigned long long seed_value = seed;
    WordPattern pattern_value = pattern;  // the kernel takes the struct by value
    void *params[] = {&dst, &words, &seed_value, &pattern_value};
    launch(fill_random_words_, count, params, "cuLaunchKernel(fmha_bench_fill_random_words)");
  }
  void read_words(const void *device_src, size_t bytes) override {
    load_kernels();
    CUdeviceptr words = device_pointer(device_src);
    unsigned long long count = bytes / 16;
    unsigned int impossible = 0;  // even: see the kernel
    CUdeviceptr sink = sink_;
    void *params[] = {&words, &count, &impossible, &sink};
    launch(read_words_, count, params, "cuLaunchKernel(fmha_bench_read_words)");
  }
  std::unique_ptr<DeviceGraph> capture(const std::function<void()> &enqueue) override {
    check(cu_.cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {
      // End the capture so that the stream is usable again; the partial
      // graph is of no use.
      CUgraph partial = nullptr;
      if (cu_.cuStreamEndCapture(stream_, &partial) == CUDA_SUCCESS && partial) cu_.cuGraphDestroy(partial);
      throw;
    }
    CUgraph graph = nullptr;
    check(cu_.cuStreamEndCapture(stream_, &graph), "cuStreamEndCapture");
    CUgraphExec exec = nullptr;
    const CUresult instantiated = cu_.cuGraphInstantiateWithFlags(&exec, graph, 0);
    cu_.cuGraphDestroy(graph);  // the executable graph keeps what it needs
    check(instantiated, "cuGraphInstantiateWithFlags");
    return std::make_unique<CudaGraph>(cu_, exec, stream_);
  }

 private:
  // The PTX is compiled by the driver on first use only: `run` never pays
  // for it.
  void load_kernels() {
    if (module_) return;
    check(cu_.cuDeviceGetAttribute(&multiprocessors_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_),
          "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
    if (!sink_) check(cu_.cuMemAlloc(&sink_, sizeof(unsigned int)), "cuMemAlloc");
    check(cu_.cuModuleLoadData(&module_, kGpuKernelsPtx), "cuModuleLoadData(bench kernels)");
    check(cu_.cuModuleGetFunction(&fill_random_bf16_, module_, "fmha_bench_fill_random_bf16"),
          "cuModuleGetFunction(fmha_bench_fill_random_bf16)");
    check(cu_.cuModuleGetFunction(&fill_random_words_, module_, "fmha_bench_fill_random_words"),
          "cuModuleGetFunction(fmha_bench_fill_random_words)");
    check(cu_.cuModuleGetFunction(&read_words_, module_, "fmha_bench_read_words"),
          "cuModuleGetFunction(fmha_bench_read_words)");
  }
  // A grid-stride kernel over `items`: enough blocks to fill the GPU, fewer
  // for small fills.
  void launch(CUfunction function, unsigned long long items, void **params, const char *call) {
    if (items == 0) return;
    const unsigned long long needed = (items + kBlockThreads - 1) / kBlockThreads;
    const auto blocks = static_cast<unsigned int>(
        std::min<unsigned long long>(needed, static_cast<unsigned long long>(multiprocessors_) * kBlocksPerSm));
    check(cu_.cuLaunchKernel(function, blocks, 1, 1, kBlockThreads, 1, 1, 0, stream_, params, nullptr), call);
  }

  const DriverApi &cu_;
  int32_t device_id_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  CUevent start_ = nullptr;
  CUevent end_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction fill_random_bf16_ = nullptr;
  CUfunction fill_random_words_ = nullptr;
  CUfunction read_words_ = nullptr;
  CUdeviceptr sink_ = 0;
  int multiprocessors_ = 0;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int32_t device_id) { return std::make_unique<CudaDevice>(device_id); }

}  // namespace fmha_cli
