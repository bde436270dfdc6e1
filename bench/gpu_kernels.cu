// The kernels of `fmha-splitk bench`. The CLI links no CUDA runtime: it loads
// them from PTX (gpu_kernels_ptx.h, made from this file by
// generate_gpu_kernels_ptx.sh) with cuModuleLoadData, and the driver compiles
// that for the GPU it finds. Names are extern "C" so that cuda_device.cpp can
// look them up unmangled.
#include "random_bf16.h"

// dst[i] = random_bf16(seed, i) for i < count (grid-stride): inputs of any
// size are made on the device, never on the host or across the bus.
extern "C" __global__ void fmha_bench_fill_random_bf16(unsigned short *dst, unsigned long long count,
                                                       unsigned long long seed) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = fmha_cli::random_bf16(seed, i);
  }
}

// dst[i] = random_word(seed, i, pattern) for i < count (grid-stride): packed
// K/V and scales of any size, made on the device.
extern "C" __global__ void fmha_bench_fill_random_words(unsigned int *dst, unsigned long long count,
                                                        unsigned long long seed, fmha_cli::WordPattern pattern) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = fmha_cli::random_word(seed, i, pattern);
  }
}

__device__ __forceinline__ unsigned int fold_word(uint4 word) { return word.x ^ word.y ^ word.z ^ word.w; }

// Reads each of the `count` 16-byte words once (grid-stride, four independent
// loads in flight per thread), the ceiling of a kernel that streams its
// inputs. The words are folded and the fold is stored only if (fold | 1)
// equals `impossible`: the host passes an even value, so nothing is ever
// written, but the compiler cannot know that and must keep every load.
extern "C" __global__ void fmha_bench_read_words(const uint4 *__restrict__ words, unsigned long long count,
                                                 unsigned int impossible, unsigned int *sink) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned int fold = 0;
  for (; i + 3 * stride < count; i += 4 * stride) {
    const uint4 a = words[i];
    const uint4 b = words[i + stride];
    const uint4 c = words[i + 2 * stride];
    const uint4 d = words[i + 3 * stride];
    fold ^= fold_word(a) ^ fold_word(b) ^ fold_word(c) ^ fold_word(d);
  }
  for (; i < count; i += stride) fold ^= fold_word(words[i]);
  if ((fold | 1u) == impossible) *sink = fold;
}
