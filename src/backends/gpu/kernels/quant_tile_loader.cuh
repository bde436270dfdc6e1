// Streams quantised K/V tiles (int4 rows, fp8 rows with their scales) into
// shared memory and dequantises them there, for every key layout. The
// packed rows travel by cp.async into a staging ring (kStages deep, a
// quarter or half the bytes of an fp16 tile); dequantise() then turns one
// staged tile into the fp16 operand tiles the MMAs read. So the
// values are decoded in registers between the asynchronous load and the
// tensor cores, never by an extra pass over global memory.
//
// Operand precision (docs/numerics.md): K and V are decoded to fp16, the
// exact value (nibble or fp8 code times an fp16 scale, plus an fp16 shift,
// in one fp16 FMA; or times an fp32 scale in fp32) rounded once, 11 bits.
// Beside bf16 Q the kernel splits Q instead (splitk_forward.cuh): once per
// piece rather than K once per tile.
//
// Cost: decode is on every tile's critical path, so each thread decodes the
// same chunk of its rows every tile (no index arithmetic per element), two
// values per fp16 instruction, and load() finds each staged row's address
// once (not once per 4-byte copy).
#ifndef FMHA_SPLITK_BACKENDS_GPU_KERNELS_QUANT_TILE_LOADER_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_KERNELS_QUANT_TILE_LOADER_CUH_

#include <cstdint>

#include "backends/gpu/kernels/forward_params.cuh"
#include "backends/gpu/kernels/kv_tile_loader.cuh"
#include "backends/gpu/vendor/tile.cuh"

namespace fmha::gpu::kernels {

// The value of fp8 code `code` (low 8 bits). Placing the 7 magnitude bits
// at fp16's exponent and mantissa positions gives the value times 2^(bias
// - 15) for normal and subnormal codes alike (fp16's subnormals cover
// e4m3's), so one multiply by 2^(15 - bias) finishes it; the NaN codes are
// the exceptions (E4M3FN: S.1111.111, E4M3FNUZ: 0x80).
__device__ __forceinline__ float fp8_value(uint32_t code, bool fnuz) {
  const auto bits = static_cast<unsigned short>(((code & 0x80u) << 8) | ((code & 0x7fu) << 7));
  const float value = __half2float(__ushort_as_half(bits)) * (fnuz ? 128.f : 256.f);
  const bool nan = fnuz ? (code & 0xffu) == 0x80u : (code & 0x7fu) == 0x7fu;
  return nan ? __int_as_float(0x7fffffff) : value;
}

// `value` (>= 0) rounded to the nearest fp8 value (ties to even), saturating
// at fp8_max: the quantised P of FMHA_FLAG_FP8_PV. The step is 2^(e - 3)
// for exponent e, no finer than the subnormal step 2^(1 - bias - 3).
__device__ __forceinline__ float fp8_round(float value, int bias, float fp8_max) {
  if (!(value > 0.f)) return 0.f;
  int exponent = static_cast<int>((__float_as_uint(value) >> 23) & 0xffu) - 127;
  exponent = max(exponent, 1 - bias);
  const float step = __int_as_float(static_cast<int>((exponent - 3 + 127) << 23));
  const float inverse = __int_as_float(static_cast<int>((3 - exponent + 127) << 23));
  return fminf(rintf(value * inverse) * step, fp8_max);
}

// Eight fp16 values of one int4 word (nibble j = dim j), scaled: each
// nibble n becomes the fp16 1024 + n by OR-ing in 1024's exponent, 1024 is
// subtracted exactly, and one fp16 FMA applies scale and shift (the exact
// n * scale + shift, rounded once to fp16). Two values per instruction.
__device__ __forceinline__ uint4 int4_word_to_half(uint32_t nibbles, __half2 scale, __half2 shift) {
  constexpr uint32_t kMagic = 0x64006400u;  // fp16 1024 in both halves
  const uint32_t n04 = (nibbles & 0x000f000fu) | kMagic;
  const uint32_t n15 = ((nibbles >> 4) & 0x000f000fu) | kMagic;
  const uint32_t n26 = ((nibbles >> 8) & 0x000f000fu) | kMagic;
  const uint32_t n37 = ((nibbles >> 12) & 0x000f000fu) | kMagic;
  const uint32_t pairs[4] = {__byte_perm(n04, n15, 0x5410), __byte_perm(n26, n37, 0x5410),
                             __byte_perm(n04, n15, 0x7632), __byte_perm(n26, n37, 0x7632)};
  const __half2 bias = __float2half2_rn(1024.f);
  uint32_t out[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __half2 n = __hsub2(*reinterpret_cast<const __half2 *>(&pairs[j]), bias);
    const __half2 x = __hfma2(n, scale, shift);
    out[j] = *reinterpret_cast<const uint32_t *>(&x);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// The fp16 values of the two fp8 codes in the low 16 bits of `codes`, in
// the two halves (fp8_value() two at a time, NaN codes included).
__device__ __forceinline__ __half2 fp8_pair_to_half(uint32_t codes, bool fnuz) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  // sm_89+ converts E4M3FN pairs in one instruction (cvt.rn.f16x2.e4m3x2).
  if (!fnuz) return __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3));
#endif
  const uint32_t spread = __byte_perm(codes, 0u, 0x4140);  // code 0 in bits 0-7, code 1 in bits 16-23
  uint32_t bits = ((spread & 0x00800080u) << 8) | ((spread & 0x007f007fu) << 7);
  __half2 value = __hmul2(*reinterpret_cast<const __half2 *>(&bits), __float2half2_rn(fnuz ? 128.f : 256.f));
  if (fnuz) {
    if ((spread & 0xffu) == 0x80u) value.x = __ushort_as_half(0x7e00);
    if ((spread & 0xff0000u) == 0x800000u) value.y = __ushort_as_half(0x7e00);
  } else {
    if ((spread & 0x7fu) == 0x7fu) value.x = __ushort_as_half(0x7e00);
    if ((spread & 0x7f0000u) == 0x7f0000u) value.y = __ushort_as_half(0x7e00);
  }
  return value;
}

// kVFromK (MLA, FMHA_FLAG_V_FROM_K): only K rows are staged and decoded,
// the kernel reads V from the K operand tile; there is no V view or scale.
template <int kHeadDim, int kBlockN, int kThreads, bool kVFromK = false>
class QuantKvTileLoader {
 public:
  // Operand tiles: fp16, swizzled as in KvTileLoader. Staged rows: the
  // packed bytes of one key, at most kHeadDim bytes (fp8: D; int4: 4 *
  // (groups + D / 8) <= D for D >= 64).
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static constexpr int kStagedRowBytes = kHeadDim;
  static constexpr int kStagedRows = kVFromK ? kBlockN : 2 * kBlockN;       // K rows, then V rows
  static constexpr int kStagedScaleOffset = kStagedRows * kStagedRowBytes;  // K then V scale words
  static constexpr int kStageBytes = kStagedScaleOffset + kStagedRows * 4;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 8 dims per dequantised chunk
  // load(): the staged rows are shared out whole, kThreadsPerRow threads to
  // a row, so a row's position is found once.
  static constexpr int kThreadsPerRow = kThreads / kStagedRows;
  // dequantise(): a thread always decodes the same chunk of its rows, when
  // the threads divide into whole rows; MLA's 72 chunks (576 dims) are
  // dealt out flat instead, tid + i * kThreads.
  static constexpr bool kFlat = kThreads % kChunksPerRow != 0;
  static constexpr int kRowsPerPass = kFlat ? 1 : kThreads / kChunksPerRow;
  static_assert(kHeadDim >= 64, "int4 rows must fit the staged row");
  static_assert(kThreadsPerRow >= 1 && kThreads % kStagedRows == 0, "whole rows per thread group");
  static_assert(kFlat || kBlockN % kRowsPerPass == 0, "fixed chunk per thread");

  __device__ QuantKvTileLoader(const ForwardParams &p, int32_t batch, int32_t group, int32_t head_kv, int tid)
      : seq_(p.seq),
        batch_(batch),
        int4_(p.kv_quant == FMHA_KV_QUANT_INT4),
        groups_(p.kv_quant_groups),
        fnuz_(p.fp8_format == FMHA_FP8_E4M3FNUZ),
        f16x2_(p.kv_scale_kind == FMHA_KV_SCALE_F16X2_SCALE_SHIFT),
        per_row_(p.kv_scale_granularity == FMHA_SCALE_PER_ROW),
        copy16_(p.kv_copy16 != 0) {
    // Byte strides: int4 views count int32 words, fp8 views bytes.
    const int64_t unit = int4_ ? 4 : 1;
    k_stride0_ = p.k_stride[0] * unit;
    k_stride1_ = p.k_stride[1] * unit;
    v_stride0_ = p.v_stride[0] * unit;
    v_stride1_ = p.v_stride[1] * unit;
    k_ = static_cast<const uint8_t *>(p.k) + (group * p.k_stride[2] + head_kv * p.k_stride[3]) * unit;
    v_ = kVFromK ? k_ : static_cast<const uint8_t *>(p.v) + (group * p.v_stride[2] + head_kv * p.v_stride[3]) * unit;
    k_row_bytes_ = int4_ ? 4 * (groups_ + p.head_dim_qk / 8) : p.head_dim_qk;
    v_row_bytes_ = int4_ ? 4 * (groups_ + p.head_dim_v / 8) : p.head_dim_v;
    chunk_ = tid % kChunksPerRow;
    k_chunk_valid_ = chunk_ * 8 < p.head_dim_qk;
    v_chunk_valid_ = chunk_ * 8 < p.head_dim_v;
    if (int4_) {
      // The coefficient word of this thread's chunk (groups split D evenly).
      k_coefficient_ = p.head_dim_qk >= groups_ ? (8 * chunk_) / (p.head_dim_qk / groups_) : 0;
      v_coefficient_ = p.head_dim_v >= groups_ ? (8 * chunk_) / (p.head_dim_v / groups_) : 0;
    } else {
      // Per-row scales are staged with their rows; per-head and per-tensor
      // ones are two constants of this CTA.
      // Per-row views are [B or pages, rows, G, Hkv], per-head [G, Hkv].
      const int64_t head_offset = per_row_ ? group * p.k_scale_stride[2] + head_kv * p.k_scale_stride[3]
                                  : p.kv_scale_granularity == FMHA_SCALE_PER_HEAD
                                      ? group * p.k_scale_stride[0] + head_kv * p.k_scale_stride[1]
                                      : 0;
      const int64_t v_head_offset = per_row_ ? group * p.v_scale_stride[2] + head_kv * p.v_scale_stride[3]
                                    : p.kv_scale_granularity == FMHA_SCALE_PER_HEAD
                                        ? group * p.v_scale_stride[0] + head_kv * p.v_scale_stride[1]
                                        : 0;
      k_scale_ = static_cast<const uint32_t *>(p.k_scale) + head_offset;
      // (V_FROM_K: V's values are K's, decoded with K's scale.)
      v_scale_ = kVFromK ? k_scale_ : static_cast<const uint32_t *>(p.v_scale) + v_head_offset;
      k_scale_stride0_ = p.k_scale_stride[0];
      k_scale_stride1_ = p.k_scale_stride[1];
      v_scale_stride0_ = p.v_scale_stride[0];
      v_scale_stride1_ = p.v_scale_stride[1];
      if (!per_row_) {
        k_fixed_ = __ldg(k_scale_);
        v_fixed_ = __ldg(v_scale_);
      }
    }
    seq_offset_ = sequence_key_origin(seq_, batch);
  }

  // Zeroes the operand tiles once: chunks past the head dims are never
  // written by dequantise() and must read as 0 (Q's and P's zero padding
  // multiplies them). Needs a __syncthreads() before the first read.
  __device__ void zero_tiles(uint8_t *k_tile, uint8_t *v_tile, int tid) const {
    for (int i = tid; i < (kVFromK ? 1 : 2) * kTileBytes / 16; i += kThreads) {
      uint8_t *const at = i < kTileBytes / 16 ? k_tile + 16 * i : v_tile + 16 * i - kTileBytes;
      *reinterpret_cast<uint4 *>(at) = make_uint4(0, 0, 0, 0);
    }
  }

  // Issues the copies of the packed keys [tile_start, tile_start + kBlockN)
  // (and their per-row scales) into the staging area at shared address
  // `stage`; keys at or past kv_end are zero-filled without a read.
  __device__ void load(SmemAddr stage, int32_t tile_start, int32_t kv_end, int tid) const {
    const int staged_row = tid / kThreadsPerRow;  // K rows, then V rows
    const int part = tid % kThreadsPerRow;
    const bool is_k = staged_row < kBlockN;
    const int row = is_k ? staged_row : staged_row - kBlockN;
    const int32_t key = tile_start + row;
    const bool valid = key < kv_end;
    int64_t outer = 0;
    int64_t inner = 0;
    if (valid) locate(key, &outer, &inner);
    const uint8_t *src =
        is_k ? k_ + outer * k_stride0_ + inner * k_stride1_ : v_ + outer * v_stride0_ + inner * v_stride1_;
    if (!valid) src = is_k ? k_ : v_;
    const int row_bytes = is_k ? k_row_bytes_ : v_row_bytes_;
    const SmemAddr dst = stage + staged_row * kStagedRowBytes;
    if (copy16_) {
      for (int byte = 16 * part; byte < row_bytes; byte += 16 * kThreadsPerRow)
        copy_async_16(dst + byte, src + (valid ? byte : 0), valid);
    } else {
      for (int byte = 4 * part; byte < row_bytes; byte += 4 * kThreadsPerRow)
        copy_async_4(dst + byte, src + (valid ? byte : 0), valid);
    }
    if (!int4_ && per_row_ && part == 0) {
      const uint32_t *scale = is_k ? k_scale_ : v_scale_;
      if (valid)
        scale += is_k ? outer * k_scale_stride0_ + inner * k_scale_stride1_
                      : outer * v_scale_stride0_ + inner * v_scale_stride1_;
      copy_async_4(stage + kStagedScaleOffset + 4 * staged_row, scale, valid);
    }
  }

  // Decodes the staged tile into the fp16 operand tiles. Between two
  // __syncthreads().
  __device__ void dequantise(const uint8_t *stage, uint8_t *k_tile, uint8_t *v_tile, int tid) const {
    if constexpr (kFlat) {
      // Only MLA's K rows (kVFromK), every chunk inside Dqk = the bucket.
      static_assert(kVFromK, "flat decoding is MLA's");
      for (int i = tid; i < kBlockN * kChunksPerRow; i += kThreads) {
        const int row = i / kChunksPerRow;
        const int chunk = i % kChunksPerRow;
        *reinterpret_cast<uint4 *>(k_tile + swizzled<kRowBytes>(row, chunk)) =
            decode_chunk(stage + row * kStagedRowBytes, stage + kStagedScaleOffset + 4 * row, k_fixed_,
                         int4_ && groups_ > 0 ? (8 * chunk) / (kHeadDim / groups_) : 0, chunk);
      }
      return;
    }
    const int first_row = tid / kChunksPerRow;
#pragma unroll
    for (int pass = 0; pass < kBlockN / kRowsPerPass; ++pass) {
      const int row = first_row + pass * kRowsPerPass;
      const uint32_t offset = swizzled<kRowBytes>(row, chunk_);
      if (k_chunk_valid_)
        *reinterpret_cast<uint4 *>(k_tile + offset) = decode_chunk(
            stage + row * kStagedRowBytes, stage + kStagedScaleOffset + 4 * row, k_fixed_, k_coefficient_, chunk_);
      if (!kVFromK && v_chunk_valid_)
        *reinterpret_cast<uint4 *>(v_tile + offset) =
            decode_chunk(stage + (kBlockN + row) * kStagedRowBytes, stage + kStagedScaleOffset + 4 * (kBlockN + row),
                         v_fixed_, v_coefficient_, chunk_);
    }
  }

 private:
  // Dims 8c .. 8c + 7 (c = chunk) of one staged row as fp16: int4 with
  // the row's coefficient word `coefficient`; fp8 with the staged per-row
  // scale word `scale_word` or the CTA's `fixed` one.
  __device__ __forceinline__ uint4 decode_chunk(const uint8_t *row, const uint8_t *scale_word, uint32_t fixed,
                                                int coefficient, int chunk) const {
    if (int4_) {
      const uint32_t *words = reinterpret_cast<const uint32_t *>(row);
      const uint32_t coefficients = words[coefficient];
      return int4_word_to_half(words[groups_ + chunk], __half2half2(__ushort_as_half(coefficients & 0xffffu)),
                               __half2half2(__ushort_as_half(coefficients >> 16)));
    }
    const uint32_t word = per_row_ ? *reinterpret_cast<const uint32_t *>(scale_word) : fixed;
    const uint2 codes = *reinterpret_cast<const uint2 *>(row + 8 * chunk);
    const __half2 values[4] = {fp8_pair_to_half(codes.x, fnuz_), fp8_pair_to_half(codes.x >> 16, fnuz_),
                               fp8_pair_to_half(codes.y, fnuz_), fp8_pair_to_half(codes.y >> 16, fnuz_)};
    uint32_t out[4];
    if (f16x2_) {
      // fp16 scale and shift: one fp16 FMA, rounded once.
      const __half2 scale = __half2half2(__ushort_as_half(word & 0xffffu));
      const __half2 shift = __half2half2(__ushort_as_half(word >> 16));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __half2 x = __hfma2(values[j], scale, shift);
        out[j] = *reinterpret_cast<const uint32_t *>(&x);
      }
    } else {
      // fp32 scale: the product in fp32, then rounded to fp16.
      const float scale = __uint_as_float(word);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 v = __half22float2(values[j]);
        out[j] = pack2<__half>(v.x * scale, v.y * scale);
      }
    }
    return make_uint4(out[0], out[1], out[2], out[3]);
  }

  // Key `key` sits at [outer, inner] of the [B or pages, rows] view.
  __device__ __forceinline__ void locate(int32_t key, int64_t *outer, int64_t *inner) const {
    key_row_location(seq_, batch_, seq_offset_, key, outer, inner);
  }

  const SeqLayout &seq_;
  const int64_t batch_;
  const bool int4_;
  const int32_t groups_;
  const bool fnuz_;
  const bool f16x2_;
  const bool per_row_;
  const bool copy16_;
  const uint8_t *k_;
  const uint8_t *v_;
  int64_t k_stride0_, k_stride1_, v_stride0_, v_stride1_;  // bytes
  int32_t k_row_bytes_, v_row_bytes_;
  int chunk_;
  bool k_chunk_valid_, v_chunk_valid_;
  int k_coefficient_ = 0, v_coefficient_ = 0;
  const uint32_t *k_scale_ = nullptr;
  const uint32_t *v_scale_ = nullptr;
  int64_t k_scale_stride0_ = 0, k_scale_stride1_ = 0;  // words
  int64_t v_scale_stride0_ = 0, v_scale_stride1_ = 0;
  uint32_t k_fixed_ = 0;  // per-head / per-tensor scale word
  uint32_t v_fixed_ = 0;
  int64_t seq_offset_ = 0;
};

}  // namespace fmha::gpu::kernels

#endif  // FMHA_SPLITK_BACKENDS_GPU_KERNELS_QUANT_TILE_LOADER_CUH_
