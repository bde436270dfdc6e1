// The shared-memory layout of the forward kernel's row tiles (Q, K, V and
// the dequantised operand tiles), which the loaders write and the vendor
// layer's MMAs read: rows of kRowBytes, the 16-byte chunk c of row r stored
// at chunk c ^ (r % 8) of its row. The 8 rows that one ldmatrix (CUDA) or
// one quarter-wavefront of LDS reads (HIP) take the same logical chunk
// from then fall in 8 different bank groups.
#ifndef FMHA_SPLITK_BACKENDS_GPU_KERNELS_SMEM_TILE_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_KERNELS_SMEM_TILE_CUH_

#include <cstdint>

namespace fmha::gpu::kernels {

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile whose
// rows are kRowBytes long (at least 8 chunks).
template <int kRowBytes>
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  static_assert(kRowBytes >= 128, "the swizzle permutes groups of 8 chunks");
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

}  // namespace fmha::gpu::kernels

#endif  // FMHA_SPLITK_BACKENDS_GPU_KERNELS_SMEM_TILE_CUH_
