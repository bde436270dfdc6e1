// The MLA decode kernel (DESIGN 5.7; CUDA): one CTA attends the 16 query
// rows of a row tile (Hq x Mq packed, as the tile kernel) over one piece of
// one sequence's latent rows: Dqk 576, Dv 512, V the first 512 dims of the
// same row, read once per tile.
//
// Why not the tile kernel (splitk_forward.cuh): there every warp owns keys
// for S, so at 576 dims each warp runs a 36-MMA chain per tile with Q
// re-read from shared memory (18 KB per warp per tile), P goes through
// shared memory, and the row maxima and sums meet there: it read 23-36% of
// the H200's bandwidth. Here:
//  - S = Q K^T: warp w owns dims [144 w, 144 w + 144) of every key of the
//    tile (nine 16-dim k-steps, four 8-key n-tiles: four independent
//    chains of nine MMAs), with its slice of Q kept in registers for the
//    whole piece. The four partial S tiles meet once in shared memory, and
//    every warp adds them in the same order: every warp then holds the
//    same full S tile (bitwise) and runs the same online softmax, with no
//    row-max or row-sum exchange;
//  - P stays in registers: an S accumulator fragment of two n-tiles is the
//    A fragment of the next MMA;
//  - O += P V: warp w owns dims [128 w, 128 w + 128).
//  Two CTA barriers per 32-key tile (tile landed; partial S written).
//
// fp8 latents (E4M3FN, one per-tensor float scale): the tile stays in fp8
// in shared memory (half the bytes, so deeper rings) and fragments are
// converted to fp16 in registers (cvt.rn.f16x2.e4m3x2 on sm_89+, exact):
//  - for S, ldmatrix of an 8-key x 16-byte block gives a lane 4 adjacent
//    dims of one key, which it uses as the MMA's k-slots (2q, 2q + 1) and
//    (2q + 8, 2q + 9); Q's fragments are loaded in the same permutation of
//    the dims, so the dot product is unchanged;
//  - for PV, a transposed ldmatrix of 16-bit pairs gives a lane 2 keys x 2
//    adjacent dims; a byte permute regroups them per dim, so one load feeds
//    an n-tile of the even dims and one of the odd dims of a 16-dim block;
//  - Q (bf16) is scaled per row by a power of two into fp16's range and
//    rounded once (fp16 holds bf16's 8 bits), P is fp16 (11 bits: one MMA),
//    and the tensor scale multiplies S and O in fp32;
//  - fp8 Q (FMHA_FLAG_FP8_QK) is converted once per piece, its scale joins
//    the scores'; fp8 P (FMHA_FLAG_FP8_PV) is P * 448 rounded to E4M3FN and
//    back to fp16 (exact), 1 / 448 joining O's scale.
// bf16 latents: bf16 MMAs, P split in a bf16 high and low part (two MMAs,
// as the tile kernel) because 8 bits of P cost most of the error budget.
#ifndef FMHA_SPLITK_BACKENDS_GPU_KERNELS_MLA_FORWARD_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_KERNELS_MLA_FORWARD_CUH_

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backends/gpu/kernels/forward_params.cuh"
#include "backends/gpu/kernels/splitk_forward.cuh"
#include "backends/gpu/vendor/tile.cuh"

namespace fmha::gpu::kernels {

// T: Q's dtype (and the latents' when !kFp8). kFp8Q: Q holds E4M3FN codes
// (FMHA_FLAG_FP8_QK; T is then unused). kFp8P: P is rounded to fp8
// (FMHA_FLAG_FP8_PV). Both need fp8 latents; codes are converted to fp16
// exactly and multiplied by fp16 MMAs (on sm_90, mma.sync has no fp8 form
// of its own: the compiler expands one into conversions and two fp16
// MMAs, docs/performance.md; its fp8 tensor cores take wgmma).
template <typename T, bool kFp8, bool kFp8Q = false, bool kFp8P = false>
struct MlaTile {
  static_assert(kFp8 || (!kFp8Q && !kFp8P), "fp8 compute needs fp8 latents");
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kRows = 16;  // query rows per CTA: one MMA row tile
  static constexpr int kBlockN = 32;
  static constexpr int kDimsQk = 576;
  static constexpr int kDimsV = 512;
  // bf16: two 36 KB stages; fp8: four 18 KB ones. Both keep 2 CTAs per SM.
  static constexpr int kStages = kFp8 ? 4 : 2;
  static constexpr int kMinBlocksPerSm = 2;
  static constexpr int kRowBytes = kDimsQk * (kFp8 ? 1 : 2);
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static constexpr int kKSteps = kDimsQk / 16 / kWarps;  // 16-dim k-steps of S per warp
  static constexpr int kScoreTiles = kBlockN / 8;        // 8-key n-tiles of S
  static constexpr int kDimsPerWarp = kDimsV / kWarps;   // O columns of a warp
  static constexpr int kOutTiles = kDimsPerWarp / 8;
  using QType = T;
  static constexpr bool kFp8Latents = kFp8;
  static constexpr bool kFp8Qk = kFp8Q;
  static constexpr bool kFp8Pv = kFp8P;
  // P's fp8 codes are P * kPCodeScale: P <= 1 against the row's running
  // maximum, so the codes stay within E4M3FN's 448.
  static constexpr float kPCodeScale = 448.f;
  using MmaType = std::conditional_t<kFp8, half_t, T>;
  static constexpr bool kSplitP = std::is_same_v<MmaType, bf16_t>;
  // Shared memory: the ring of latent tiles, the partial S tiles of the
  // warps ([warp][n-tile][lane] float4: a lane's fragment), the row maxima
  // of |Q| per warp (fp8: Q's scaling).
  static constexpr int kExchangeOffset = kStages * kTileBytes;
  static constexpr int kExchangeBytes = kWarps * kScoreTiles * kWarpSize * 16;
  static constexpr int kQTopOffset = kExchangeOffset + kExchangeBytes;
  static constexpr int kSmemBytes = kQTopOffset + kWarps * kRows * static_cast<int>(sizeof(float));

  static_assert(kKSteps * 16 * kWarps == kDimsQk, "S dims split evenly over the warps");
  static_assert(kBlockN == 8 * kWarps, "8 rows of a tile per warp: lanes 0-7 locate them");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a latent tile. bf16
// rows (72 chunks): the tile kernel's swizzle (smem_tile.cuh). fp8 rows (36
// chunks, 4.5 lines): rows 2 apart start on the same bank group, so chunks
// are permuted within aligned groups of 4 by (row / 2) % 4: the 8 rows of
// one ldmatrix then hit 8 different bank groups, and a row stays inside its
// 36 chunks.
template <bool kFp8>
__device__ __forceinline__ uint32_t latent_chunk(int row, int chunk) {
  if constexpr (kFp8)
    return static_cast<uint32_t>(row * 576 + ((chunk ^ ((row >> 1) & 3)) << 4));
  else
    return swizzled<1152>(row, chunk);
}

// Two E4M3FN codes (low 16 bits) as fp16, exactly; NaN codes give NaN.
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint32_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Streams the latent rows of one sequence into the tile ring. Warp w
// copies rows [8 w, 8 w + 8) of a tile, lane l chunks l, l + 32, ... of
// each (the swizzle only permutes a chunk's low bits, so a lane's chunks
// of a row stay 512 bytes apart); lane l % 8 locates row 8 w + l % 8 (one
// block-table lookup, made by the previous load() so that its latency
// passes during a tile's math) and the warp takes each row's position from
// it. About 10 instructions per row and thread.
template <typename Tile>
class MlaLatentLoader {
 public:
  static constexpr int kRowsPerWarp = Tile::kBlockN / Tile::kWarps;
  static constexpr int kChunkPasses = (Tile::kChunksPerRow + kWarpSize - 1) / kWarpSize;
  static_assert(kRowsPerWarp % 8 == 0, "a warp's rows start where the swizzle pattern does");

  __device__ MlaLatentLoader(const ForwardParams &p, int32_t batch, int32_t group, int32_t head_kv, int32_t kv_end,
                             int tid)
      : seq_(p.seq),
        batch_(batch),
        kv_end_(kv_end),
        lane_(tid % kWarpSize),
        first_row_((tid / kWarpSize) * kRowsPerWarp) {
    // Strides count elements: 2 bytes (bf16 / f16), 1 (fp8).
    constexpr int64_t kUnit = Tile::kRowBytes / Tile::kDimsQk;
    stride0_ = p.k_stride[0] * kUnit;
    stride1_ = p.k_stride[1] * kUnit;
    head_ = static_cast<const uint8_t *>(p.k) + (group * p.k_stride[2] + head_kv * p.k_stride[3]) * kUnit;
    origin_ = sequence_key_origin(seq_, batch);
  }

  // Issues the copies of keys [tile_start, tile_start + kBlockN) into the
  // tile at shared address `tile`; keys at or past kv_end are zero-filled.
  // A warp's rows start at a multiple of 8, so row first_row_ + i swizzles
  // as row i: each row costs a shuffle pair, a compare and a few adds.
  __device__ void load(SmemAddr tile, int32_t tile_start) const {
    const int32_t first_key = tile_start + first_row_;
    const int64_t mine = tile_start == ahead_start_ ? ahead_ : row_offset(first_key + lane_ % kRowsPerWarp);
    const SmemAddr dst0 = tile + first_row_ * Tile::kRowBytes;
    const uint8_t *const src0 = head_ + 16 * lane_;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int64_t offset = __shfl_sync(0xffffffffu, mine, i);
      const bool valid = first_key + i < kv_end_;
      const uint8_t *const src = src0 + offset;  // 0 past kv_end: the head's first row, not read
      const SmemAddr dst = dst0 + latent_chunk<Tile::kFp8Latents>(i, lane_);
#pragma unroll
      for (int j = 0; j < kChunkPasses; ++j)
        if (lane_ + kWarpSize * j < Tile::kChunksPerRow)
          copy_async_16(dst + 16 * kWarpSize * j, src + 16 * kWarpSize * j, valid);
    }
    ahead_start_ = tile_start + Tile::kBlockN;
    ahead_ = row_offset(ahead_start_ + first_row_ + lane_ % kRowsPerWarp);
  }

 private:
  // Byte offset of key `key`'s row from the head's row 0; 0 past kv_end.
  __device__ __forceinline__ int64_t row_offset(int32_t key) const {
    if (key >= kv_end_) return 0;
    int64_t outer, inner;
    key_row_location(seq_, batch_, origin_, key, &outer, &inner);
    return outer * stride0_ + inner * stride1_;
  }

  const SeqLayout &seq_;
  const int64_t batch_;
  const int32_t kv_end_;
  const int lane_;
  const int first_row_;
  const uint8_t *head_;
  int64_t stride0_, stride1_;
  int64_t origin_;
  mutable int32_t ahead_start_ = -1;  // the tile whose row this lane located ahead
  mutable int64_t ahead_ = 0;
};

// Attention of row tile `row_tile` of piece `at` (the tile
// kernel's prologue, epilogue and output targets; no bias: plan_forward
// sends problems with a bias to the tile kernel). Uniform across the CTA.
template <typename Tile>
__device__ __forceinline__ void mla_attend_piece(const ForwardParams &p, uint8_t *smem, const PieceAt &at,
                                                 int32_t row_tile, int32_t group, int32_t head_kv) {
  using Layout = FragmentLayout;
  using Mma = typename Tile::MmaType;
  using T = typename Tile::QType;
  constexpr bool kFp8 = Tile::kFp8Latents;
  constexpr int kBlockN = Tile::kBlockN;
  constexpr int kStages = Tile::kStages;
  constexpr int kNS = Tile::kScoreTiles;
  constexpr int kNO = Tile::kOutTiles;
  constexpr int kR = Layout::kRowsPerLane;

  TileRows tile_rows;
  if (!find_tile_rows(p, at, row_tile, Tile::kRows, &tile_rows)) return;
  const Piece &piece = tile_rows.piece;
  const QueryRange &queries = tile_rows.queries;
  const int32_t rows_here = tile_rows.rows_here;
  const int32_t kv_lo = tile_rows.kv_lo;
  const int32_t kv_hi = tile_rows.kv_hi;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const int quad = lane % 4;

  int32_t row_query[kR];
  int32_t row_head[kR];
  int32_t vis_lo[kR];
  int32_t vis_hi[kR];
  bool row_real[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int32_t row = Layout::row(lane, r);
    row_real[r] = row < rows_here;
    const RowKeys keys = row_keys(p, tile_rows, head_kv, row);
    row_query[r] = keys.query;
    row_head[r] = keys.head;
    vis_lo[r] = keys.lo;
    vis_hi[r] = keys.hi;
  }
  // The keys every real row of the tile sees (the same in every warp):
  // tiles inside need no mask.
  int32_t all_lo = INT32_MIN;
  int32_t all_hi = INT32_MAX;
#pragma unroll
  for (int r = 0; r < kR; ++r)
    if (row_real[r]) {
      all_lo = max(all_lo, vis_lo[r]);
      all_hi = min(all_hi, vis_hi[r]);
    }
  all_lo = __reduce_max_sync(0xffffffffu, all_lo);
  all_hi = __reduce_min_sync(0xffffffffu, all_hi);
  float row_scale[kR];
  float kv_scale = 1.f;
  if constexpr (kFp8) kv_scale = __ldg(static_cast<const float *>(p.k_scale));
#pragma unroll
  for (int r = 0; r < kR; ++r) row_scale[r] = p.score_scale * kv_scale;

  // ---- This warp's slice of Q as A fragments, for the whole piece -------
  // Element offset of Q's row for fragment row r.
  int64_t q_row[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r)
    q_row[r] = queries.batch * p.q_stride[0] + static_cast<int64_t>(queries.row0 + row_query[r]) * p.q_stride[1] +
               group * p.q_stride[2] + row_head[r] * p.q_stride[3];
  uint32_t q_frag[Tile::kKSteps][4];
  if constexpr (Tile::kFp8Qk) {
    // E4M3FN codes (FMHA_FLAG_FP8_QK), exact in fp16: dims 16c + 4 quad ..
    // + 3 as below for 16-bit Q, with the codes' scale on the scores.
    const uint8_t *const q8 = static_cast<const uint8_t *>(p.q);
#pragma unroll
    for (int ks = 0; ks < Tile::kKSteps; ++ks) {
      const int dim = (warp * Tile::kKSteps + ks) * 16 + 4 * quad;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const uint32_t codes = row_real[r] ? *reinterpret_cast<const uint32_t *>(q8 + q_row[r] + dim) : 0u;
        q_frag[ks][r] = e4m3x2_to_half2(codes);
        q_frag[ks][2 + r] = e4m3x2_to_half2(codes >> 16);
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) row_scale[r] *= q_code_scale(p, queries, group, row_query[r], row_head[r]);
  } else if constexpr (!kFp8) {
    // k-step c covers dims 16c .. 16c + 15 in the MMA's own order.
    const uint16_t *const q = static_cast<const uint16_t *>(p.q);
#pragma unroll
    for (int ks = 0; ks < Tile::kKSteps; ++ks) {
      const int dim = (warp * Tile::kKSteps + ks) * 16 + 2 * quad;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int r = 0; r < kR; ++r)
          q_frag[ks][2 * h + r] = row_real[r] ? *reinterpret_cast<const uint32_t *>(q + q_row[r] + dim + 8 * h) : 0u;
    }
  } else {
    // Dims 16c + 4 quad .. + 3 (the order the fp8 K fragments arrive in).
    const uint16_t *const q = static_cast<const uint16_t *>(p.q);
    uint2 raw[Tile::kKSteps][kR];
#pragma unroll
    for (int ks = 0; ks < Tile::kKSteps; ++ks) {
      const int dim = (warp * Tile::kKSteps + ks) * 16 + 4 * quad;
#pragma unroll
      for (int r = 0; r < kR; ++r)
        raw[ks][r] = row_real[r] ? *reinterpret_cast<const uint2 *>(q + q_row[r] + dim) : make_uint2(0u, 0u);
    }
    const auto value = [](uint32_t word, int half) {
      if constexpr (std::is_same_v<T, bf16_t>)
        return __uint_as_float(half == 0 ? word << 16 : word & 0xffff0000u);
      else
        return __half2float(__ushort_as_half(static_cast<unsigned short>(half == 0 ? word : word >> 16)));
    };
    float up[kR];
    if constexpr (std::is_same_v<T, bf16_t>) {
      // Each row scaled by 2^e, max |q| * 2^e in [2^14, 2^15): fp16 holds
      // every bf16 value of the row above 2^-10 of its largest exactly
      // (the tile kernel's split Q; one part suffices for bf16's 8 bits).
      float *const q_top = reinterpret_cast<float *>(smem + Tile::kQTopOffset);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        float top = 0.f;
#pragma unroll
        for (int ks = 0; ks < Tile::kKSteps; ++ks)
#pragma unroll
          for (int j = 0; j < 4; ++j) top = fmaxf(top, fabsf(value(j < 2 ? raw[ks][r].x : raw[ks][r].y, j % 2)));
        top = Layout::row_max(top);
        if (Layout::row_leader(lane)) q_top[warp * Tile::kRows + Layout::row(lane, r)] = top;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        float top = 0.f;
#pragma unroll
        for (int w = 0; w < Tile::kWarps; ++w) top = fmaxf(top, q_top[w * Tile::kRows + Layout::row(lane, r)]);
        int shift = 0;
        if (top > 0.f && top <= 3.0e38f)
          shift = min(14 - (static_cast<int>((__float_as_uint(top) >> 23) & 0xffu) - 127), 126);
        up[r] = __int_as_float((127 + shift) << 23);
        row_scale[r] *= __int_as_float((127 - shift) << 23);
      }
    } else {
#pragma unroll
      for (int r = 0; r < kR; ++r) up[r] = 1.f;
    }
#pragma unroll
    for (int ks = 0; ks < Tile::kKSteps; ++ks)
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const uint2 w = raw[ks][r];
        q_frag[ks][r] = pack2<half_t>(value(w.x, 0) * up[r], value(w.x, 1) * up[r]);
        q_frag[ks][2 + r] = pack2<half_t>(value(w.y, 0) * up[r], value(w.y, 1) * up[r]);
      }
  }

  float acc[kNO][4];
#pragma unroll
  for (int i = 0; i < kNO; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float row_max[kR];
  float row_sum[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.f;
  }

  const SmemAddr tiles = smem_address(smem);
  float4 *const exchange = reinterpret_cast<float4 *>(smem + Tile::kExchangeOffset);
  const int num_tiles = (kv_hi - kv_lo + kBlockN - 1) / kBlockN;
  if (num_tiles > 0) {
    const MlaLatentLoader<Tile> loader(p, piece.batch, group, head_kv, kv_hi, tid);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < num_tiles) loader.load(tiles + s * Tile::kTileBytes, kv_lo + s * kBlockN);
      copy_commit();
    }
    const int dim0 = warp * Tile::kDimsPerWarp;  // first O column of this warp

    for (int tile = 0; tile < num_tiles; ++tile) {
      copy_wait<kStages - 2>();
      __syncthreads();  // tile `tile` visible to all; the stage of tile - 1 free
      const SmemAddr stage = tiles + (tile % kStages) * Tile::kTileBytes;
      const int32_t tile_start = kv_lo + tile * kBlockN;

      // ---- Partial S over this warp's dims ---------------------------------
      float s[kNS][4];
#pragma unroll
      for (int nt = 0; nt < kNS; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int ks = 0; ks < Tile::kKSteps; ++ks) {
        const int c = warp * Tile::kKSteps + ks;  // 16-dim segment
        if constexpr (!kFp8) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            uint32_t b[4];
            const int key = half * 16 + (lane / 16) * 8 + lane % 8;
            ldmatrix_x4(b, stage + latent_chunk<false>(key, 2 * c + (lane / 8) % 2));
            mma_16x8x16<Mma>(s[2 * half], q_frag[ks], b[0], b[1]);
            mma_16x8x16<Mma>(s[2 * half + 1], q_frag[ks], b[2], b[3]);
          }
        } else {
          uint32_t b[4];
          ldmatrix_x4(b, stage + latent_chunk<true>(lane, c));  // matrix i: keys 8i .. 8i + 7
#pragma unroll
          for (int nt = 0; nt < kNS; ++nt)
            mma_16x8x16<Mma>(s[nt], q_frag[ks], e4m3x2_to_half2(b[nt]), e4m3x2_to_half2(b[nt] >> 16));
        }
      }
      {
        // The next copies are issued while the MMAs above complete.
        const int next = tile + kStages - 1;
        if (next < num_tiles) loader.load(tiles + (next % kStages) * Tile::kTileBytes, kv_lo + next * kBlockN);
        copy_commit();
      }
#pragma unroll
      for (int nt = 0; nt < kNS; ++nt)
        exchange[(warp * kNS + nt) * kWarpSize + lane] = make_float4(s[nt][0], s[nt][1], s[nt][2], s[nt][3]);
      __syncthreads();
#pragma unroll
      for (int nt = 0; nt < kNS; ++nt) {
        float4 total = exchange[nt * kWarpSize + lane];
#pragma unroll
        for (int w = 1; w < Tile::kWarps; ++w) {
          const float4 part = exchange[(w * kNS + nt) * kWarpSize + lane];
          total.x += part.x;
          total.y += part.y;
          total.z += part.z;
          total.w += part.w;
        }
        s[nt][0] = total.x;
        s[nt][1] = total.y;
        s[nt][2] = total.z;
        s[nt][3] = total.w;
      }

      // ---- Scores in log2 units, masked; online softmax ---------------------
      float tile_max[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) tile_max[r] = -INFINITY;
      if (!p.has_softcap && tile_start >= all_lo && tile_start + kBlockN - 1 <= all_hi) {
        // Every real row sees every key of the tile (the common case).
#pragma unroll
        for (int nt = 0; nt < kNS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[nt][e] *= row_scale[e / 2];
            tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
          }
      } else {
#pragma unroll
        for (int nt = 0; nt < kNS; ++nt)
#pragma unroll
          for (int r = 0; r < kR; ++r)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const int e = 2 * r + j;
              const int32_t key = tile_start + nt * 8 + Layout::col(lane, j);
              const float x = p.has_softcap ? p.softcap_log2 * tanhf(s[nt][e] * row_scale[r]) : s[nt][e] * row_scale[r];
              s[nt][e] = key >= vis_lo[r] && key <= vis_hi[r] ? x : -INFINITY;
              tile_max[r] = fmaxf(tile_max[r], s[nt][e]);
            }
      }
      float reference[kR];
      float rescale[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const float m = fmaxf(Layout::row_max(tile_max[r]), row_max[r]);
        reference[r] = m == -INFINITY ? 0.f : m;
        rescale[r] = fast_exp2(row_max[r] - reference[r]);
        row_max[r] = m;
        row_sum[r] *= rescale[r];
      }
      // Once the maxima settle, most tiles change none of the warp's rows.
      if (__any_sync(0xffffffffu, rescale[0] != 1.f || rescale[1] != 1.f)) {
#pragma unroll
        for (int nt = 0; nt < kNO; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[nt][e] *= rescale[e / 2];
      }
      // P as A fragments: k-step kk (keys 16 kk ..) is S n-tiles 2 kk, 2 kk + 1.
      uint32_t p_hi[kBlockN / 16][4];
      [[maybe_unused]] uint32_t p_lo[kBlockN / 16][4];
#pragma unroll
      for (int nt = 0; nt < kNS; ++nt) {
        float prob[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) prob[e] = fast_exp2(s[nt][e] - reference[e / 2]);
        row_sum[0] += prob[0] + prob[1];
        row_sum[1] += prob[2] + prob[3];
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          uint32_t &hi = p_hi[nt / 2][2 * (nt % 2) + r];
          if constexpr (Tile::kFp8Pv)
            // P's fp8 codes, as fp16 (exact) for the fp16 MMAs.
            hi = e4m3x2_to_half2(__nv_cvt_float2_to_fp8x2(
                make_float2(prob[2 * r] * Tile::kPCodeScale, prob[2 * r + 1] * Tile::kPCodeScale), __NV_SATFINITE,
                __NV_E4M3));
          else if constexpr (Tile::kSplitP)
            split_bf16x2(prob[2 * r], prob[2 * r + 1], &hi, &p_lo[nt / 2][2 * (nt % 2) + r]);
          else
            hi = pack2<Mma>(prob[2 * r], prob[2 * r + 1]);
        }
      }

      // ---- O += P V over this warp's dims -----------------------------------
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        const int key = kk * 16 + ((lane / 8) % 2) * 8 + lane % 8;
        if constexpr (!kFp8) {
#pragma unroll
          for (int np = 0; np < kNO / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, stage + latent_chunk<false>(key, (dim0 + np * 16) / 8 + lane / 16));
            mma_16x8x16<Mma>(acc[2 * np], p_hi[kk], b[0], b[1]);
            mma_16x8x16<Mma>(acc[2 * np + 1], p_hi[kk], b[2], b[3]);
            if constexpr (Tile::kSplitP) {
              mma_16x8x16<Mma>(acc[2 * np], p_lo[kk], b[0], b[1]);
              mma_16x8x16<Mma>(acc[2 * np + 1], p_lo[kk], b[2], b[3]);
            }
          }
        } else {
          // 32 dims per load: matrices (keys 0-7 | 8-15) x (dims d .. d + 15
          // | d + 16 .. d + 31); n-tile 2j holds the even dims of 16-dim
          // block j of the warp, n-tile 2j + 1 the odd ones.
#pragma unroll
          for (int blk = 0; blk < kNO / 4; ++blk) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, stage + latent_chunk<true>(key, (dim0 + blk * 32) / 16 + lane / 16));
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              // (key 2q, key 2q + 1) of the even dim, then of the odd dim.
              const uint32_t k0 = __byte_perm(b[2 * j], 0u, 0x3120);
              const uint32_t k8 = __byte_perm(b[2 * j + 1], 0u, 0x3120);
              const int nt = 2 * (2 * blk + j);
              mma_16x8x16<Mma>(acc[nt], p_hi[kk], e4m3x2_to_half2(k0), e4m3x2_to_half2(k8));
              mma_16x8x16<Mma>(acc[nt + 1], p_hi[kk], e4m3x2_to_half2(k0 >> 16), e4m3x2_to_half2(k8 >> 16));
            }
          }
        }
      }
    }
    copy_wait<0>();
  }

  // ---- LSE and output -----------------------------------------------------
  const OutputTarget target = output_target(p, piece, tile_rows.chunk, queries);
  const int dim0 = warp * Tile::kDimsPerWarp;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float sum = Layout::row_sum(row_sum[r]);
    if (!row_real[r]) continue;
    const RowResult result = finish_row(p, target, row_max[r], sum, group, row_head[r]);
    const float o_scale = result.o_scale * kv_scale / (Tile::kFp8Pv ? Tile::kPCodeScale : 1.f);
    const int64_t o_row = o_row_offset(target, row_query[r], group, row_head[r]);
    if constexpr (!kFp8) {
#pragma unroll
      for (int nt = 0; nt < kNO; ++nt) {
        const float x[2] = {acc[nt][2 * r] * o_scale, acc[nt][2 * r + 1] * o_scale};
        store_row_elems<2>(target.o, target.o_elem, o_row + dim0 + nt * 8 + 2 * quad, x);
      }
    } else {
      // Block j's lane holds dims 16 j + 4 quad .. + 3: even n-tile 2j,
      // odd 2j + 1, alternating.
#pragma unroll
      for (int j = 0; j < kNO / 2; ++j) {
        const int64_t d = o_row + dim0 + 16 * j + 4 * quad;
        const float x0[2] = {acc[2 * j][2 * r] * o_scale, acc[2 * j + 1][2 * r] * o_scale};
        const float x1[2] = {acc[2 * j][2 * r + 1] * o_scale, acc[2 * j + 1][2 * r + 1] * o_scale};
        store_row_elems<2>(target.o, target.o_elem, d, x0);
        store_row_elems<2>(target.o, target.o_elem, d + 2, x1);
      }
    }
    if (warp == 0 && Layout::row_leader(lane)) store_lse(target, row_query[r], group, row_head[r], result.lse);
  }
}

template <typename T, bool kFp8, bool kFp8Q, bool kFp8P>
__global__ void __launch_bounds__(MlaTile<T, kFp8, kFp8Q, kFp8P>::kThreads,
                                  MlaTile<T, kFp8, kFp8Q, kFp8P>::kMinBlocksPerSm)
    mla_forward_kernel(const FMHA_GPU_GRID_CONSTANT ForwardParams p) {
  using Tile = MlaTile<T, kFp8, kFp8Q, kFp8P>;
  extern __shared__ __align__(128) uint8_t smem[];
  // (No kInline: plan_forward never merges inside the MLA kernel.)
  attend_work_item<Tile::kThreads, false, false>(p, smem, [&](const PieceAt &piece, const GridCell &cell) {
    mla_attend_piece<Tile>(p, smem, piece, cell.row_tile, cell.group, cell.head_kv);
  });
}

}  // namespace fmha::gpu::kernels

#endif  // FMHA_SPLITK_BACKENDS_GPU_KERNELS_MLA_FORWARD_CUH_
