// The HIP side of the vendor layer (see vendor.h), for AMD CDNA GPUs
// (gfx90a, gfx94x, gfx950), ROCm 5.2 (Debian 12) through 6.x.
#ifndef FMHA_SPLITK_BACKENDS_GPU_VENDOR_HIP_H_
#define FMHA_SPLITK_BACKENDS_GPU_VENDOR_HIP_H_

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#include <hip/hip_version.h>

#include <cstdint>

// ROCm 6 has the CUDA-like __hip_bfloat16 with its conversion functions;
// ROCm 5.2 only the hip_bfloat16 class (rounding to nearest even, as
// __float2bfloat16 does).
#if HIP_VERSION >= 60000000
#include <hip/hip_bf16.h>
#define FMHA_GPU_HIP_BF16_NATIVE 1
#else
#include <hip/hip_bfloat16.h>
#define FMHA_GPU_HIP_BF16_NATIVE 0
#endif

namespace fmha::gpu {

// Backend name used in messages ("hip merge: ...").
constexpr const char kVendorName[] = "hip";
// The backend as messages name it ("the HIP backend needs ...").
#define FMHA_GPU_BACKEND_NAME "HIP"
// no streaming quantised forward kernel: it is written against NVIDIA's
// mma.m16n8k16 fragments; int4 / fp8 K/V run in the tile kernel.
#define FMHA_GPU_HAS_QUANT_STREAM 0
// Nor the MLA decode kernel (same reason): MLA runs in the tile kernel.
#define FMHA_GPU_HAS_MLA_KERNEL 0
// Row pairs: the shared tile kernel supports them on both vendors; HIP
// leaves them out until an AMD GPU has run them (and its build time).
#define FMHA_GPU_HAS_ROW_PAIRS 0
// Nor the tile kernel's wide variant (its TilePolicy is AMD's own).
#define FMHA_GPU_HAS_WIDE_TILES 0
// No merge inside the tile kernel yet: its loads of the other CTAs' slots
// would need coherent (glc) loads, unwritten and untested on AMD; the
// combine pass runs instead.
#define FMHA_GPU_HAS_FUSED_MERGE 0

// ---------------------------------------------------------------- runtime --

using Stream = hipStream_t;
using Error = hipError_t;
constexpr Error kSuccess = hipSuccess;
// The calling thread's own default stream (ordered with the legacy default
// stream only, not with the application's other streams).
inline const Stream kPerThreadStream = hipStreamPerThread;

inline bool is_out_of_memory(Error err) { return err == hipErrorOutOfMemory; }
inline const char *error_name(Error err) { return hipGetErrorName(err); }
inline const char *error_string(Error err) { return hipGetErrorString(err); }
// Returns and clears the calling thread's last error.
inline Error take_last_error() { return hipGetLastError(); }

inline Error get_device_count(int *count) { return hipGetDeviceCount(count); }
inline Error get_device(int *device) { return hipGetDevice(device); }
inline Error set_device(int device) { return hipSetDevice(device); }
inline Error malloc_device(void **ptr, size_t bytes) { return hipMalloc(ptr, bytes); }
inline Error free_device(void *ptr) { return hipFree(ptr); }

// What autotuning needs: the driver's version, the L2 size, events, and a
// copy to the host.
using Event = hipEvent_t;
inline Error driver_version(int *version) { return hipDriverGetVersion(version); }
inline Error l2_cache_bytes(int device, int *bytes) {
  return hipDeviceGetAttribute(bytes, hipDeviceAttributeL2CacheSize, device);
}
inline Error event_create(Event *event) { return hipEventCreate(event); }
inline Error event_destroy(Event event) { return hipEventDestroy(event); }
inline Error event_record(Event event, Stream stream) { return hipEventRecord(event, stream); }
inline Error event_synchronize(Event event) { return hipEventSynchronize(event); }
inline Error event_elapsed_ms(float *ms, Event start, Event stop) { return hipEventElapsedTime(ms, start, stop); }
inline Error memset_async(void *ptr, int value, size_t bytes, Stream stream) {
  return hipMemsetAsync(ptr, value, bytes, stream);
}
inline Error copy_to_host_async(void *dst, const void *src, size_t bytes, Stream stream) {
  return hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost, stream);
}
inline Error stream_synchronize(Stream stream) { return hipStreamSynchronize(stream); }

// What orders a plan's runs on its own workspace (as in cuda.h).
inline Error event_create_untimed(Event *event) { return hipEventCreateWithFlags(event, hipEventDisableTiming); }
inline Error stream_wait_event(Stream stream, Event event) { return hipStreamWaitEvent(stream, event, 0); }
inline Error stream_is_capturing(Stream stream, bool *capturing) {
  hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
  const Error err = hipStreamIsCapturing(stream, &status);
  *capturing = status != hipStreamCaptureStatusNone;
  return err;
}

// The device that owns the memory at `ptr`, or -1 for host memory.
inline Error memory_device(const void *ptr, int *device) {
  hipPointerAttribute_t attributes{};
  const Error err = hipPointerGetAttributes(&attributes, ptr);
  // ROCm 6 renamed the field (CUDA's name); 5.x has only memoryType.
#if HIP_VERSION >= 60000000
  const bool on_device = attributes.type == hipMemoryTypeDevice || attributes.isManaged;
#else
  const bool on_device = attributes.memoryType == hipMemoryTypeDevice || attributes.isManaged;
#endif
  *device = err == hipSuccess && on_device ? attributes.device : -1;
  return err;
}

// The most dynamic shared memory (LDS) one block may use: 64 KB on CDNA2
// and CDNA3, 160 KB on CDNA4. There is no opt-in beyond it.
inline Error max_shared_memory_per_block(int device, int *bytes) {
  return hipDeviceGetAttribute(bytes, hipDeviceAttributeMaxSharedMemoryPerBlock, device);
}

// Lets `kernel` take `bytes` of dynamic shared memory.
template <typename Kernel>
inline Error allow_kernel_shared_memory(Kernel kernel, int bytes) {
  return hipFuncSetAttribute(reinterpret_cast<const void *>(kernel), hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

// 4 KB of kernel arguments is what every ROCm release accepts.
constexpr int kMaxKernelParamBytes = 4096;

// HIP passes kernel arguments in the kernarg segment, which device code
// reads in place already: there is no __grid_constant__ to ask for it.
#define FMHA_GPU_GRID_CONSTANT

// A CDNA wavefront: 64 lanes in lock step (host code sizes lane groups by
// it too).
constexpr int kWarpSize = 64;

// Device code exists only where clang (or hipcc) compiles HIP: host-only
// sources of a plugin include this header for the runtime part alone.
#if defined(__HIPCC__) || defined(__HIP__)

// ------------------------------------------------------ dependent launch --

// HIP has no programmatic dependent launch: a plain launch, and the two
// device calls are no-ops (see cuda.h).
template <typename... Params, typename... Args>
inline Error launch_overlapping(bool /*overlap*/, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                                Stream stream, Args... args) {
  kernel<<<grid, block, smem_bytes, stream>>>(args...);
  return hipGetLastError();
}
template <typename... Params>
inline Error kernel_ptx_version(void (* /*kernel*/)(Params...), int *version) {
  *version = 0;
  return hipSuccess;
}
__device__ __forceinline__ void wait_for_prior_grids() {}
__device__ __forceinline__ void allow_dependent_grids() {}

// ------------------------------------------------------------------ types --

using half_t = __half;

__device__ __forceinline__ float to_float(half_t x) { return __half2float(x); }
__device__ __forceinline__ half_t half_from_float(float x) { return __float2half_rn(x); }

// Two floats rounded to half_t / bf16_t and packed in one 32-bit word (x in
// the low half), for one 4-byte store.
__device__ __forceinline__ uint32_t pack_half2(float x, float y) {
  const __half2 h = __floats2half2_rn(x, y);
  return *reinterpret_cast<const uint32_t *>(&h);
}

#if FMHA_GPU_HIP_BF16_NATIVE
using bf16_t = __hip_bfloat16;
__device__ __forceinline__ float to_float(bf16_t x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16_t bf16_from_float(float x) { return __float2bfloat16(x); }
__device__ __forceinline__ uint32_t pack_bf162(float x, float y) {
  const __hip_bfloat162 h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const uint32_t *>(&h);
}
#else
using bf16_t = hip_bfloat16;
__device__ __forceinline__ float to_float(bf16_t x) { return static_cast<float>(x); }
__device__ __forceinline__ bf16_t bf16_from_float(float x) { return bf16_t(x); }
__device__ __forceinline__ uint32_t pack_bf162(float x, float y) {
  return static_cast<uint32_t>(bf16_t(x).data) | static_cast<uint32_t>(bf16_t(y).data) << 16;
}
#endif

// ----------------------------------------------------------------- lanes --

// The minimum of `x` over the whole wavefront, on every lane.
__device__ __forceinline__ uint32_t warp_min(uint32_t x) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    const uint32_t other = static_cast<uint32_t>(__shfl_xor(static_cast<int>(x), offset));
    x = other < x ? other : x;
  }
  return x;
}

// An aligned group of `lanes` consecutive lanes (a power of two up to
// kWarpSize) of one wavefront; all of them must take part in each
// reduction. HIP's shuffles take no lane mask: the whole wavefront is
// converged wherever the group is.
class LaneGroup {
 public:
  __device__ __forceinline__ explicit LaneGroup(int lanes) : lanes_(lanes) {}

  // The butterfly gives every lane of the group the bitwise same sum, in a
  // fixed order; `lanes_` as the width keeps each exchange inside the group.
  __device__ __forceinline__ float sum(float x) const {
    return reduce(x, [](float a, float b) { return a + b; });
  }

  // The butterfly with any commutative `op` (every lane the same result).
  template <typename Op>
  __device__ __forceinline__ float reduce(float x, Op op) const {
    for (int offset = lanes_ / 2; offset > 0; offset >>= 1) x = op(x, __shfl_xor(x, offset, lanes_));
    return x;
  }

 private:
  int lanes_;
};

#endif  // defined(__HIPCC__) || defined(__HIP__)

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_VENDOR_HIP_H_
