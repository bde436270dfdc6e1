// The CUDA side of the vendor layer (see vendor.h for the contract that
// hip.h implements the same way): runtime types and error text, the 16-bit
// float types and their conversions, and the lane-group reduction of a
// 32-lane warp.
#ifndef FMHA_SPLITK_BACKENDS_GPU_VENDOR_CUDA_H_
#define FMHA_SPLITK_BACKENDS_GPU_VENDOR_CUDA_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace fmha::gpu {

// Backend name used in messages ("cuda merge: ...").
constexpr const char kVendorName[] = "cuda";
// The backend as messages name it ("the CUDA backend needs ...").
#define FMHA_GPU_BACKEND_NAME "CUDA"
// the streaming quantised forward kernel (kernels/quant_stream_forward.cuh) is written
// against mma.m16n8k16 fragments.
#define FMHA_GPU_HAS_QUANT_STREAM 1
// The MLA decode kernel (kernels/mla_forward.cuh), likewise.
#define FMHA_GPU_HAS_MLA_KERNEL 1
// The tile kernel's row pairs (32 query rows per CTA; native K/V, D <= 128).
#define FMHA_GPU_HAS_ROW_PAIRS 1
// The tile kernel's wide variant (8 warps, 3 stages) at native D 128.
#define FMHA_GPU_HAS_WIDE_TILES 1
// The merge of split sequences inside the tile kernel (last CTA merges):
// device-scope fences, atomicInc and L2-only loads (__ldcg).
#define FMHA_GPU_HAS_FUSED_MERGE 1

// ---------------------------------------------------------------- runtime --

using Stream = cudaStream_t;
using Error = cudaError_t;
constexpr Error kSuccess = cudaSuccess;
// The calling thread's own default stream (ordered with the legacy default
// stream only, not with the application's other streams).
inline const Stream kPerThreadStream = cudaStreamPerThread;

inline bool is_out_of_memory(Error err) { return err == cudaErrorMemoryAllocation; }
inline const char *error_name(Error err) { return cudaGetErrorName(err); }
inline const char *error_string(Error err) { return cudaGetErrorString(err); }
// Returns and clears the calling thread's last non-sticky error.
inline Error take_last_error() { return cudaGetLastError(); }

inline Error get_device_count(int *count) { return cudaGetDeviceCount(count); }
inline Error get_device(int *device) { return cudaGetDevice(device); }
inline Error set_device(int device) { return cudaSetDevice(device); }
inline Error malloc_device(void **ptr, size_t bytes) { return cudaMalloc(ptr, bytes); }
inline Error free_device(void *ptr) { return cudaFree(ptr); }

// What autotuning needs: the driver's version, the L2 size, events, and a
// copy to the host.
using Event = cudaEvent_t;
inline Error driver_version(int *version) { return cudaDriverGetVersion(version); }
inline Error l2_cache_bytes(int device, int *bytes) {
  return cudaDeviceGetAttribute(bytes, cudaDevAttrL2CacheSize, device);
}
inline Error event_create(Event *event) { return cudaEventCreate(event); }
inline Error event_destroy(Event event) { return cudaEventDestroy(event); }
inline Error event_record(Event event, Stream stream) { return cudaEventRecord(event, stream); }
inline Error event_synchronize(Event event) { return cudaEventSynchronize(event); }
inline Error event_elapsed_ms(float *ms, Event start, Event stop) { return cudaEventElapsedTime(ms, start, stop); }
inline Error memset_async(void *ptr, int value, size_t bytes, Stream stream) {
  return cudaMemsetAsync(ptr, value, bytes, stream);
}
inline Error copy_to_host_async(void *dst, const void *src, size_t bytes, Stream stream) {
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
}
inline Error stream_synchronize(Stream stream) { return cudaStreamSynchronize(stream); }

// What orders a plan's runs on its own workspace: an event without timing
// (cheaper to record), a stream's wait for it, and whether a stream is
// being captured into a graph.
inline Error event_create_untimed(Event *event) { return cudaEventCreateWithFlags(event, cudaEventDisableTiming); }
inline Error stream_wait_event(Stream stream, Event event) { return cudaStreamWaitEvent(stream, event, 0); }
inline Error stream_is_capturing(Stream stream, bool *capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const Error err = cudaStreamIsCapturing(stream, &status);
  *capturing = status != cudaStreamCaptureStatusNone;
  return err;
}

// The device that owns the memory at `ptr`, or -1 for memory no device
// owns (pinned host memory, or system memory that HMM / ATS systems such as
// Grace Hopper let kernels read).
inline Error memory_device(const void *ptr, int *device) {
  cudaPointerAttributes attributes{};
  const Error err = cudaPointerGetAttributes(&attributes, ptr);
  const bool on_device = attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  *device = err == cudaSuccess && on_device ? attributes.device : -1;
  return err;
}

// The most dynamic shared memory one block may ask for (after opting in).
inline Error max_shared_memory_per_block(int device, int *bytes) {
  return cudaDeviceGetAttribute(bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
}

// Lets `kernel` take `bytes` of dynamic shared memory (beyond the default
// 48 KB) and asks for the largest shared-memory carveout: several CTAs per
// SM need it.
template <typename Kernel>
inline Error allow_kernel_shared_memory(Kernel kernel, int bytes) {
  const Error err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
}

// Kernel parameters beyond 4 KB need CUDA 12.1 and Volta or newer (both
// given here); the limit is 32764 bytes.
constexpr int kMaxKernelParamBytes = 32764;

// Kernel parameters read in place from the constant bank: indexing an array
// in them by a run-time value needs no local copy.
#define FMHA_GPU_GRID_CONSTANT __grid_constant__

// Threads that execute in lock step and exchange registers (host code sizes
// lane groups by it too).
constexpr int kWarpSize = 32;

// Device code exists only where nvcc compiles: host-only sources of a
// plugin include this header for the runtime part alone.
#if defined(__CUDACC__)

// ------------------------------------------------------ dependent launch --

// Launches `kernel` so that, with `overlap` (compute capability 9.0 and
// newer: programmatic dependent launch), it may start while the kernel
// before it in the stream finishes; it must call wait_for_prior_grids()
// before it reads what that kernel wrote. CUDA graphs keep the overlap
// (a programmatic edge). Without `overlap`, a plain launch.
template <typename... Params, typename... Args>
inline Error launch_overlapping(bool overlap, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                                Stream stream, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = overlap ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// The virtual architecture `kernel` runs as on the current device (PTX
// version x 10: 90 for code compiled for sm_90; an sm_80 build that the
// driver compiles for a Hopper GPU reports 80).
template <typename... Params>
inline Error kernel_ptx_version(void (*kernel)(Params...), int *version) {
  cudaFuncAttributes attributes{};
  const Error err = cudaFuncGetAttributes(&attributes, kernel);
  *version = attributes.ptxVersion;
  return err;
}

// Waits until the kernels this one may overlap have finished and their
// writes are visible (a no-op when it was launched plainly, or before
// sm_90).
__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel of the stream, if launched overlapping, be
// scheduled once every CTA of this one has said so (or exited): it then
// takes SMs as they free up in this kernel's tail and waits there.
__device__ __forceinline__ void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// ------------------------------------------------------------------ types --

using half_t = __half;
using bf16_t = __nv_bfloat16;

__device__ __forceinline__ float to_float(half_t x) { return __half2float(x); }
__device__ __forceinline__ float to_float(bf16_t x) { return __bfloat162float(x); }
__device__ __forceinline__ half_t half_from_float(float x) { return __float2half_rn(x); }
__device__ __forceinline__ bf16_t bf16_from_float(float x) { return __float2bfloat16_rn(x); }

// Two floats rounded to half_t / bf16_t and packed in one 32-bit word (x in
// the low half), for one 4-byte store.
__device__ __forceinline__ uint32_t pack_half2(float x, float y) {
  const __half2 h = __floats2half2_rn(x, y);
  return *reinterpret_cast<const uint32_t *>(&h);
}
__device__ __forceinline__ uint32_t pack_bf162(float x, float y) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const uint32_t *>(&h);
}

// ----------------------------------------------------------------- lanes --

// The minimum of `x` over the whole warp, on every lane (sm_80's redux).
__device__ __forceinline__ uint32_t warp_min(uint32_t x) { return __reduce_min_sync(0xffffffffu, x); }

// An aligned group of `lanes` consecutive lanes (a power of two up to
// kWarpSize) of one warp; all of them must take part in each reduction.
class LaneGroup {
 public:
  __device__ __forceinline__ explicit LaneGroup(int lanes)
      : lanes_(lanes),
        mask_(lanes == kWarpSize
                  ? 0xffffffffu
                  : ((1u << lanes) - 1u) << ((static_cast<int>(threadIdx.x) & (kWarpSize - 1)) & ~(lanes - 1))) {}

  // The butterfly gives every lane of the group the bitwise same sum, in a
  // fixed order.
  __device__ __forceinline__ float sum(float x) const {
    return reduce(x, [](float a, float b) { return a + b; });
  }

  // The butterfly with any commutative `op` (every lane the same result).
  template <typename Op>
  __device__ __forceinline__ float reduce(float x, Op op) const {
    for (int offset = lanes_ / 2; offset > 0; offset >>= 1) x = op(x, __shfl_xor_sync(mask_, x, offset));
    return x;
  }

 private:
  int lanes_;
  unsigned mask_;  // exactly the group's lanes
};

#endif  // defined(__CUDACC__)

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_VENDOR_CUDA_H_
