// The HIP side of the forward kernel's vendor layer (see vendor/tile.cuh
// for the interface), for AMD CDNA GPUs (gfx90a, gfx94x, gfx950):
// 64-lane wavefronts, the 16x16x16 MFMA with fp32 accumulation
// (v_mfma_f32_16x16x16f16 / _16x16x16bf16_1k, gfx90a and later), LDS
// addressed by pointers, and plain loads for the copies.
//
// NOT EXECUTED: this project has no AMD GPU. The fragment layouts below are
// those of AMD's matrix instruction documentation; the code compiles for
// gfx90a and gfx940 in CI, and the algorithm around it is the one the H200
// tests. docs/amd.md says what that does and does not establish.
//
// Copies: CDNA has no cp.async. copy_async_* load into registers and store
// to LDS in the same thread, so a tile is complete when the issuing threads
// pass the next barrier; commit and wait have nothing to do. The loads of
// tile t + 1 are issued before tile t is computed, so they overlap it only
// as far as the compiler schedules the stores late (a register-staged
// pipeline is the known next step for speed).
#ifndef FMHA_SPLITK_BACKENDS_GPU_VENDOR_HIP_TILE_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_VENDOR_HIP_TILE_CUH_

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#include <cstdint>

#include "backends/gpu/kernels/smem_tile.cuh"
#include "backends/gpu/vendor/hip.h"

namespace fmha::gpu::kernels {

// LDS is addressed through ordinary pointers.
using SmemAddr = uint8_t *;

__device__ __forceinline__ SmemAddr smem_address(void *pointer) { return static_cast<uint8_t *>(pointer); }

// 16 bytes global -> LDS; zeros (and no read) when `valid` is false, so
// tile rows past the end of a sequence hold zeros, never stale NaNs.
__device__ __forceinline__ void copy_async_16(SmemAddr dst, const void *src, bool valid) {
  uint4 value = make_uint4(0, 0, 0, 0);
  if (valid) value = *static_cast<const uint4 *>(src);
  *reinterpret_cast<uint4 *>(dst) = value;
}

// 4 bytes global -> LDS (rows only 4-byte aligned: quantised K/V, scales).
__device__ __forceinline__ void copy_async_4(SmemAddr dst, const void *src, bool valid) {
  uint32_t value = 0;
  if (valid) value = *static_cast<const uint32_t *>(src);
  *reinterpret_cast<uint32_t *>(dst) = value;
}

__device__ __forceinline__ void copy_commit() {}

template <int kPending>
__device__ __forceinline__ void copy_wait() {}

// 2^x; exp2f(-inf) = +0, which the online softmax relies on.
__device__ __forceinline__ float fast_exp2(float x) { return exp2f(x); }

template <typename T>
__device__ __forceinline__ uint32_t pack2(float x, float y);

template <>
__device__ __forceinline__ uint32_t pack2<half_t>(float x, float y) {
  return pack_half2(x, y);
}

template <>
__device__ __forceinline__ uint32_t pack2<bf16_t>(float x, float y) {
  return pack_bf162(x, y);
}

// A bf16 pair rounded to nearest (`hi`) and the rounding remainders as a
// second bf16 pair (`lo`): P split into ~16 bits for two bf16 MMAs.
__device__ __forceinline__ void split_bf16x2(float x, float y, uint32_t *hi, uint32_t *lo) {
  const uint32_t h = pack_bf162(x, y);
  *hi = h;
  *lo = pack_bf162(x - __uint_as_float(h << 16), y - __uint_as_float(h & 0xffff0000u));
}

// `x` of lane (this lane ^ mask) of the wavefront.
__device__ __forceinline__ float lane_xor(float x, int mask) { return __shfl_xor(x, mask); }

// `x` of lane `lane` of the wavefront.
__device__ __forceinline__ int32_t lane_value(int32_t x, int lane) { return __shfl(x, lane); }

// The accumulator of the 16x16x16 MFMA: 16 rows x 16 columns over the 64
// lanes. Lane l holds column l % 16 of rows 4 (l / 16) .. 4 (l / 16) + 3:
// element [r] of its 4 is (row(r), col(0)). The 16 lanes of one quarter
// of the wavefront share their rows.
struct FragmentLayout {
  static constexpr int kTileRows = 16;
  static constexpr int kTileCols = 16;
  static constexpr int kRowsPerLane = 4;
  static constexpr int kColsPerRow = 1;
  static constexpr int kElems = kRowsPerLane * kColsPerRow;

  __device__ __forceinline__ static int row(int lane, int r) { return 4 * (lane / 16) + r; }
  __device__ __forceinline__ static int col(int lane, int) { return lane % 16; }
  __device__ __forceinline__ static bool row_leader(int lane) { return lane % 16 == 0; }
  __device__ __forceinline__ static float row_max(float x) {
    for (int mask = 1; mask < 16; mask *= 2) x = fmaxf(x, lane_xor(x, mask));
    return x;
  }
  __device__ __forceinline__ static float row_sum(float x) {
    for (int mask = 1; mask < 16; mask *= 2) x += lane_xor(x, mask);
    return x;
  }
};

// Tile shapes for a CDNA CU with 64 KB of LDS per block (gfx90a, gfx94x):
// each wavefront takes 16 keys of a tile (one MFMA n-tile), so the tile is
// 64 keys (4 wavefronts) at D 64, 32 at D 128 and 16 (one wavefront) for
// larger heads, keeping Q, two K/V stages and P within 64 KB; D 512 has
// room for one stage only. Not tuned (no AMD hardware here).
template <int kHeadDim, bool kQuantised, bool kWide = false>
struct TilePolicy {
  static_assert(!kWide, "no wide tiles on HIP (FMHA_GPU_HAS_WIDE_TILES 0)");
  static constexpr int kBlockN = kHeadDim <= 64 ? 64 : kHeadDim <= 128 ? 32 : 16;
  static constexpr int kWarps = kBlockN / 16;
  static constexpr int kStages = !kQuantised && kHeadDim == 512 ? 1 : 2;
  static constexpr int kMinBlocksPerSm = 1;  // HIP's second bound means something else: unused
};

// HIP's __launch_bounds__ takes the block size (its second argument is a
// minimum of waves per execution unit, not of blocks per CU).
#define FMHA_GPU_LAUNCH_BOUNDS(threads, blocks) __launch_bounds__(threads)

// One 16x16x16 MFMA, c += a * b, with a and b four 16-bit values of the
// lane's row of A / column of B (k = 4 (lane / 16) .. + 3), as 8 bytes.
template <typename T>
struct Mfma;

template <>
struct Mfma<half_t> {
  __device__ __forceinline__ static void run(float (&c)[4], uint2 a, uint2 b) {
    typedef _Float16 Half4 __attribute__((ext_vector_type(4)));
    typedef float Float4 __attribute__((ext_vector_type(4)));
    Half4 av, bv;
    __builtin_memcpy(&av, &a, sizeof av);
    __builtin_memcpy(&bv, &b, sizeof bv);
    Float4 cv = {c[0], c[1], c[2], c[3]};
    cv = __builtin_amdgcn_mfma_f32_16x16x16f16(av, bv, cv, 0, 0, 0);
    c[0] = cv[0];
    c[1] = cv[1];
    c[2] = cv[2];
    c[3] = cv[3];
  }
};

template <>
struct Mfma<bf16_t> {
  __device__ __forceinline__ static void run(float (&c)[4], uint2 a, uint2 b) {
    typedef short Short4 __attribute__((ext_vector_type(4)));
    typedef float Float4 __attribute__((ext_vector_type(4)));
    Short4 av, bv;
    __builtin_memcpy(&av, &a, sizeof av);
    __builtin_memcpy(&bv, &b, sizeof bv);
    Float4 cv = {c[0], c[1], c[2], c[3]};
    cv = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, cv, 0, 0, 0);
    c[0] = cv[0];
    c[1] = cv[1];
    c[2] = cv[2];
    c[3] = cv[3];
  }
};

// S = Q K^T of this wavefront's 16 keys (from key0) of the K tile at
// k_stage, over the whole head-dim bucket (dims past Dqk are zero in Q and
// K), for each of the kRowTiles 16-row tiles of Q. A = Q (row lane % 16),
// B = K^T (column = key lane % 16): both read 4 consecutive dims of one
// swizzled row, half of a 16-byte chunk; each B once for all row tiles.
template <typename Tile>
__device__ __forceinline__ void score_tile(float (&s)[Tile::kRowTiles][Tile::kScoreTiles][4], SmemAddr q_base,
                                           SmemAddr k_stage, int key0, int lane) {
  constexpr int kRowBytes = Tile::kRowBytes;
  constexpr int kMT = Tile::kRowTiles;
  using Op = Mfma<typename Tile::QkMmaType>;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < Tile::kScoreTiles; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
  const int row = lane % 16;
  const int quarter = lane / 16;
#pragma unroll
  for (int ks = 0; ks < Tile::kHeadDim / 16; ++ks) {
    const int chunk = 2 * ks + quarter / 2;
    const int half = (quarter % 2) * 8;
    uint2 a[kMT][Tile::kQTiles];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int part = 0; part < Tile::kQTiles; ++part)
        a[mt][part] = *reinterpret_cast<const uint2 *>(q_base + part * Tile::kRows * kRowBytes +
                                                       swizzled<kRowBytes>(mt * 16 + row, chunk) + half);
#pragma unroll
    for (int nt = 0; nt < Tile::kScoreTiles; ++nt) {
      const uint2 b =
          *reinterpret_cast<const uint2 *>(k_stage + swizzled<kRowBytes>(key0 + nt * 16 + row, chunk) + half);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int part = 0; part < Tile::kQTiles; ++part) Op::run(s[mt][nt], a[mt][part], b);
    }
  }
}

// O += P V for this wavefront's head dims (from dim0) over the tile's keys,
// for each row tile. A = P (row lane % 16, 4 consecutive keys); B = V
// (column = dim lane % 16, the same 4 keys): V's tile is row-major by key,
// so B's four values come from four rows (four 2-byte LDS reads), once for
// all row tiles.
template <typename Tile>
__device__ __forceinline__ void accumulate_pv(float (&acc)[Tile::kPvAccs][Tile::kRowTiles][Tile::kOutTiles][4],
                                              SmemAddr p_base, SmemAddr v_stage, int dim0, int lane) {
  using PvType = typename Tile::PvType;
  using Op = Mfma<PvType>;
  constexpr int kMT = Tile::kRowTiles;
  const int quarter = lane / 16;
#pragma unroll
  for (int kk = 0; kk < Tile::kBlockN / 16; ++kk) {
    const int key = kk * 16 + 4 * quarter;
    uint2 a[kMT][Tile::kPTiles];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int part = 0; part < Tile::kPTiles; ++part)
        a[mt][part] = *reinterpret_cast<const uint2 *>(p_base + part * Tile::kPTileBytes +
                                                       ((mt * 16 + lane % 16) * Tile::kPStride + key) * sizeof(PvType));
#pragma unroll
    for (int nt = 0; nt < Tile::kOutTiles; ++nt) {
      const int dim = dim0 + nt * 16 + lane % 16;
      uint32_t v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        v[i] =
            *reinterpret_cast<const uint16_t *>(v_stage + swizzled<Tile::kRowBytes>(key + i, dim / 8) + (dim % 8) * 2);
      const uint2 b = make_uint2(v[0] | (v[1] << 16), v[2] | (v[3] << 16));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int part = 0; part < Tile::kPTiles; ++part) Op::run(acc[part % Tile::kPvAccs][mt][nt], a[mt][part], b);
    }
  }
}

}  // namespace fmha::gpu::kernels

#endif  // FMHA_SPLITK_BACKENDS_GPU_VENDOR_HIP_TILE_CUH_
