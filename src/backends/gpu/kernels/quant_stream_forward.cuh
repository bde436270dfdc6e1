// The streaming forward kernel for int4 / fp8 K/V at head dims up to 128
// (CUDA: it is written against the m16n8k16 fragment layout and movmatrix).
//
// Why a second kernel: a quantised row is a quarter (int4) or half (fp8) of
// a bf16 row, so at the memory limit a CTA must finish a tile two to four
// times faster than the bf16 kernel does, and that kernel's per-tile chain
// (staged rows decoded into fp16 tiles in shared memory, then four CTA-wide
// barriers around the score, softmax and PV steps) made the quantised path
// slower than bf16 (H200, B8 L32768: int4 1.5-2.0x, fp8 1.9x the bf16
// time). Here:
//  - every warp is its own pipeline over its own 32-key tiles (warp w takes
//    tiles w, w + 4, ... of the piece), with its own running max, sum and
//    D x rows output accumulator; the four are merged once per piece. The
//    main loop has no CTA barrier, only __syncwarp();
//  - the MMAs are transposed, S^T = K Q^T and O^T = V^T P^T, so that the
//    few queries of decode (Mq x Hq / Hkv rows) are the MMA's n of 8 (or
//    16) instead of its m of 16: for GQA 4 a quarter of the MMA work was
//    real, now half;
//  - packed rows go by cp.async into the warp's staging ring and are
//    decoded from there straight into MMA operand registers: K as the A
//    fragment of S^T, V as the A fragment of O^T; P^T comes from the S^T
//    accumulators, each 8 x 8 block transposed in registers (movmatrix)
//    into the B fragment (no P tile, no fp16 K/V tiles);
//  - the order of the head dims inside a k-step is free (QK^T sums over
//    them), so Q is stored in the order in which one 16-byte read of a K
//    row decodes into fragments (q_virtual_dim); the order of O's columns
//    is free too (each column is one head dim), undone when O is written.
// Numerics: int4 with several groups per row is the tile kernel's
// (quant_tile_loader.cuh): each K and V value is the exact n * scale +
// shift rounded once to fp16. Every other format enters the MMAs as its
// codes (exact in fp16), so no K or V value is rounded at all: K's scale
// multiplies the fp32 scores (and its shift, if any, adds shift x sum(Q)),
// V's multiplies the fp32 P before P is rounded to fp16 (per row, over a
// power-of-two normaliser), or O (fp32 scales per head / tensor), and V's
// shift goes into an fp32 sum of P x shift added to O (int4 one group,
// fp8 fp16x2). bf16 Q enters as fp16 after a power-of-two scale per row
// (exact); P is fp16.
#ifndef FMHA_SPLITK_BACKENDS_GPU_KERNELS_QUANT_STREAM_FORWARD_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_KERNELS_QUANT_STREAM_FORWARD_CUH_

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/gpu/kernels/forward_params.cuh"
#include "backends/gpu/kernels/splitk_forward.cuh"

namespace fmha::gpu::kernels {

// The packed format a streaming kernel decodes (what changes its code).
// kInt4Row: int4 with one coefficient word per row (one group), whose
// scale and shift leave the decode (see stream_piece); kInt4RowChunks the
// same rows copied as whole 16-byte chunks (kv_over16), a kernel of its
// own so that its copy loop has one width and no run-time branch on it.
enum class StreamFormat : int { kInt4 = 0, kFp8ScaleShift = 1, kFp8Float = 2, kInt4Row = 3, kInt4RowChunks = 4 };

// kQueryTiles: 8-query n-tiles of the MMAs (1 when a CTA's rows, Mq x
// Hq / Hkv, fit 8; else 2).
template <typename T, int kHeadDimBucket, StreamFormat kFormat, int kQueryTiles>
struct StreamTile {
  static constexpr int kHeadDim = kHeadDimBucket;
  static constexpr int kQTiles = kQueryTiles;
  static constexpr bool kWholeChunks = kFormat == StreamFormat::kInt4RowChunks;
  static constexpr bool kInt4Row = kFormat == StreamFormat::kInt4Row || kWholeChunks;
  static constexpr bool kInt4 = kFormat == StreamFormat::kInt4 || kInt4Row;
  // A row's scale and shift leave the decode (int4 row, fp8 fp16x2): the
  // codes enter the MMAs, score = scale x (Q . codes) + shift x sum(Q), V's
  // scale goes onto P and its shift into a sum added to O (stream_piece).
  static constexpr bool kFactored = kInt4Row || kFormat == StreamFormat::kFp8ScaleShift;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRows = 8 * kQueryTiles;      // query rows of the CTA
  static constexpr int kLaneRows = 2 * kQueryTiles;  // rows of a lane's S^T / O^T elements
  static constexpr int kWarpKeys = 32;               // keys of one warp tile
  static constexpr int kStages = 2;                  // warp tiles in a warp's staging ring
  static constexpr int kMinBlocksPerSm = 3;
  static constexpr int kKSteps = kHeadDim / 16;                       // k-steps of QK^T
  static constexpr int kScoreTiles = kWarpKeys / 8;                   // 8-key groups (K rows 8 j + g)
  static constexpr int kKeyTiles = kWarpKeys / 16;                    // m-tiles of S^T = k-steps of O^T
  static constexpr int kDimTiles = kHeadDim / 16;                     // m-tiles of O^T
  static constexpr int kCodeBytes = kInt4 ? kHeadDim / 2 : kHeadDim;  // packed values of a row
  static constexpr int kLaneWords = kCodeBytes / 16;                  // K words one lane decodes per key
  static constexpr int kVWords = kCodeBytes / 32;  // V words per key one lane decodes (8 lanes share a row)
  // Staged rows: 128-byte rows have their 16-byte chunks XOR-swizzled,
  // shorter ones a 16-byte pad; either way the lanes that read one word of
  // four rows 2 apart (the V fragment) hit distinct banks. An int4 row is
  // copied whole, its G coefficient words ending at kLead, where its
  // packed values start (16-byte aligned for the K reads).
  static constexpr bool kSwizzle = !kInt4 && kCodeBytes >= 128;
  static constexpr int kLead = kInt4 ? 32 : 0;  // room for up to 8 coefficient words
  static constexpr int kPitch = kSwizzle ? kCodeBytes : kLead + kCodeBytes + 16;
  static constexpr int kSideWords = kInt4 ? 0 : 1;  // fp8: the row's scale word, apart
  static constexpr int kStageRows = 2 * kWarpKeys;  // K rows, then V rows
  static constexpr int kSideOffset = kStageRows * kPitch;
  static constexpr int kStageBytes = kSideOffset + kStageRows * kSideWords * 4;
  static constexpr int kWarpStagingBytes = kStages * kStageBytes;

  // bf16 Q is scaled per row by a power of two into fp16's range, where
  // its 8-bit significands are exact (an fp16 low part, as the tile kernel
  // adds, would be zero but for values 2^-28 below the row's largest).
  static constexpr bool kScaleQ = std::is_same_v<T, bf16_t>;
  static constexpr int kQRowBytes = kHeadDim * 2;
  static constexpr int kQOffset = 0;
  static constexpr int kQScaleOffset = kQOffset + kRows * kQRowBytes;  // [kRows] float
  static constexpr int kQTopOffset = kQScaleOffset + kRows * 4;        // [16] uint
  static constexpr int kMaxOffset = kQTopOffset + kRows * 4;           // [warps][16] float
  static constexpr int kSumOffset = kMaxOffset + kWarps * kRows * 4;   // [warps][16] float
  // kFactored: each Q row's sum in 8-dim chunks, [kRows][kHeadDim / 8] float.
  static constexpr int kQSumOffset = kSumOffset + kWarps * kRows * 4;
  static constexpr int kQSumBytes = kFactored ? kRows * (kHeadDim / 8) * 4 : 0;
  static constexpr int kStagingOffset = kQSumOffset + kQSumBytes;
  static constexpr int kSmemBytes = kStagingOffset + kWarps * kWarpStagingBytes;
  // The merge of the warps: warp w's unnormalised O, [16][kOPitch] fp32 in
  // fragment column order, over its own staging ring (free by then).
  static constexpr int kOPitch = kHeadDim + 8;
  static_assert(kRows * kOPitch * 4 <= kWarpStagingBytes, "a warp's O fits its staging");
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head-dim buckets 64 and 128");
  static_assert(kSmemBytes <= 76800, "3 CTAs per SM (228 KB, 1 KB each reserved)");
};

// Position of real head dim d of Q in the k-step order K is decoded in: one
// lane (t = lane % 4) reads kLaneWords consecutive words of a K row and
// each word gives its B fragments of whole k-steps. int4: word W has
// nibbles 0-7 = dims 8W .. 8W + 7; its registers are (n0, n4), (n1, n5),
// (n2, n6), (n3, n7): b0, b1 of k-step 2q and b0, b1 of k-step 2q + 1 (q =
// W's index among the lane's words). fp8: word W = codes of dims 4W .. 4W
// + 3 gives b0 = (c0, c1), b1 = (c2, c3) of k-step q. b0 holds k = 2t, 2t +
// 1 and b1 k = 2t + 8, 2t + 9 of the 16 of a k-step. kStridedWords (int4
// row): lane t reads words t, t + 4, ... (4-byte reads) instead.
template <int kHeadDim, bool kInt4, bool kStridedWords = false>
__device__ __forceinline__ int q_virtual_dim(int d) {
  if constexpr (kInt4) {
    constexpr int kWords = kHeadDim / 32;  // K words a lane decodes per key
    const int word = d >> 3, nibble = d & 7;
    const int reg = nibble & 3, parity = nibble >> 2;
    const int t = kStridedWords ? word % 4 : word / kWords;
    const int ks = 2 * (kStridedWords ? word / 4 : word % kWords) + (reg >> 1);
    return 16 * ks + 8 * (reg & 1) + 2 * t + parity;
  } else {
    constexpr int kWords = kHeadDim / 16;
    const int word = d >> 2, byte = d & 3;
    const int t = word / kWords;
    const int ks = word % kWords;
    return 16 * ks + 8 * (byte >> 1) + 2 * t + (byte & 1);
  }
}

// Column of O's fragments that holds real head dim d. The lane with g =
// lane / 4 decodes V word 8 wi + g of a row: int4 nibble j is n-tile 8 wi +
// j, fp8 byte j n-tile 4 wi + j, and g is the column within the n-tile.
template <bool kInt4>
__device__ __forceinline__ int o_fragment_column(int d) {
  const int word = kInt4 ? d >> 3 : d >> 2;
  const int j = kInt4 ? d & 7 : d & 3;
  const int n_tile = (kInt4 ? 8 : 4) * (word >> 3) + j;
  return 8 * n_tile + (word & 7);
}

__device__ __forceinline__ uint32_t half2_bits(__half2 x) { return *reinterpret_cast<const uint32_t *>(&x); }
__device__ __forceinline__ __half2 bits_half2(uint32_t x) { return *reinterpret_cast<const __half2 *>(&x); }
// A coefficient word's fp16 scale (low half) and shift (high half).
__device__ __forceinline__ float2 scale_shift(uint32_t word) {
  return make_float2(__half2float(__ushort_as_half(static_cast<unsigned short>(word & 0xffffu))),
                     __half2float(__ushort_as_half(static_cast<unsigned short>(word >> 16))));
}

// (x & mask) | bits as one LOP3: written out, both constants would be
// immediates and the compiler emits two instructions (one immediate each).
__device__ __forceinline__ uint32_t and_or(uint32_t x, uint32_t mask, uint32_t bits) {
  uint32_t y;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" : "=r"(y) : "r"(x), "r"(mask), "r"(bits));
  return y;
}

// int4: the exact nibbles of fp16 1024 + n (low nibble of a byte) and 1024
// + 16 n (high nibble), as n (exact in fp16); then n * scale + shift
// rounded once.
__device__ __forceinline__ __half2 int4_low_codes(uint32_t x) {
  return __hsub2(bits_half2(and_or(x, 0x000f000fu, 0x64006400u)), __float2half2_rn(1024.f));
}
__device__ __forceinline__ __half2 int4_high_codes(uint32_t x) {
  return __hfma2(bits_half2(and_or(x, 0x00f000f0u, 0x64006400u)), __float2half2_rn(0.0625f), __float2half2_rn(-64.f));
}
__device__ __forceinline__ uint32_t int4_low(uint32_t x, __half2 scale, __half2 shift) {
  return half2_bits(__hfma2(int4_low_codes(x), scale, shift));
}
__device__ __forceinline__ uint32_t int4_high(uint32_t x, __half2 scale, __half2 shift) {
  return half2_bits(__hfma2(int4_high_codes(x), scale, shift));
}

// Four fp8 codes as two fp16 pairs (codes 0, 1 in `lo`, 2, 3 in `hi`),
// exact: every fp8 format's scales go onto the scores (K) and P or O (V)
// instead. sm_89+ converts E4M3FN in one instruction per pair, reading the
// word's upper half in place.
template <bool kFnuz>
__device__ __forceinline__ void fp8_codes(uint32_t codes, uint32_t &lo, uint32_t &hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (!kFnuz) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(codes));
  } else
#endif
  {
    lo = half2_bits(fp8_pair_to_half(codes, kFnuz));
    hi = half2_bits(fp8_pair_to_half(codes >> 16, kFnuz));
  }
}

// S^T's keys of one query lie across the lanes of one t (g = 0..7) and
// within a lane: reductions over g.
__device__ __forceinline__ float max_over_keys(float x) {
#pragma unroll
  for (int mask = 4; mask < 32; mask *= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, mask));
  return x;
}
__device__ __forceinline__ float sum_over_keys(float x) {
#pragma unroll
  for (int mask = 4; mask < 32; mask *= 2) x += __shfl_xor_sync(0xffffffffu, x, mask);
  return x;
}

// The transpose of an 8 x 8 matrix of 16-bit pairs held as an MMA
// accumulator fragment (lane (g, t): row g, columns 2 t, 2 t + 1).
__device__ __forceinline__ uint32_t transpose_8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

template <typename Tile>
__device__ __forceinline__ uint32_t stream_code_offset(int row, int byte) {
  if constexpr (Tile::kSwizzle) {
    const int chunk = (byte >> 4) ^ (2 * ((row >> 1) & 3));
    return static_cast<uint32_t>(row * Tile::kPitch + (chunk << 4) + (byte & 15));
  } else {
    return static_cast<uint32_t>(row * Tile::kPitch + Tile::kLead + byte);
  }
}

template <typename T, int kHeadDimBucket, StreamFormat kFormat, int kQueryTiles>
__device__ __forceinline__ void stream_piece(const ForwardParams &p, uint8_t *smem, const PieceAt &at, int32_t row_tile,
                                             int32_t group, int32_t head_kv) {
  using Tile = StreamTile<T, kHeadDimBucket, kFormat, kQueryTiles>;
  constexpr int kQN = Tile::kQTiles;
  constexpr int kLR = Tile::kLaneRows;
  constexpr bool kInt4 = Tile::kInt4;
  constexpr int kHeadDim = Tile::kHeadDim;
  constexpr int kNS = Tile::kScoreTiles;
  constexpr int kWarpKeys = Tile::kWarpKeys;
  constexpr int kStages = Tile::kStages;

  TileRows tile_rows;
  if (!find_tile_rows(p, at, row_tile, Tile::kRows, &tile_rows)) return;
  const Piece &piece = tile_rows.piece;
  const QueryRange &queries = tile_rows.queries;
  const int32_t row0 = tile_rows.row0;
  const int32_t rows_here = tile_rows.rows_here;
  const int32_t kv_lo = tile_rows.kv_lo;
  const int32_t kv_hi = tile_rows.kv_hi;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;  // fragment group: key (S^T), head dim (O^T), query (B operands)
  const int t = lane % 4;

  // The rows (queries) of this lane's S^T and O^T elements: columns 2 t,
  // 2 t + 1 of each 8-query n-tile, lane row r = 8 (r / 2) + 2 t + r % 2.
  const auto lane_row = [&](int r) { return 8 * (r / 2) + 2 * t + r % 2; };
  int32_t row_query[kLR];
  int32_t row_head[kLR];
  int32_t vis_lo[kLR];
  int32_t vis_hi[kLR];
  int64_t bias_row[kLR];
  float row_scale[kLR];
#pragma unroll
  for (int r = 0; r < kLR; ++r) {
    const RowKeys keys = row_keys(p, tile_rows, head_kv, lane_row(r));
    row_query[r] = keys.query;
    row_head[r] = keys.head;
    vis_lo[r] = keys.lo;
    vis_hi[r] = keys.hi;
    bias_row[r] = piece.batch * p.bias_stride[0] + group * p.bias_stride[1] + row_head[r] * p.bias_stride[2] +
                  row_query[r] * p.bias_stride[3];
    row_scale[r] = p.score_scale;
    if (p.q_fp8) row_scale[r] *= q_code_scale(p, queries, group, row_query[r], row_head[r]);
  }

  uint8_t *const q_tile = smem + Tile::kQOffset;
  float *const q_row_scale = reinterpret_cast<float *>(smem + Tile::kQScaleOffset);
  uint32_t *const q_row_top = reinterpret_cast<uint32_t *>(smem + Tile::kQTopOffset);
  float *const max_exchange = reinterpret_cast<float *>(smem + Tile::kMaxOffset);
  float *const sum_exchange = reinterpret_cast<float *>(smem + Tile::kSumOffset);
  uint8_t *const staging = smem + Tile::kStagingOffset + warp * Tile::kWarpStagingBytes;
  const SmemAddr q_base = smem_address(q_tile);
  const SmemAddr staging_base = smem_address(staging);

  // ---- Q, in k-step order (zero past rows_here and Dqk) ------------------
  // bf16 Q becomes fp16 after a power-of-two scale per row (kScaleQ);
  // fp8 Q codes are exact in fp16; fp16 Q is taken as it is.
  constexpr int kQChunks = kHeadDim / 8;
  const auto load_q_chunk = [&](int row, int c, float(&x)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = 0.f;
    if (row >= rows_here || c * 8 >= p.head_dim_qk) return;
    const int32_t packed = row0 + row;
    const int32_t head = head_kv * p.heads_per_kv + packed % p.heads_per_kv;
    const int64_t offset = queries.batch * p.q_stride[0] +
                           static_cast<int64_t>(queries.row0 + packed / p.heads_per_kv) * p.q_stride[1] +
                           group * p.q_stride[2] + head * p.q_stride[3] + c * 8;
    if (p.q_fp8) {
      const uint2 codes = *reinterpret_cast<const uint2 *>(static_cast<const uint8_t *>(p.q) + offset);
      const bool fnuz = p.fp8_format == FMHA_FP8_E4M3FNUZ;
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = fp8_value((j < 4 ? codes.x : codes.y) >> (8 * (j % 4)), fnuz);
    } else {
      const uint4 raw = *reinterpret_cast<const uint4 *>(static_cast<const T *>(p.q) + offset);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if constexpr (std::is_same_v<T, bf16_t>) {
          x[2 * j] = __uint_as_float(words[j] << 16);
          x[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
        } else {
          const float2 f = __half22float2(bits_half2(words[j]));
          x[2 * j] = f.x;
          x[2 * j + 1] = f.y;
        }
      }
    }
  };
  if constexpr (Tile::kScaleQ) {
    for (int i = tid; i < Tile::kRows; i += Tile::kThreads) q_row_top[i] = 0u;
    __syncthreads();
    for (int i = tid; i < Tile::kRows * kQChunks; i += Tile::kThreads) {
      float x[8];
      load_q_chunk(i / kQChunks, i % kQChunks, x);
      float top = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) top = fmaxf(top, fabsf(x[j]));
      atomicMax(&q_row_top[i / kQChunks], __float_as_uint(top));  // non-negative floats order as their bits
    }
    __syncthreads();
  }
  for (int i = tid; i < Tile::kRows * kQChunks; i += Tile::kThreads) {
    const int row = i / kQChunks;
    const int c = i % kQChunks;
    float x[8];
    load_q_chunk(row, c, x);
    float up = 1.f;
    if constexpr (Tile::kScaleQ) {
      const float top = __uint_as_float(q_row_top[row]);
      int shift = 0;
      if (top > 0.f && top <= 3.0e38f)
        shift = min(14 - (static_cast<int>((__float_as_uint(top) >> 23) & 0xffu) - 127), 126);
      up = __int_as_float((127 + shift) << 23);
      if (c == 0) q_row_scale[row] = __int_as_float((127 - shift) << 23);
    }
    float chunk_sum = 0.f;  // of the fp16 values the MMAs see
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int v = q_virtual_dim<kHeadDim, kInt4, Tile::kInt4Row>(8 * c + j);
      const uint32_t at = swizzled<Tile::kQRowBytes>(row, v >> 3) + 2 * (v & 7);
      const __half a = __float2half_rn(x[j] * up);
      *reinterpret_cast<__half *>(q_tile + at) = a;
      chunk_sum += __half2float(a);
    }
    if constexpr (Tile::kFactored) reinterpret_cast<float *>(smem + Tile::kQSumOffset)[i] = chunk_sum;
  }
  // Staged bytes past Dqk / Dv are never copied: zero, so that they decode
  // to finite values (they meet Q's zeros or unwritten O columns).
  if (p.head_dim_qk < kHeadDim || p.head_dim_v < kHeadDim)
    for (int i = lane; i < Tile::kWarpStagingBytes / 16; i += 32)
      *reinterpret_cast<uint4 *>(staging + 16 * i) = make_uint4(0, 0, 0, 0);
  __syncthreads();
  if constexpr (Tile::kScaleQ) {
#pragma unroll
    for (int r = 0; r < kLR; ++r) row_scale[r] *= q_row_scale[lane_row(r)];
  }
  // kFactored: the sum of each of this lane's Q rows (as the MMAs see it),
  // which the K shifts multiply.
  [[maybe_unused]] float q_sum[kLR];
  if constexpr (Tile::kFactored) {
    const float *const chunk_sums = reinterpret_cast<const float *>(smem + Tile::kQSumOffset);
#pragma unroll
    for (int r = 0; r < kLR; ++r) {
      q_sum[r] = 0.f;
#pragma unroll
      for (int c = 0; c < kQChunks; ++c) q_sum[r] += chunk_sums[lane_row(r) * kQChunks + c];
    }
  }

  // ---- The packed rows of this CTA's K/V head ----------------------------
  const bool fnuz = p.fp8_format == FMHA_FP8_E4M3FNUZ;
  const bool per_row = !kInt4 && p.kv_scale_granularity == FMHA_SCALE_PER_ROW;
  const int64_t unit = kInt4 ? 4 : 1;  // int4 views count int32 words, fp8 views bytes
  const uint8_t *const k_rows =
      static_cast<const uint8_t *>(p.k) + (group * p.k_stride[2] + head_kv * p.k_stride[3]) * unit;
  const uint8_t *const v_rows =
      static_cast<const uint8_t *>(p.v) + (group * p.v_stride[2] + head_kv * p.v_stride[3]) * unit;
  const int64_t k_stride0 = p.k_stride[0] * unit, k_stride1 = p.k_stride[1] * unit;
  const int64_t v_stride0 = p.v_stride[0] * unit, v_stride1 = p.v_stride[1] * unit;
  const int32_t groups = kInt4 ? p.kv_quant_groups : 0;
  const int32_t k_row_words = kInt4 ? groups + p.head_dim_qk / 8 : p.head_dim_qk / 4;
  const int32_t v_row_words = kInt4 ? groups + p.head_dim_v / 8 : p.head_dim_v / 4;
  const uint32_t *k_scale = nullptr;
  const uint32_t *v_scale = nullptr;
  uint32_t k_fixed = 0, v_fixed = 0;
  if constexpr (!kInt4) {
    const int64_t k_head = per_row ? group * p.k_scale_stride[2] + head_kv * p.k_scale_stride[3]
                           : p.kv_scale_granularity == FMHA_SCALE_PER_HEAD
                               ? group * p.k_scale_stride[0] + head_kv * p.k_scale_stride[1]
                               : 0;
    const int64_t v_head = per_row ? group * p.v_scale_stride[2] + head_kv * p.v_scale_stride[3]
                           : p.kv_scale_granularity == FMHA_SCALE_PER_HEAD
                               ? group * p.v_scale_stride[0] + head_kv * p.v_scale_stride[1]
                               : 0;
    k_scale = static_cast<const uint32_t *>(p.k_scale) + k_head;
    v_scale = static_cast<const uint32_t *>(p.v_scale) + v_head;
    if (!per_row) {
      k_fixed = __ldg(k_scale);
      v_fixed = __ldg(v_scale);
    }
  }
  // A per-head / per-tensor fp32 scale multiplies every K (V) value of the
  // CTA alike: it goes onto the scores (O) once, and the codes enter the
  // MMAs as they are (exact; one rounding fewer than code x scale in fp16).
  const bool folded = kFormat == StreamFormat::kFp8Float && !per_row;
  if (folded) {
#pragma unroll
    for (int r = 0; r < kLR; ++r) row_scale[r] *= __uint_as_float(k_fixed);
  }
  const int64_t seq_origin = sequence_key_origin(p.seq, piece.batch);
  const int64_t seq_outer = p.seq.kv_layout == FMHA_KV_GAPPY ? 0 : piece.batch;
  // 16-byte copies need whole chunks of coefficient words too (never so
  // for int4 rows, one word each: their copy width is the kernel's, below).
  const bool copy16 = !Tile::kInt4Row && p.kv_copy16 != 0 && (!kInt4 || groups % 4 == 0);
  // int4 row (kv_over16: the views start and end on 16-byte boundaries and
  // keep a head's rows at one offset mod 16, forward.cu): a row's 16-byte
  // aligned chunks are copied whole, with up to 12 bytes of the rows
  // beside it, into a 16-byte aligned staged row where the row keeps its
  // offset mod 16 (misalign): 5 copies of a 68-byte row instead of 17
  // (the 4-byte copies' address arithmetic and LDGSTS queue were a third
  // of the stall samples, ncu run 71). The decode reads its words `code_shift`
  // bytes off where the 4-byte copies put them (codes at kLead).
  constexpr bool over16 = Tile::kWholeChunks;  // the launcher's pick (kv_over16)
  const int k_misalign = over16 ? static_cast<int>(reinterpret_cast<uintptr_t>(k_rows) & 15) : 0;
  const int v_misalign = over16 ? static_cast<int>(reinterpret_cast<uintptr_t>(v_rows) & 15) : 0;
  const int k_code_shift = over16 ? k_misalign + 4 - Tile::kLead : 0;
  const int v_code_shift = over16 ? v_misalign + 4 - Tile::kLead : 0;

  // Lane l locates key l of a warp tile (K row l, V row l). Paged and
  // ragged keys take a table lookup: it is made one tile ahead of the
  // copies (outer_of), so its latency overlaps a tile's math.
  const auto outer_of = [&](int32_t tile_start) -> int64_t {
    const int32_t key = tile_start + lane;
    if (key >= kv_hi) return 0;
    if (p.seq.kv_layout == FMHA_KV_PAGED)
      return __ldg(p.seq.block_table + piece.batch * p.seq.block_table_stride[0] +
                   ((seq_origin + key) >> p.seq.page_size_log2) * p.seq.block_table_stride[1]);
    if (p.seq.kv_layout == FMHA_KV_RAGGED)
      return __ldg(p.seq.kv_indices + (seq_origin + (key >> p.seq.page_size_log2)) * p.seq.kv_indices_stride);
    return seq_outer;
  };
  // The copies are dealt out flat: unit f = lane + 32 i (i < units) of the
  // 32 K (then V) rows is unit f % units of row f / units, so consecutive
  // lanes take consecutive 16- or 4-byte units of a row and one copy
  // instruction touches a few whole cache lines (a lane per row made it
  // touch 32: the LSU, not memory, was then the limit). f / units is
  // the high word of 2 f * ceil(2^31 / units), exact for f < 2^31 / units
  // (and units = 1 fits), and
  // every address is affine in (f, row): a copy costs a handful of
  // integer operations (a running row / unit pair with its wrap-around
  // made the loop about 45 instructions per copy). A row's source is
  // affine in its key for contiguous layouts, else the lane owning the key
  // shares its offset.
  const bool wide = copy16 || over16;
  const int unit_bytes = wide ? 16 : 4;
  // int4 rows land with their coefficients just before kLead.
  const int coef_bytes = kInt4 ? 4 * groups : 0;
  const int row_lead = Tile::kLead - coef_bytes;  // where a staged row's copy starts
  struct RowCopy {
    int units;        // copy units of a row (<= 32 up to D 128)
    uint32_t magic;   // ceil(2^31 / units)
    int64_t src_gap;  // contiguous layouts: source bytes from one row's end to the next row's start
    int32_t dst_gap;  // staging bytes from one row's end to the next row's start (unswizzled rows)
  };
  const auto row_copy = [&](int32_t row_words, int64_t stride1, int misalign) {
    RowCopy c;
    c.units = over16 ? (misalign + 4 * row_words + 15) / 16 : copy16 ? row_words / 4 : row_words;
    c.magic = static_cast<uint32_t>(((uint64_t{1} << 31) + c.units - 1) / c.units);
    c.src_gap = stride1 - static_cast<int64_t>(c.units) * unit_bytes;
    c.dst_gap = Tile::kPitch - c.units * unit_bytes;
    return c;
  };
  const RowCopy k_copy = row_copy(k_row_words, k_stride1, k_misalign);
  const RowCopy v_copy = row_copy(v_row_words, v_stride1, v_misalign);
  const int lead = over16 ? 0 : row_lead;  // where a staged row's copy starts
  // Affine sources take one multiply-add per copy with an unsigned 32-bit
  // gap (any other stride takes the shared offsets).
  const auto narrow = [](int64_t x) { return x >= 0 && x <= UINT32_MAX; };
  const bool affine = p.seq.kv_layout != FMHA_KV_PAGED && p.seq.kv_layout != FMHA_KV_RAGGED && narrow(k_copy.src_gap) &&
                      narrow(v_copy.src_gap);

  const auto load_tile = [&](int stage, int32_t tile_start, int64_t outer) {
    const SmemAddr base = staging_base + stage * Tile::kStageBytes;
    const int32_t key = tile_start + lane;
    const bool valid = key < kv_hi;
    const int valid_rows = min(kv_hi - tile_start, kWarpKeys);  // the tile's first rows are its keys
    int64_t inner = seq_origin + key;
    if (p.seq.kv_layout == FMHA_KV_PAGED)
      inner = (seq_origin + key) & ((int64_t{1} << p.seq.page_size_log2) - 1);
    else if (p.seq.kv_layout == FMHA_KV_RAGGED)
      inner = key & ((1 << p.seq.page_size_log2) - 1);
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const RowCopy &c = part == 0 ? k_copy : v_copy;
      const uint8_t *const rows_base = part == 0 ? k_rows - k_misalign : v_rows - v_misalign;
      const int64_t stride0 = part == 0 ? k_stride0 : v_stride0;
      const int64_t stride1 = part == 0 ? k_stride1 : v_stride1;
      const int64_t my_offset = outer * stride0 + inner * stride1;  // this lane's key
      const int offset_lo = static_cast<int>(my_offset & 0xffffffff);
      const int offset_hi = static_cast<int>(my_offset >> 32);
      const uint32_t src_gap = static_cast<uint32_t>(c.src_gap);
      const auto copy_units = [&](auto whole, auto wide, auto contiguous) {
        constexpr bool kWhole = decltype(whole)::value;  // every row of the tile is a key
        constexpr int kUnitBytes = decltype(wide)::value ? 16 : 4;
        constexpr bool kAffine = decltype(contiguous)::value;
        // Byte f * kUnitBytes of the part's rows as if they were packed,
        // in the source (contiguous layouts) and in staging.
        const uint8_t *const src_packed =
            rows_base + seq_outer * stride0 + (seq_origin + tile_start) * stride1 + lane * kUnitBytes;
        const SmemAddr dst_packed = base + part * kWarpKeys * Tile::kPitch + lead + lane * kUnitBytes;
        // Unit f of the copy, `offset` bytes past the running pointers
        // (`packed`: its byte as if the rows were packed, contiguous
        // layouts; `dst`: its staged byte). The offset is added last, so
        // that it stays an immediate of the copy.
        const uint8_t *packed = src_packed;
        SmemAddr dst = dst_packed;
        const auto copy_unit = [&](uint32_t f, int offset) {
          const int row = static_cast<int>(__umulhi(2 * f, c.magic));
          const int unit = static_cast<int>(f) - row * c.units;
          const uint8_t *at;
          if constexpr (kAffine) {
            at = packed + static_cast<uint64_t>(static_cast<uint32_t>(row)) * src_gap + offset;
          } else {
            const int lo = __shfl_sync(0xffffffffu, offset_lo, row);
            const int hi = __shfl_sync(0xffffffffu, offset_hi, row);
            at = rows_base + ((static_cast<int64_t>(hi) << 32) | static_cast<uint32_t>(lo)) + unit * kUnitBytes;
          }
          bool row_valid = true;
          if constexpr (!kWhole) {
            row_valid = row < valid_rows;
            if (!row_valid) at = rows_base;
          }
          SmemAddr to;
          if constexpr (Tile::kSwizzle)
            to = base + stream_code_offset<Tile>(row + part * kWarpKeys, unit * kUnitBytes);
          else
            to = dst + row * c.dst_gap + offset;
          if constexpr (kUnitBytes == 16)
            copy_async_16(to, at, row_valid);
          else
            copy_async_4(to, at, row_valid);
        };
        // Four copies per step without a trip test between them; running
        // pointers keep the unit offsets immediate.
        constexpr int kStep = 32 * kUnitBytes;
        uint32_t f = static_cast<uint32_t>(lane);
        int i = 0;
        for (; i + 4 <= c.units; i += 4) {
#pragma unroll
          for (int j = 0; j < 4; ++j) copy_unit(f + 32 * j, j * kStep);
          f += 128;
          packed += 4 * kStep;
          dst += 4 * kStep;
        }
        for (; i < c.units; ++i) {
          copy_unit(f, 0);
          f += 32;
          packed += kStep;
          dst += kStep;
        }
      };
      // Warp-uniform branches: each loop body holds only what it needs.
      const auto by_layout = [&](auto whole, auto wide) {
        if (affine)
          copy_units(whole, wide, std::true_type{});
        else
          copy_units(whole, wide, std::false_type{});
      };
      const auto by_width = [&](auto whole) {
        if constexpr (Tile::kInt4Row) {
          by_layout(whole, std::bool_constant<over16>{});  // fixed by the kernel
        } else {
          if (wide)
            by_layout(whole, std::true_type{});
          else
            by_layout(whole, std::false_type{});
        }
      };
      if (valid_rows == kWarpKeys)
        by_width(std::true_type{});
      else
        by_width(std::false_type{});
      if (per_row) {
        const uint32_t *scale = part == 0 ? k_scale : v_scale;
        if (valid)
          scale += part == 0 ? outer * p.k_scale_stride[0] + inner * p.k_scale_stride[1]
                             : outer * p.v_scale_stride[0] + inner * p.v_scale_stride[1];
        copy_async_4(base + Tile::kSideOffset + (lane + part * kWarpKeys) * 4, scale, valid);
      }
    }
  };

  // Per-lane constants of the decode: the coefficient word (int4 group) of
  // each K word this lane decodes and of each V word, and whether the word
  // holds dims of the head at all.
  int k_coef_at[Tile::kLaneWords];  // int4: byte offset of the word's coefficient in a staged row
  bool k_word_valid[Tile::kLaneWords];
#pragma unroll
  for (int q = 0; q < Tile::kLaneWords; ++q) {
    const int word = t * Tile::kLaneWords + q;
    const int first_dim = kInt4 ? 8 * word : 4 * word;
    k_word_valid[q] = first_dim < p.head_dim_qk;
    const int group = kInt4 && p.head_dim_qk >= groups ? min(first_dim / (p.head_dim_qk / groups), groups - 1) : 0;
    k_coef_at[q] = row_lead + 4 * group;
  }
  // Where this lane's K words (row g) and V words (rows 2 t, 2 t + 1) lie in
  // a staged row: a swizzled row's chunk order depends on (row / 2) % 4,
  // which is g / 2 for every K row 8 j + g and t for every V row it reads
  // (32 + 16 kk + 8 h + 2 t + {0, 1}), so these offsets plus multiples of
  // the pitch reach all of them.
  uint32_t k_code_at[(Tile::kLaneWords + 3) / 4];
#pragma unroll
  for (int q = 0; q < Tile::kLaneWords; q += 4)
    k_code_at[q / 4] = stream_code_offset<Tile>(g, 4 * (t * Tile::kLaneWords + q));
  // int4 row: K words t + 4 q, one 4-byte read each (their staged place
  // moves with k_code_shift; 4-byte reads of rows 8 j + g hit 32 distinct banks
  // at the 112- and 80-byte pitches).
  [[maybe_unused]] uint32_t k_word_at[Tile::kLaneWords];
#pragma unroll
  for (int q = 0; q < Tile::kLaneWords; ++q) k_word_at[q] = stream_code_offset<Tile>(g, 4 * (4 * q + t)) + k_code_shift;
  uint32_t v_code_at[Tile::kVWords];
#pragma unroll
  for (int wi = 0; wi < Tile::kVWords; ++wi)
    v_code_at[wi] = stream_code_offset<Tile>(2 * t, 4 * (8 * wi + g)) + (Tile::kInt4Row ? v_code_shift : 0);
  int v_coef_at[Tile::kVWords];
  bool v_word_valid[Tile::kVWords];
#pragma unroll
  for (int wi = 0; wi < Tile::kVWords; ++wi) {
    const int word = 8 * wi + g;
    const int first_dim = kInt4 ? 8 * word : 4 * word;
    v_word_valid[wi] = first_dim < p.head_dim_v;
    const int group = kInt4 && p.head_dim_v >= groups ? min(first_dim / (p.head_dim_v / groups), groups - 1) : 0;
    v_coef_at[wi] = row_lead + 4 * group;
  }

  const bool plain_scores = !p.has_softcap && p.bias == nullptr;
  // The keys every real row of the tile sees (warp-uniform).
  int32_t whole_lo = INT32_MIN, whole_hi = INT32_MAX;
#pragma unroll
  for (int r = 0; r < kLR; ++r)
    if (lane_row(r) < rows_here) {
      whole_lo = max(whole_lo, vis_lo[r]);
      whole_hi = min(whole_hi, vis_hi[r]);
    }
  whole_lo = __reduce_max_sync(0xffffffffu, whole_lo);
  whole_hi = __reduce_min_sync(0xffffffffu, whole_hi);

  // O^T = V^T P^T: [head-dim m-tile][query n-tile], element e is head dim
  // 16 m + g + 8 (e / 2) (fragment order) of lane row 2 n + e % 2.
  float acc[Tile::kDimTiles][kQN][4];
#pragma unroll
  for (int m = 0; m < Tile::kDimTiles; ++m)
#pragma unroll
    for (int n = 0; n < kQN; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.f;
  float row_max[kLR];  // log2 units
  float row_sum[kLR];  // this lane's share (its keys)
#pragma unroll
  for (int r = 0; r < kLR; ++r) row_max[r] = -INFINITY, row_sum[r] = 0.f;
  // O's unit: 1, or with fp32 V scales per row the warp's V normaliser
  // (set at its first tile).
  // kFactored: V's scales go onto P the same way, and its shifts into
  // shift_sum (sum over keys of P x shift, in O's own units, this lane's
  // keys), added to every column of O at the end.
  const bool p_carries_v_scale = Tile::kFactored || (kFormat == StreamFormat::kFp8Float && per_row);
  float v_norm = p_carries_v_scale ? 0.f : 1.f;
  [[maybe_unused]] float shift_sum[kLR];
#pragma unroll
  for (int r = 0; r < kLR; ++r) shift_sum[r] = 0.f;

  const int num_tiles = (kv_hi - kv_lo + kWarpKeys - 1) / kWarpKeys;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + Tile::kWarps - 1) / Tile::kWarps : 0;
  const auto tile_start_of = [&](int i) { return kv_lo + (warp + i * Tile::kWarps) * kWarpKeys; };
  static_assert(kStages == 2, "the lookups run one tile ahead of a two-stage ring");
  int64_t next_outer = my_tiles > 0 ? outer_of(tile_start_of(0)) : 0;
  if (my_tiles > 0) load_tile(0, tile_start_of(0), next_outer);
  copy_commit();
  next_outer = my_tiles > 1 ? outer_of(tile_start_of(1)) : 0;

  // The tile loop, with the fp8 flavour fixed at compile time: a run-time
  // test inside the decode costs a branch per code pair.
  const auto run_tiles = [&](auto fnuz_tag) {
    [[maybe_unused]] constexpr bool kFnuz = decltype(fnuz_tag)::value;
    for (int i = 0; i < my_tiles; ++i) {
      if (i + 1 < my_tiles) {
        load_tile((i + 1) % kStages, tile_start_of(i + 1), next_outer);
        next_outer = i + 2 < my_tiles ? outer_of(tile_start_of(i + 2)) : 0;
      }
      copy_commit();
      copy_wait<kStages - 1>();
      __syncwarp();  // every lane's rows of tile i are in place
      const uint8_t *const stage = staging + (i % kStages) * Tile::kStageBytes;
      [[maybe_unused]] const uint8_t *const side = stage + Tile::kSideOffset;
      const int32_t tile_start = tile_start_of(i);

      // ---- S^T = K Q^T: lane (g, t) decodes keys 8 j + g; the key m-tile
      // mt's A operand is the decode of groups j = 2 mt (rows g) and 2 mt + 1
      // (rows g + 8); Q^T is the B operand (queries as the MMA's n) --------
      float s[Tile::kKeyTiles][kQN][4];
#pragma unroll
      for (int mt = 0; mt < Tile::kKeyTiles; ++mt)
#pragma unroll
        for (int n = 0; n < kQN; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
      uint32_t k_words[kNS][Tile::kLaneWords];
      // int4: per word (group); int4 row / fp8: the row's coefficients
      constexpr int kCoefs = kInt4 && !Tile::kInt4Row ? Tile::kLaneWords : 1;
      uint32_t k_coef[kNS][kCoefs];
#pragma unroll
      for (int j = 0; j < kNS; ++j) {
        [[maybe_unused]] const int row = 8 * j + g;
        if constexpr (Tile::kInt4Row) {
#pragma unroll
          for (int w = 0; w < Tile::kLaneWords; ++w)
            k_words[j][w] = *reinterpret_cast<const uint32_t *>(stage + 8 * j * Tile::kPitch + k_word_at[w]);
        } else if constexpr (Tile::kLaneWords >= 4) {
#pragma unroll
          for (int q = 0; q < Tile::kLaneWords; q += 4) {
            const uint4 w = *reinterpret_cast<const uint4 *>(stage + 8 * j * Tile::kPitch + k_code_at[q / 4]);
            k_words[j][q] = w.x, k_words[j][q + 1] = w.y, k_words[j][q + 2] = w.z, k_words[j][q + 3] = w.w;
          }
        } else {
          const uint2 w = *reinterpret_cast<const uint2 *>(stage + 8 * j * Tile::kPitch + k_code_at[0]);
          k_words[j][0] = w.x, k_words[j][1] = w.y;
        }
        if constexpr (Tile::kInt4Row) {
          k_coef[j][0] =
              *reinterpret_cast<const uint32_t *>(stage + row * Tile::kPitch + Tile::kLead - 4 + k_code_shift);
        } else if constexpr (kInt4) {
#pragma unroll
          for (int q = 0; q < Tile::kLaneWords; ++q)
            k_coef[j][q] =
                k_word_valid[q] ? *reinterpret_cast<const uint32_t *>(stage + row * Tile::kPitch + k_coef_at[q]) : 0u;
        } else {
          // (fp32 scales go onto the scores: K codes enter the MMAs as they are.)
          if constexpr (kFormat == StreamFormat::kFp8ScaleShift)
            k_coef[j][0] = per_row ? reinterpret_cast<const uint32_t *>(side)[row] : k_fixed;
          else
            k_coef[j][0] = 0u;
        }
      }
#pragma unroll
      for (int ks = 0; ks < Tile::kKSteps; ++ks) {
        // Q rows 8 n + g, dims 2 t, 2 t + 1 (b0) and 2 t + 8, 2 t + 9 (b1).
        uint32_t qb[kQN][2];
        if constexpr (kQN == 1) {
          uint32_t r[2];
          ldmatrix_x2(r, q_base + swizzled<Tile::kQRowBytes>(lane % 8, 2 * ks + (lane / 8) % 2));
          qb[0][0] = r[0], qb[0][1] = r[1];
        } else {
          uint32_t r[4];
          ldmatrix_x4(r, q_base + swizzled<Tile::kQRowBytes>(lane % 16, 2 * ks + lane / 16));
          qb[0][0] = r[0], qb[0][1] = r[2], qb[1][0] = r[1], qb[1][1] = r[3];
        }
        uint32_t b0[kNS], b1[kNS];
#pragma unroll
        for (int j = 0; j < kNS; ++j) {
          if constexpr (Tile::kInt4Row) {
            // The codes alone: the row's scale and shift go onto its scores.
            const uint32_t word = k_words[j][ks / 2];
            const uint32_t x = ks % 2 == 0 ? word : word >> 8;
            b0[j] = half2_bits(int4_low_codes(x));
            b1[j] = half2_bits(int4_high_codes(x));
          } else if constexpr (kInt4) {
            const uint32_t word = k_words[j][ks / 2];
            const uint32_t coef = k_coef[j][ks / 2];
            const __half2 scale = __half2half2(__ushort_as_half(static_cast<unsigned short>(coef & 0xffffu)));
            const __half2 shift = __half2half2(__ushort_as_half(static_cast<unsigned short>(coef >> 16)));
            const uint32_t x = ks % 2 == 0 ? word : word >> 8;
            b0[j] = int4_low(x, scale, shift);
            b1[j] = int4_high(x, scale, shift);
          } else {
            // The codes alone (past Dqk staged zeros, which meet Q's zeros).
            fp8_codes<kFnuz>(k_words[j][ks], b0[j], b1[j]);
          }
        }
#pragma unroll
        for (int mt = 0; mt < Tile::kKeyTiles; ++mt) {
          const uint32_t a[4] = {b0[2 * mt], b0[2 * mt + 1], b1[2 * mt], b1[2 * mt + 1]};
#pragma unroll
          for (int n = 0; n < kQN; ++n) mma_16x8x16<__half>(s[mt][n], a, qb[n][0], qb[n][1]);
        }
      }

      // ---- Scores in log2 units, masked; this warp's online softmax ------
      // Element e of s[mt][n]: key 16 mt + g + 8 (e / 2), lane row 2 n + e % 2.
      float tile_max[kLR];
#pragma unroll
      for (int r = 0; r < kLR; ++r) tile_max[r] = -INFINITY;
      // A tile that every real row sees whole (all but a piece's edges and a
      // mask's boundary) skips the per-key bounds; padding rows then score
      // finite values that are never written.
      // Softcap and bias are warp-uniform: tested once per tile, not per
      // score (per score, the branches cost more than the scores).
      // fp8 with fp32 scales per row: each key's K scale, on its scores
      // (keys 16 mt + g, 16 mt + g + 8 of this lane).
      // kFactored: score = scale x (Q . codes) + shift x sum(Q), per key
      // (keys 16 mt + g + 8 h are the rows 8 j + g it decoded, j = 2 mt + h).
      float key_scale[Tile::kKeyTiles][2];
      [[maybe_unused]] float key_shift[Tile::kKeyTiles][2];
#pragma unroll
      for (int mt = 0; mt < Tile::kKeyTiles; ++mt) {
        key_scale[mt][0] = key_scale[mt][1] = 1.f;
        if constexpr (Tile::kFactored) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float2 c = scale_shift(k_coef[2 * mt + h][0]);
            key_scale[mt][h] = c.x;
            key_shift[mt][h] = c.y;
          }
        }
        if constexpr (kFormat == StreamFormat::kFp8Float) {
          if (per_row) {
            const float *const scales = reinterpret_cast<const float *>(side);
            key_scale[mt][0] = scales[16 * mt + g];
            key_scale[mt][1] = scales[16 * mt + g + 8];
          }
        }
      }
      const auto score = [&](auto bounded, auto plain) {
        constexpr bool kPlain = decltype(plain)::value;  // no softcap, no bias
#pragma unroll
        for (int mt = 0; mt < Tile::kKeyTiles; ++mt)
#pragma unroll
          for (int n = 0; n < kQN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = 2 * n + e % 2;
              const int32_t key = tile_start + 16 * mt + g + 8 * (e / 2);
              float x = s[mt][n][e];
              if constexpr (Tile::kFactored) x = fmaf(x, key_scale[mt][e / 2], key_shift[mt][e / 2] * q_sum[r]);
              x *= row_scale[r];
              if constexpr (kFormat == StreamFormat::kFp8Float) x *= key_scale[mt][e / 2];
              const bool visible = !decltype(bounded)::value || (key >= vis_lo[r] && key <= vis_hi[r]);
              if constexpr (!kPlain) {
                if (p.has_softcap) x = p.softcap_log2 * tanhf(x);
                // (Bias is rare: its loads are not overlapped with the MMAs.)
                if (p.bias != nullptr && visible)
                  x += load_as_float(p.bias, p.bias_elem, bias_row[r] + key * p.bias_stride[4]) * kLog2e;
              }
              s[mt][n][e] = visible ? x : -INFINITY;
              tile_max[r] = fmaxf(tile_max[r], s[mt][n][e]);
            }
      };
      if (!plain_scores)
        score(std::true_type{}, std::false_type{});
      else if (tile_start >= whole_lo && tile_start + kWarpKeys - 1 <= whole_hi)
        score(std::false_type{}, std::true_type{});
      else
        score(std::true_type{}, std::true_type{});
      float reference[kLR];
      bool rescale_any = false;
      float rescale[kLR];
#pragma unroll
      for (int r = 0; r < kLR; ++r) {
        tile_max[r] = max_over_keys(tile_max[r]);
        const float m = fmaxf(row_max[r], tile_max[r]);
        reference[r] = m == -INFINITY ? 0.f : m;
        rescale[r] = fast_exp2(row_max[r] - reference[r]);  // 0 when row_max is -inf
        rescale_any |= row_max[r] != -INFINITY && row_max[r] != m;
        row_max[r] = m;
        row_sum[r] *= rescale[r];
        if constexpr (Tile::kFactored) shift_sum[r] *= rescale[r];
      }
      // Most tiles leave every maximum where it was: skip the D x rows rescale.
      if (__any_sync(0xffffffffu, rescale_any)) {
#pragma unroll
        for (int m = 0; m < Tile::kDimTiles; ++m)
#pragma unroll
          for (int n = 0; n < kQN; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][n][e] *= rescale[2 * n + e % 2];
      }
      // fp8 with fp32 scales per row: V's codes enter the MMAs as they are
      // and each key's V scale goes onto its P, over v_norm (the warp's
      // largest power of two at or below a tile's largest V scale so far:
      // P' = P s / v_norm < 2 keeps fp16's range; O is in units of v_norm
      // and rescaled, exactly, when v_norm grows).
      float v_weight[Tile::kKeyTiles][2];
      [[maybe_unused]] float v_shift[Tile::kKeyTiles][2];
#pragma unroll
      for (int mt = 0; mt < Tile::kKeyTiles; ++mt) v_weight[mt][0] = v_weight[mt][1] = 1.f;
      if constexpr (kFormat == StreamFormat::kFp8Float || Tile::kFactored) {
        if (p_carries_v_scale) {
          float top = 0.f;
          [[maybe_unused]] const float *const scales = reinterpret_cast<const float *>(side) + kWarpKeys;
#pragma unroll
          for (int mt = 0; mt < Tile::kKeyTiles; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if constexpr (Tile::kFactored) {
                // The key's coefficient word: in its staged row (int4) or beside it (fp8).
                const int key = kWarpKeys + 16 * mt + g + 8 * h;
                uint32_t coef;
                if constexpr (Tile::kInt4Row)
                  coef =
                      *reinterpret_cast<const uint32_t *>(stage + key * Tile::kPitch + Tile::kLead - 4 + v_code_shift);
                else
                  coef = per_row ? reinterpret_cast<const uint32_t *>(side)[key] : v_fixed;
                const float2 c = scale_shift(coef);
                v_weight[mt][h] = c.x;
                v_shift[mt][h] = c.y;
              } else {
                v_weight[mt][h] = scales[16 * mt + g + 8 * h];
              }
              top = fmaxf(top, fabsf(v_weight[mt][h]));
            }
          top = max_over_keys(top);  // the tile's 32 keys: warp-uniform
          const float bound = fmaxf(__uint_as_float(__float_as_uint(top) & 0x7f800000u), FLT_MIN);
          if (bound > v_norm) {
            const float factor = v_norm / bound;  // a power of two (0 at the first tile)
#pragma unroll
            for (int m = 0; m < Tile::kDimTiles; ++m)
#pragma unroll
              for (int n = 0; n < kQN; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[m][n][e] *= factor;
            v_norm = bound;
          }
          const float inverse = 1.f / v_norm;  // exact
#pragma unroll
          for (int mt = 0; mt < Tile::kKeyTiles; ++mt) {
            v_weight[mt][0] *= inverse;
            v_weight[mt][1] *= inverse;
          }
        }
      }
      // P^T as the B operand of O^T += V^T P^T: the fp16 pairs of P^T in the
      // accumulator layout (key 16 mt + g + 8 h, queries 2 t, 2 t + 1) are an
      // 8 x 8 fragment each, transposed in registers to (keys 2 t, 2 t + 1
      // of the k-step's half h, query g).
      uint32_t pb[Tile::kKeyTiles][kQN][2];
      // FMHA_FLAG_FP8_PV: P rounded to fp8 against the row's largest P of
      // the tile over fp8_max; the sums keep the exact P.
      const auto probabilities = [&](auto rounded) {
        [[maybe_unused]] float p_scale[kLR], p_inverse[kLR];
        if constexpr (decltype(rounded)::value) {
#pragma unroll
          for (int r = 0; r < kLR; ++r) {
            p_scale[r] = fast_exp2(tile_max[r] - reference[r]) / p.fp8_max;
            p_inverse[r] = p_scale[r] > 0.f ? 1.f / p_scale[r] : 0.f;
          }
        }
#pragma unroll
        for (int mt = 0; mt < Tile::kKeyTiles; ++mt)
#pragma unroll
          for (int n = 0; n < kQN; ++n) {
            float prob[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = 2 * n + e % 2;
              prob[e] = fast_exp2(s[mt][n][e] - reference[r]);
              row_sum[r] += prob[e];
              if constexpr (decltype(rounded)::value)
                prob[e] = fp8_round(prob[e] * p_inverse[r], p.fp8_bias, p.fp8_max) * p_scale[r];
              if constexpr (Tile::kFactored) shift_sum[r] = fmaf(prob[e], v_shift[mt][e / 2], shift_sum[r]);
              if constexpr (kFormat == StreamFormat::kFp8Float || Tile::kFactored) prob[e] *= v_weight[mt][e / 2];
            }
            pb[mt][n][0] = transpose_8x8(pack2<__half>(prob[0], prob[1]));
            pb[mt][n][1] = transpose_8x8(pack2<__half>(prob[2], prob[3]));
          }
      };
      if (p.fp8_pv)
        probabilities(std::true_type{});
      else
        probabilities(std::false_type{});

        // ---- O^T += V^T P^T: lane (g, t) decodes V words 8 wi + g of keys
        // 2 t, 2 t + 1 (a0 / a1) and 2 t + 8, 2 t + 9 (a2 / a3) of each 16-key
        // step; the pairs of 8-dim groups (2 m, 2 m + 1) are the m-tiles -----
#pragma unroll
      for (int kk = 0; kk < Tile::kKeyTiles; ++kk) {
        const int key_a[2] = {kWarpKeys + 16 * kk + 2 * t, kWarpKeys + 16 * kk + 8 + 2 * t};  // staged V rows
        // One V word (8 int4 / 4 fp8 8-dim groups) at a time: fewer live registers.
#pragma unroll
        for (int wi = 0; wi < Tile::kVWords; ++wi) {
          constexpr int kTilesPerWord = kInt4 ? 8 : 4;
          uint32_t b[2][kTilesPerWord];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const uint8_t *const v_at = stage + (key_a[half] - 2 * t) * Tile::kPitch + v_code_at[wi];
            const uint32_t wa = *reinterpret_cast<const uint32_t *>(v_at);
            const uint32_t wb = *reinterpret_cast<const uint32_t *>(v_at + Tile::kPitch);
            if constexpr (Tile::kInt4Row) {
              // The codes alone: the key's scale is on its P, its shift in shift_sum.
#pragma unroll
              for (int byte = 0; byte < 4; ++byte) {
                const uint32_t y = __byte_perm(wa, wb, byte | (byte << 4) | ((byte + 4) << 8) | ((byte + 4) << 12));
                b[half][2 * byte] = half2_bits(int4_low_codes(y));
                b[half][2 * byte + 1] = half2_bits(int4_high_codes(y));
              }
            } else if constexpr (kInt4) {
              const uint8_t *const row_a = stage + key_a[half] * Tile::kPitch + v_coef_at[wi];
              const uint32_t ca = v_word_valid[wi] ? *reinterpret_cast<const uint32_t *>(row_a) : 0u;
              const uint32_t cb = v_word_valid[wi] ? *reinterpret_cast<const uint32_t *>(row_a + Tile::kPitch) : 0u;
              const __half2 scale = bits_half2(__byte_perm(ca, cb, 0x5410));
              const __half2 shift = bits_half2(__byte_perm(ca, cb, 0x7632));
#pragma unroll
              for (int byte = 0; byte < 4; ++byte) {
                // Byte `byte` of a in bits 0-7, of b in bits 16-23.
                const uint32_t y = __byte_perm(wa, wb, byte | (byte << 4) | ((byte + 4) << 8) | ((byte + 4) << 12));
                b[half][2 * byte] = int4_low(y, scale, shift);
                b[half][2 * byte + 1] = int4_high(y, scale, shift);
              }
            } else {
              // Bytes 0, 1 (then 2, 3) of a and b interleaved: (a0, b0) and
              // (a1, b1) are the pairs of n-tiles 0 and 1 (2 and 3); the
              // codes alone (the keys' scales are on P).
              fp8_codes<kFnuz>(__byte_perm(wa, wb, 0x5140), b[half][0], b[half][1]);
              fp8_codes<kFnuz>(__byte_perm(wa, wb, 0x7362), b[half][2], b[half][3]);
            }
          }
#pragma unroll
          for (int j = 0; j < kTilesPerWord; j += 2) {
            const uint32_t a[4] = {b[0][j], b[0][j + 1], b[1][j], b[1][j + 1]};
#pragma unroll
            for (int n = 0; n < kQN; ++n)
              mma_16x8x16<__half>(acc[(kTilesPerWord * wi + j) / 2][n], a, pb[kk][n][0], pb[kk][n][1]);
          }
        }
      }
      __syncwarp();  // every lane is done with this stage before it is refilled
    }
  };
  if (!kInt4 && fnuz)
    run_tiles(std::true_type{});
  else
    run_tiles(std::false_type{});
  copy_wait<0>();
  __syncwarp();

  // ---- Merge the warps: maxima and sums, then O through shared memory ---
#pragma unroll
  for (int r = 0; r < kLR; ++r) {
    row_sum[r] = sum_over_keys(row_sum[r]);
    if constexpr (Tile::kFactored) shift_sum[r] = sum_over_keys(shift_sum[r]);
    if (g == 0) {
      max_exchange[warp * Tile::kRows + lane_row(r)] = row_max[r];
      sum_exchange[warp * Tile::kRows + lane_row(r)] = row_sum[r];
    }
  }
  float *const o_part = reinterpret_cast<float *>(staging);
#pragma unroll
  for (int m = 0; m < Tile::kDimTiles; ++m)
#pragma unroll
    for (int n = 0; n < kQN; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o_part[lane_row(2 * n + e % 2) * Tile::kOPitch + 16 * m + g + 8 * (e / 2)] =
            Tile::kFactored ? fmaf(acc[m][n][e], v_norm, shift_sum[2 * n + e % 2]) : acc[m][n][e] * v_norm;
  __syncthreads();

  const OutputTarget target = output_target(p, piece, tile_rows.chunk, queries);
  constexpr int kPairs = kHeadDim / 2;
  for (int i = tid; i < rows_here * kPairs; i += Tile::kThreads) {
    const int row = i / kPairs;
    const int d = 2 * (i % kPairs);
    if (d >= p.head_dim_v) continue;
    float top = -INFINITY;
#pragma unroll
    for (int w = 0; w < Tile::kWarps; ++w) top = fmaxf(top, max_exchange[w * Tile::kRows + row]);
    const float reference = top == -INFINITY ? 0.f : top;
    float sum = 0.f;
    float x[2] = {0.f, 0.f};
    const int col0 = o_fragment_column<kInt4>(d);
    const int col1 = o_fragment_column<kInt4>(d + 1);
#pragma unroll
    for (int w = 0; w < Tile::kWarps; ++w) {
      const float weight = fast_exp2(max_exchange[w * Tile::kRows + row] - reference);
      const float *const part =
          reinterpret_cast<const float *>(smem + Tile::kStagingOffset + w * Tile::kWarpStagingBytes);
      sum += weight * sum_exchange[w * Tile::kRows + row];
      x[0] += weight * part[row * Tile::kOPitch + col0];
      x[1] += weight * part[row * Tile::kOPitch + col1];
    }
    const int32_t packed = row0 + row;
    const int32_t query = packed / p.heads_per_kv;
    const int32_t head = head_kv * p.heads_per_kv + packed % p.heads_per_kv;
    const RowResult result = finish_row(p, target, reference, sum, group, head);
    const float o_scale = folded ? result.o_scale * __uint_as_float(v_fixed) : result.o_scale;
    x[0] *= o_scale;
    x[1] *= o_scale;
    const int64_t o_row = o_row_offset(target, query, group, head);
    if (d + 1 < p.head_dim_v)
      store_row_elems<2>(target.o, target.o_elem, o_row + d, x);
    else
      store_row_elems<1>(target.o, target.o_elem, o_row + d, x);
    if (d == 0) store_lse(target, query, group, head, result.lse);
  }
#if FMHA_GPU_HAS_FUSED_MERGE
  if (p.merge_counters != nullptr && piece.slot >= 0 && !p.write_partials)
    merge_if_last<Tile::kThreads>(p, tile_rows, row_tile, group, head_kv, smem);
#endif
}

template <typename T, int kHeadDimBucket, StreamFormat kFormat, int kQueryTiles>
__global__ void __launch_bounds__((StreamTile<T, kHeadDimBucket, kFormat, kQueryTiles>::kThreads),
                                  (StreamTile<T, kHeadDimBucket, kFormat, kQueryTiles>::kMinBlocksPerSm))
    quant_stream_forward_kernel(const __grid_constant__ ForwardParams p) {
  using Tile = StreamTile<T, kHeadDimBucket, kFormat, kQueryTiles>;
  extern __shared__ __align__(128) uint8_t smem[];
  attend_work_item<Tile::kThreads>(p, smem, [&](const PieceAt &piece, const GridCell &cell) {
    stream_piece<T, kHeadDimBucket, kFormat, kQueryTiles>(p, smem, piece, cell.row_tile, cell.group, cell.head_kv);
  });
}

}  // namespace fmha::gpu::kernels

#endif  // FMHA_SPLITK_BACKENDS_GPU_KERNELS_QUANT_STREAM_FORWARD_CUH_
