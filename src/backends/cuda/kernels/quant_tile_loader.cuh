// Streams quantised K/V tiles (int4 rows, fp8 rows with their scales) into
// shared memory and dequantises them there, for every key layout. The
// packed rows travel by cp.async into a staging ring (kStages deep, a
// quarter or half the bytes of an fp16 tile); dequantise() then turns one
// staged tile into the fp16 / bf16 operand tiles the MMAs read. So the
// values are decoded in registers between the asynchronous load and the
// tensor cores, never by an extra pass over global memory.
//
// Operand precision (docs/numerics.md): the decoded value is exact in fp32
// (nibble or fp8 code times an fp16 / fp32 scale, plus an fp16 shift). V
// is rounded to fp16 (11 bits) for the PV product; K is rounded to fp16
// beside fp16 or fp8 Q, and beside bf16 Q it is split into a bf16 high
// part and a bf16 remainder (kSplitK, ~16 bits), two MMAs against the same
// Q fragment. Rounding K or V to bf16 alone would cost ~1.8e-3 relative
// error in O, the whole bf16 budget.
#ifndef FMHA_SPLITK_BACKENDS_CUDA_KERNELS_QUANT_TILE_LOADER_CUH_
#define FMHA_SPLITK_BACKENDS_CUDA_KERNELS_QUANT_TILE_LOADER_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/kernels/forward_params.cuh"
#include "backends/cuda/kernels/kv_tile_loader.cuh"
#include "backends/cuda/kernels/ptx.cuh"

namespace fmha::cuda::kernels {

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

// An fp16 scale (low half) and shift (high half) of one int32 word.
__device__ __forceinline__ float2 scale_shift(uint32_t word) {
  return make_float2(__half2float(__ushort_as_half(static_cast<unsigned short>(word & 0xffffu))),
                     __half2float(__ushort_as_half(static_cast<unsigned short>(word >> 16))));
}

template <int kHeadDim, int kBlockN, int kThreads, bool kSplitK>
class QuantKvTileLoader {
 public:
  // Operand tiles: fp16 (or bf16 hi / lo for K), swizzled as in
  // KvTileLoader. Staged rows: the packed bytes of one key, at most
  // kHeadDim bytes (fp8: D; int4: 4 * (groups + D / 8) <= D for D >= 64).
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static constexpr int kKTiles = kSplitK ? 2 : 1;
  static constexpr int kStagedRowBytes = kHeadDim;
  static constexpr int kStagedScaleOffset = 2 * kBlockN * kStagedRowBytes;  // K then V scale words
  static constexpr int kStageBytes = kStagedScaleOffset + 2 * kBlockN * 4;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 8 dims per dequantised chunk
  static_assert(kHeadDim >= 64, "int4 rows must fit the staged row");

  __device__ QuantKvTileLoader(const ForwardParams &p, int32_t batch, int32_t group, int32_t head_kv)
      : seq_(p.seq), batch_(batch), quant_(p.kv_quant), groups_(p.kv_quant_groups),
        fnuz_(p.fp8_format == FMHA_FP8_E4M3FNUZ), f16x2_(p.kv_scale_kind == FMHA_KV_SCALE_F16X2_SCALE_SHIFT),
        per_row_(p.kv_scale_granularity == FMHA_SCALE_PER_ROW), copy16_(p.kv_copy16 != 0),
        head_dim_qk_(p.head_dim_qk), head_dim_v_(p.head_dim_v) {
    // Byte strides: int4 views count int32 words, fp8 views bytes.
    const int64_t unit = quant_ == FMHA_KV_QUANT_INT4 ? 4 : 1;
    k_stride0_ = p.k_stride[0] * unit;
    k_stride1_ = p.k_stride[1] * unit;
    v_stride0_ = p.v_stride[0] * unit;
    v_stride1_ = p.v_stride[1] * unit;
    k_ = static_cast<const uint8_t *>(p.k) + (group * p.k_stride[2] + head_kv * p.k_stride[3]) * unit;
    v_ = static_cast<const uint8_t *>(p.v) + (group * p.v_stride[2] + head_kv * p.v_stride[3]) * unit;
    k_row_bytes_ = quant_ == FMHA_KV_QUANT_INT4 ? 4 * (groups_ + head_dim_qk_ / 8) : head_dim_qk_;
    v_row_bytes_ = quant_ == FMHA_KV_QUANT_INT4 ? 4 * (groups_ + head_dim_v_ / 8) : head_dim_v_;
    if (quant_ == FMHA_KV_QUANT_FP8) {
      // Per-row scales are staged with their rows; per-head and per-tensor
      // ones are two constants of this CTA.
      // Per-row views are [B or pages, rows, G, Hkv], per-head [G, Hkv].
      const int64_t head_offset =
          per_row_ ? group * p.k_scale_stride[2] + head_kv * p.k_scale_stride[3]
          : p.kv_scale_granularity == FMHA_SCALE_PER_HEAD ? group * p.k_scale_stride[0] + head_kv * p.k_scale_stride[1]
                                                          : 0;
      const int64_t v_head_offset =
          per_row_ ? group * p.v_scale_stride[2] + head_kv * p.v_scale_stride[3]
          : p.kv_scale_granularity == FMHA_SCALE_PER_HEAD ? group * p.v_scale_stride[0] + head_kv * p.v_scale_stride[1]
                                                          : 0;
      k_scale_ = static_cast<const uint32_t *>(p.k_scale) + head_offset;
      v_scale_ = static_cast<const uint32_t *>(p.v_scale) + v_head_offset;
      k_scale_stride0_ = p.k_scale_stride[0];
      k_scale_stride1_ = p.k_scale_stride[1];
      v_scale_stride0_ = p.v_scale_stride[0];
      v_scale_stride1_ = p.v_scale_stride[1];
      if (!per_row_) {
        k_fixed_ = decode_scale(__ldg(k_scale_));
        v_fixed_ = decode_scale(__ldg(v_scale_));
      }
    }
    switch (seq_.kv_layout) {
      case FMHA_KV_GAPPY:
        seq_offset_ = seq_.kv_seqstart[batch * seq_.kv_seqstart_stride];
        break;
      case FMHA_KV_PAGED:
        seq_offset_ = seq_.kv_seqstart != nullptr ? seq_.kv_seqstart[batch * seq_.kv_seqstart_stride] : 0;
        break;
      case FMHA_KV_RAGGED:
        seq_offset_ = seq_.kv_indptr[batch * seq_.kv_indptr_stride];
        break;
      default:
        seq_offset_ = 0;
        break;
    }
    outer_ = seq_.kv_layout == FMHA_KV_GAPPY ? 0 : batch;
  }

  // Zeroes the operand tiles once: chunks past the head dims are never
  // written by dequantise() and must read as 0 (Q's and P's zero padding
  // multiplies them). Needs a __syncthreads() before the first read.
  __device__ void zero_tiles(uint8_t *k_tiles, uint8_t *v_tile, int tid) const {
    for (int i = tid; i < (kKTiles * kTileBytes + kTileBytes) / 16; i += kThreads) {
      uint8_t *const at = i < kKTiles * kTileBytes / 16 ? k_tiles + 16 * i : v_tile + 16 * i - kKTiles * kTileBytes;
      *reinterpret_cast<uint4 *>(at) = make_uint4(0, 0, 0, 0);
    }
  }

  // Issues the copies of the packed keys [tile_start, tile_start + kBlockN)
  // (and their per-row scales) into the staging area at shared address
  // `stage`; keys at or past kv_end are zero-filled without a read.
  __device__ void load(uint32_t stage, int32_t tile_start, int32_t kv_end, int tid) const {
    const int unit = copy16_ ? 16 : 4;
    const int k_units = k_row_bytes_ / unit;
    const int units = k_units + v_row_bytes_ / unit;
    for (int i = tid; i < kBlockN * units; i += kThreads) {
      const int row = i / units;
      const int u = i % units;
      const int32_t key = tile_start + row;
      const bool valid = key < kv_end;
      const bool is_k = u < k_units;
      const int byte = (is_k ? u : u - k_units) * unit;
      const uint8_t *src = is_k ? k_ : v_;
      if (valid) src += offset_of(key, is_k ? k_stride0_ : v_stride0_, is_k ? k_stride1_ : v_stride1_) + byte;
      const uint32_t dst = stage + (is_k ? 0 : kBlockN * kStagedRowBytes) + row * kStagedRowBytes + byte;
      if (copy16_)
        cp_async_16(dst, src, valid);
      else
        cp_async_4(dst, src, valid);
    }
    if (quant_ == FMHA_KV_QUANT_FP8 && per_row_) {
      for (int i = tid; i < 2 * kBlockN; i += kThreads) {
        const bool is_k = i < kBlockN;
        const int row = is_k ? i : i - kBlockN;
        const int32_t key = tile_start + row;
        const bool valid = key < kv_end;
        const uint32_t *src = is_k ? k_scale_ : v_scale_;
        if (valid)
          src += offset_of(key, is_k ? k_scale_stride0_ : v_scale_stride0_, is_k ? k_scale_stride1_ : v_scale_stride1_);
        cp_async_4(stage + kStagedScaleOffset + 4 * i, src, valid);
      }
    }
  }

  // Decodes the staged tile into the operand tiles (K: kKTiles tiles of
  // kTileBytes, hi then lo; V: one fp16 tile). Between two __syncthreads().
  __device__ void dequantise(const uint8_t *stage, uint8_t *k_tiles, uint8_t *v_tile, int tid) const {
    const int k_chunks = head_dim_qk_ / 8;
    const int v_chunks = head_dim_v_ / 8;
    for (int i = tid; i < kBlockN * kChunksPerRow; i += kThreads) {
      const int row = i / kChunksPerRow;
      const int c = i % kChunksPerRow;
      const uint32_t offset = swizzled<kRowBytes>(row, c);
      float x[8];
      if (c < k_chunks) {
        decode_chunk(stage + row * kStagedRowBytes, stage + kStagedScaleOffset + 4 * row, k_fixed_, head_dim_qk_, c, x);
        if constexpr (kSplitK) {
          uint32_t hi[4];
          uint32_t lo[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(x[2 * j], x[2 * j + 1]);
            const float2 r = __bfloat1622float2(h);
            hi[j] = *reinterpret_cast<const uint32_t *>(&h);
            lo[j] = pack2<__nv_bfloat16>(x[2 * j] - r.x, x[2 * j + 1] - r.y);
          }
          *reinterpret_cast<uint4 *>(k_tiles + offset) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
          *reinterpret_cast<uint4 *>(k_tiles + kTileBytes + offset) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        } else {
          *reinterpret_cast<uint4 *>(k_tiles + offset) = pack8_half(x);
        }
      }
      if (c < v_chunks) {
        decode_chunk(stage + kBlockN * kStagedRowBytes + row * kStagedRowBytes,
                     stage + kStagedScaleOffset + 4 * (kBlockN + row), v_fixed_, head_dim_v_, c, x);
        *reinterpret_cast<uint4 *>(v_tile + offset) = pack8_half(x);
      }
    }
  }

 private:
  __device__ __forceinline__ float2 decode_scale(uint32_t word) const {
    return f16x2_ ? scale_shift(word) : make_float2(__uint_as_float(word), 0.f);
  }

  // Dims 8c .. 8c + 7 of one staged row (`scale_word`: its staged per-row
  // fp8 scale).
  __device__ __forceinline__ void decode_chunk(const uint8_t *row, const uint8_t *scale_word, float2 fixed,
                                               int head_dim, int c, float (&x)[8]) const {
    if (quant_ == FMHA_KV_QUANT_INT4) {
      const uint32_t *words = reinterpret_cast<const uint32_t *>(row);
      const float2 s = scale_shift(words[(8 * c) / (head_dim / groups_)]);
      const uint32_t nibbles = words[groups_ + c];
#pragma unroll
      for (int j = 0; j < 8; ++j) x[j] = static_cast<float>((nibbles >> (4 * j)) & 15u) * s.x + s.y;
    } else {
      const float2 s = per_row_ ? decode_scale(*reinterpret_cast<const uint32_t *>(scale_word)) : fixed;
      const uint2 codes = *reinterpret_cast<const uint2 *>(row + 8 * c);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t word = j < 4 ? codes.x : codes.y;
        x[j] = fp8_value(word >> (8 * (j % 4)), fnuz_) * s.x + s.y;
      }
    }
  }

  __device__ __forceinline__ static uint4 pack8_half(const float (&x)[8]) {
    return make_uint4(pack2<__half>(x[0], x[1]), pack2<__half>(x[2], x[3]), pack2<__half>(x[4], x[5]),
                      pack2<__half>(x[6], x[7]));
  }

  // Offset of key `key` of this sequence in a [B or pages, rows, ...] view
  // with these two outer strides (K/V rows: bytes; per-row scales: words).
  __device__ __forceinline__ int64_t offset_of(int32_t key, int64_t stride0, int64_t stride1) const {
    int64_t outer;
    int64_t inner;
    locate(key, &outer, &inner);
    return outer * stride0 + inner * stride1;
  }

  // Key `key` sits at [outer, inner] of the [B or pages, rows] view.
  __device__ __forceinline__ void locate(int32_t key, int64_t *outer, int64_t *inner) const {
    const int32_t page_mask = (1 << seq_.page_size_log2) - 1;
    if (seq_.kv_layout == FMHA_KV_PAGED) {
      const int64_t position = seq_offset_ + key;
      *outer = __ldg(seq_.block_table + batch_ * seq_.block_table_stride[0] +
                     (position >> seq_.page_size_log2) * seq_.block_table_stride[1]);
      *inner = position & page_mask;
    } else if (seq_.kv_layout == FMHA_KV_RAGGED) {
      *outer = __ldg(seq_.kv_indices + (seq_offset_ + (key >> seq_.page_size_log2)) * seq_.kv_indices_stride);
      *inner = key & page_mask;
    } else {
      *outer = outer_;
      *inner = seq_offset_ + key;
    }
  }

  const SeqLayout &seq_;
  const int64_t batch_;
  const int32_t quant_;
  const int32_t groups_;
  const bool fnuz_;
  const bool f16x2_;
  const bool per_row_;
  const bool copy16_;
  const int32_t head_dim_qk_;
  const int32_t head_dim_v_;
  const uint8_t *k_;
  const uint8_t *v_;
  int64_t k_stride0_, k_stride1_, v_stride0_, v_stride1_;  // bytes
  int32_t k_row_bytes_, v_row_bytes_;
  const uint32_t *k_scale_ = nullptr;
  const uint32_t *v_scale_ = nullptr;
  int64_t k_scale_stride0_ = 0, k_scale_stride1_ = 0;  // words
  int64_t v_scale_stride0_ = 0, v_scale_stride1_ = 0;
  float2 k_fixed_ = {1.f, 0.f};
  float2 v_fixed_ = {1.f, 0.f};
  int64_t seq_offset_ = 0;
  int64_t outer_ = 0;
};

}  // namespace fmha::cuda::kernels

#endif  // FMHA_SPLITK_BACKENDS_CUDA_KERNELS_QUANT_TILE_LOADER_CUH_
