// Block-wide int64 reductions and scans for the scheduling pass and the
// forward kernels that cut their own ranges (find_range_span), under one
// interface: CUDA takes CUB's (tuned, shipped with the toolkit); HIP a
// plain shared-memory scan (Debian's ROCm 5.2 has no hipCUB; the pass is
// one block over the batch, far from any bound).
//
//   BlockInt64<kThreads>::TempStorage     shared memory for one operation
//   BlockInt64<kThreads>(temp).Sum(x)     block total (valid on thread 0)
//   .ExclusiveSum(x, &out, &aggregate)    prefix sums and the total
//   .ExclusiveScan(x, &out, initial, op, &aggregate)
//                                         op-prefix starting at `initial`;
//                                         aggregate excludes `initial`
// Every thread of the block calls each operation; a __syncthreads() must
// separate two operations on the same TempStorage.
#ifndef FMHA_SPLITK_BACKENDS_GPU_VENDOR_BLOCK_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_VENDOR_BLOCK_CUH_

#include <cstdint>

#include "backends/gpu/vendor.h"

#if defined(FMHA_SPLITK_GPU_HIP)

namespace fmha::gpu {

template <int kThreads>
class BlockInt64 {
 public:
  struct TempStorage {
    int64_t values[kThreads];
  };

  __device__ __forceinline__ explicit BlockInt64(TempStorage &temp) : temp_(temp) {}

  __device__ int64_t Sum(int64_t x) {
    int64_t out, total;
    ExclusiveSum(x, out, total);
    return total;
  }

  __device__ void ExclusiveSum(int64_t x, int64_t &out, int64_t &aggregate) {
    struct Add {
      __device__ int64_t operator()(int64_t a, int64_t b) const { return a + b; }
    };
    int64_t inclusive = inclusive_scan(x, Add());
    out = inclusive - x;
    aggregate = temp_.values[kThreads - 1];
    __syncthreads();
  }

  template <typename Op>
  __device__ void ExclusiveScan(int64_t x, int64_t &out, int64_t initial, Op op, int64_t &aggregate) {
    const int tid = static_cast<int>(threadIdx.x);
    inclusive_scan(x, op);
    out = tid == 0 ? initial : op(initial, temp_.values[tid - 1]);
    aggregate = temp_.values[kThreads - 1];
    __syncthreads();
  }

 private:
  // Hillis-Steele over the block: log2(kThreads) rounds; leaves the
  // inclusive prefixes in temp_.values.
  template <typename Op>
  __device__ int64_t inclusive_scan(int64_t x, Op op) {
    const int tid = static_cast<int>(threadIdx.x);
    temp_.values[tid] = x;
    __syncthreads();
    for (int offset = 1; offset < kThreads; offset *= 2) {
      const int64_t before = tid >= offset ? temp_.values[tid - offset] : 0;
      __syncthreads();
      if (tid >= offset) temp_.values[tid] = op(before, temp_.values[tid]);
      __syncthreads();
    }
    return temp_.values[tid];
  }

  TempStorage &temp_;
};

}  // namespace fmha::gpu

#else

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

namespace fmha::gpu {

template <int kThreads>
class BlockInt64 {
  // (Warp scans: the least shared memory, which the forward kernels take
  // from their tiles' for the ranges they cut themselves, and the
  // shortest latency for one scan.)
  using Reduce = cub::BlockReduce<int64_t, kThreads>;
  using Scan = cub::BlockScan<int64_t, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;

 public:
  union TempStorage {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  };

  __device__ __forceinline__ explicit BlockInt64(TempStorage &temp) : temp_(temp) {}

  __device__ __forceinline__ int64_t Sum(int64_t x) { return Reduce(temp_.reduce).Sum(x); }
  __device__ __forceinline__ void ExclusiveSum(int64_t x, int64_t &out, int64_t &aggregate) {
    Scan(temp_.scan).ExclusiveSum(x, out, aggregate);
  }
  template <typename Op>
  __device__ __forceinline__ void ExclusiveScan(int64_t x, int64_t &out, int64_t initial, Op op, int64_t &aggregate) {
    Scan(temp_.scan).ExclusiveScan(x, out, initial, op, aggregate);
  }

 private:
  TempStorage &temp_;
};

}  // namespace fmha::gpu

#endif

#endif  // FMHA_SPLITK_BACKENDS_GPU_VENDOR_BLOCK_CUH_
