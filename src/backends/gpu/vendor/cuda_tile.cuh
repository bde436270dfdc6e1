// The CUDA side of the forward kernel's vendor layer (see vendor/tile.cuh
// for the interface): thin wrappers over the PTX instructions it is built
// from (sm_80 and later): 16- and 4-byte cp.async with zero fill, ldmatrix,
// the m16n8k16 tensor-core MMA with fp32 accumulation, ex2.approx; the
// fragment layout of that MMA; the tile shapes that suit NVIDIA SMs.
#ifndef FMHA_SPLITK_BACKENDS_GPU_VENDOR_CUDA_TILE_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_VENDOR_CUDA_TILE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backends/gpu/kernels/smem_tile.cuh"

namespace fmha::gpu::kernels {

// Shared memory is addressed by 32-bit shared-window addresses (what
// cp.async and ldmatrix take).
using SmemAddr = uint32_t;

__device__ __forceinline__ SmemAddr smem_address(const void *pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// Counts one arrival at a device-scope counter that wraps to 0 past
// `limit` (atomicInc's rule) and returns the count before it, as one
// acquire-release atomic: the caller's CTA's writes before its barrier are
// released with it (cumulativity through bar.sync), and the last arrival
// acquires every earlier one's. Lighter than __threadfence() (fence.sc)
// around a relaxed atomicInc. (The fused merge's counters; CUDA only.)
__device__ __forceinline__ uint32_t arrive_acq_rel(uint32_t *counter, uint32_t limit) {
  uint32_t before;
  asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;\n" : "=r"(before) : "l"(counter), "r"(limit) : "memory");
  return before;
}

// Copies 16 bytes global -> shared, bypassing L1 (K/V are streamed once).
// With `valid` false nothing is read and the 16 bytes are zeroed, so tile
// rows past the end of a sequence hold zeros, never stale NaNs.
__device__ __forceinline__ void copy_async_16(SmemAddr dst, const void *src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// Copies 4 bytes global -> shared (through L1: cp.async.cg only moves 16),
// zero-filling when `valid` is false: rows whose starts are only 4-byte
// aligned (quantised K/V, per-row scales).
__device__ __forceinline__ void copy_async_4(SmemAddr dst, const void *src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// Two 8x8 b16 matrices; lanes 0..15 give the row addresses.
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(address)
               : "memory");
}

// As ldmatrix_x4, each matrix transposed (row-major V tile -> B operand).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// c += a * b for one 16x8x16 tile: a row-major 16x16, b column-major 16x8,
// c 16x8 in fp32 (the standard fragment layouts of mma.m16n8k16).
template <typename T>
__device__ __forceinline__ void mma_16x8x16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16x8x16<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16x8x16<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                           uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x; ex2.approx(-inf) = +0, which the online softmax relies on.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded to T and packed in one 32-bit register (x in the low
// half), as an MMA operand or one 4-byte store.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float x, float y);

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float x, float y) {
  const __half2 h = __floats2half2_rn(x, y);
  return *reinterpret_cast<const uint32_t *>(&h);
}

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float x, float y) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const uint32_t *>(&h);
}

// A bf16 pair rounded to nearest (`hi`) and the rounding remainders as a
// second bf16 pair (`lo`): P split into ~16 bits for two bf16 MMAs.
__device__ __forceinline__ void split_bf16x2(float x, float y, uint32_t *hi, uint32_t *lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  const float2 rounded = __bfloat1622float2(h);
  *hi = *reinterpret_cast<const uint32_t *>(&h);
  *lo = pack2<__nv_bfloat16>(x - rounded.x, y - rounded.y);
}

// `x` of lane (this lane ^ mask) of the warp; every lane takes part.
__device__ __forceinline__ float lane_xor(float x, int mask) { return __shfl_xor_sync(0xffffffffu, x, mask); }

// `x` of lane `lane` of the warp; every lane takes part.
__device__ __forceinline__ int32_t lane_value(int32_t x, int lane) { return __shfl_sync(0xffffffffu, x, lane); }

// The accumulator fragment of mma.m16n8k16: a tile of 16 rows x 8 columns
// over the 32 lanes of a warp. Lane l holds rows l / 4 and l / 4 + 8, and
// in each the two adjacent columns 2 (l % 4), 2 (l % 4) + 1: element
// [r * 2 + j] of its 4 is (row(r), col(j)). The 4 lanes of a quad share
// their rows.
struct FragmentLayout {
  static constexpr int kTileRows = 16;
  static constexpr int kTileCols = 8;  // columns (keys of S, dims of O) of one n-tile
  static constexpr int kRowsPerLane = 2;
  static constexpr int kColsPerRow = 2;  // adjacent columns a lane holds in each of its rows
  static constexpr int kElems = kRowsPerLane * kColsPerRow;

  __device__ __forceinline__ static int row(int lane, int r) { return lane / 4 + 8 * r; }
  __device__ __forceinline__ static int col(int lane, int j) { return 2 * (lane % 4) + j; }
  // The lane that speaks for its rows (writes shared exchanges, LSE).
  __device__ __forceinline__ static bool row_leader(int lane) { return lane % 4 == 0; }
  // Over the lanes holding the same rows (the quad), in a fixed order.
  __device__ __forceinline__ static float row_max(float x) {
    x = fmaxf(x, lane_xor(x, 1));
    return fmaxf(x, lane_xor(x, 2));
  }
  __device__ __forceinline__ static float row_sum(float x) {
    x += lane_xor(x, 1);
    return x + lane_xor(x, 2);
  }
};

// Tile shapes for NVIDIA SMs: 4 warps; 64 keys keep a K+V stage at 32 KB
// for D 128, larger heads use 32 so a stage stays <= 64 KB and two CTAs
// still fit an SM up to D 256. The quantised tiles use 32: their operand
// tiles are single-buffered and the dequantisation per tile is on the
// critical path, so shorter tiles and more resident CTAs overlap it best
// (H200, B8 L32768: 64-key quantised tiles, 2 CTAs per SM, measured int4 g1
// 796 us against 605 us at 32 keys, fp8 the same).
// Stages and CTAs per SM: each tile's softmax and MMAs are a dependency
// chain a few warps cannot hide, so more resident CTAs beat deeper
// pipelines (H200, D 128, same code otherwise: 3 CTAs x 2 stages 87% of
// the read bandwidth, 2 CTAs x 3 stages 72%). D 512: one CTA of 2 stages
// (its 147 KB also fit the 163 KB an sm_80 block may use). Quantised
// stages are packed rows, a quarter to a half of a T stage: 3 of them.
// kWide (native D 128 only, for grids of at most two CTAs per SM): 8 warps
// (8 keys of S, 16 dims of O each) and 3 stages, 2 CTAs per SM: twice the
// warps and tiles in flight where the grid leaves SMs that empty anyway
// (H200, run 52: 8 warps in 2 stages 1.04-1.11x on such grids, 15-25%
// slower on large ones, whose third resident CTA it gives up).
template <int kHeadDim, bool kQuantised, bool kWide = false>
struct TilePolicy {
  static_assert(!kWide || (kHeadDim == 128 && !kQuantised), "wide tiles: native D 128");
  static constexpr int kWarps = kWide ? 8 : 4;
  static constexpr int kBlockN = kQuantised || kHeadDim > 128 ? 32 : 64;
  static constexpr int kStages = kWide ? 3 : kQuantised ? 3 : kHeadDim <= 64 ? 4 : 2;
  static constexpr int kMinBlocksPerSm = kWide ? 2 : kHeadDim <= 256 ? (kQuantised && kHeadDim > 128 ? 2 : 3) : 1;
};

#define FMHA_GPU_LAUNCH_BOUNDS(threads, blocks) __launch_bounds__(threads, blocks)

// S = Q K^T of this warp's kKeysPerWarp keys (from key0) of the K tile at
// k_stage, over the whole head-dim bucket (dims past Dqk are zero in Q and
// K), for each of the kRowTiles 16-row tiles of Q: straight-line, each K
// fragment loaded once for all row tiles. The kernel is bound by this
// per-tile dependency chain, not by MMAs: a single row tile keeps even and
// odd k-steps in separate accumulators (two chains), a row pair has its
// two row tiles. Q is kQTiles 16-row tiles (hi and lo parts of a split Q),
// summed.
template <typename Tile>
__device__ __forceinline__ void score_tile(float (&s)[Tile::kRowTiles][Tile::kScoreTiles][4], SmemAddr q_base,
                                           SmemAddr k_stage, int key0, int lane) {
  constexpr int kNS = Tile::kScoreTiles;
  constexpr int kMT = Tile::kRowTiles;
  constexpr int kChains = kMT == 1 ? 2 : 1;
  constexpr int kRowBytes = Tile::kRowBytes;
  using QkMma = typename Tile::QkMmaType;
  static_assert(Tile::kKeysPerWarp == 8 || Tile::kKeysPerWarp == 16, "S tile of a warp: one or two n8 tiles");
  float s_part[kChains][kMT][kNS][4];
#pragma unroll
  for (int h = 0; h < kChains; ++h)
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s_part[h][mt][nt][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < Tile::kHeadDim / 16; ++ks) {
    uint32_t a[kMT][Tile::kQTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int part = 0; part < Tile::kQTiles; ++part)
        ldmatrix_x4(a[mt][part], q_base + part * Tile::kRows * kRowBytes +
                                     swizzled<kRowBytes>(mt * 16 + lane % 16, 2 * ks + lane / 16));
    if constexpr (kNS == 2) {
      uint32_t b[4];
      const int key = key0 + (lane / 16) * 8 + lane % 8;
      ldmatrix_x4(b, k_stage + swizzled<kRowBytes>(key, 2 * ks + (lane / 8) % 2));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int part = 0; part < Tile::kQTiles; ++part) {
          mma_16x8x16<QkMma>(s_part[(ks + part) % kChains][mt][0], a[mt][part], b[0], b[1]);
          mma_16x8x16<QkMma>(s_part[(ks + part) % kChains][mt][1], a[mt][part], b[2], b[3]);
        }
    } else {
      uint32_t b[2];
      const int key = key0 + lane % 8;
      ldmatrix_x2(b, k_stage + swizzled<kRowBytes>(key, 2 * ks + (lane / 8) % 2));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int part = 0; part < Tile::kQTiles; ++part)
          mma_16x8x16<QkMma>(s_part[(ks + part) % kChains][mt][0], a[mt][part], b[0], b[1]);
    }
  }
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[mt][nt][e] = s_part[0][mt][nt][e];
#pragma unroll
        for (int h = 1; h < kChains; ++h) s[mt][nt][e] += s_part[h][mt][nt][e];
      }
}

// O += P V for this warp's kDimsPerWarp head dims (from dim0) over the
// tile's keys, for each row tile: P from the kPTiles P tiles at p_base
// (row-major, kPStride), V (row-major keys x dims, swizzled) transposed by
// ldmatrix, each V fragment loaded once for all row tiles. All of the
// bucket's dims (V's padding is zero): straight-line.
template <typename Tile>
__device__ __forceinline__ void accumulate_pv(float (&acc)[Tile::kPvAccs][Tile::kRowTiles][Tile::kOutTiles][4],
                                              SmemAddr p_base, SmemAddr v_stage, int dim0, int lane) {
  using PvType = typename Tile::PvType;
  constexpr int kNO = Tile::kOutTiles;
  constexpr int kMT = Tile::kRowTiles;
#pragma unroll
  for (int kk = 0; kk < Tile::kBlockN / 16; ++kk) {
    uint32_t a[kMT][Tile::kPTiles][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const uint32_t a_address = p_base + ((mt * 16 + lane % 16) * Tile::kPStride + kk * 16 + (lane / 16) * 8) *
                                              static_cast<uint32_t>(sizeof(PvType));
#pragma unroll
      for (int part = 0; part < Tile::kPTiles; ++part) ldmatrix_x4(a[mt][part], a_address + part * Tile::kPTileBytes);
    }
#pragma unroll
    for (int np = 0; np < kNO / 2; ++np) {
      uint32_t b[4];
      const int key = kk * 16 + lane % 8 + ((lane / 8) % 2) * 8;
      ldmatrix_x4_trans(b, v_stage + swizzled<Tile::kRowBytes>(key, (dim0 + np * 16) / 8 + lane / 16));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int part = 0; part < Tile::kPTiles; ++part) {
          float(&o)[kNO][4] = acc[part % Tile::kPvAccs][mt];
          mma_16x8x16<PvType>(o[2 * np], a[mt][part], b[0], b[1]);
          mma_16x8x16<PvType>(o[2 * np + 1], a[mt][part], b[2], b[3]);
        }
    }
  }
}

}  // namespace fmha::gpu::kernels

#endif  // FMHA_SPLITK_BACKENDS_GPU_VENDOR_CUDA_TILE_CUH_
