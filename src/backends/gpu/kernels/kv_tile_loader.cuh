// Streams K/V tiles of one sequence and one K/V head into shared memory
// with 16-byte asynchronous copies, for every key layout (dense, padded, gappy, paged,
// ragged). The forward kernel only calls zero_padding() once and load() per
// tile, so a loader that dequantises (int4, fp8) can replace this one.
//
// Shared-memory tile: kBlockN rows of kHeadDim elements, swizzled
// (smem_tile.cuh). The copies are the vendor layer's (cp.async on CUDA).
#ifndef FMHA_SPLITK_BACKENDS_GPU_KERNELS_KV_TILE_LOADER_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_KERNELS_KV_TILE_LOADER_CUH_

#include <cstdint>

#include "backends/gpu/kernels/forward_params.cuh"
#include "backends/gpu/kernels/smem_tile.cuh"
#include "backends/gpu/vendor/tile.cuh"

namespace fmha::gpu::kernels {

template <typename T, int kHeadDim, int kBlockN, int kThreads>
class KvTileLoader {
 public:
  static constexpr int kRowBytes = kHeadDim * static_cast<int>(sizeof(T));
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kElemsPerChunk = 16 / static_cast<int>(sizeof(T));
  // Rows of a power-of-two chunk count: a thread keeps one chunk and
  // strides over rows. MLA's 72-chunk rows (576 dims): the tile's chunks
  // are dealt out flat instead, tid + i * kThreads.
  static constexpr bool kFlat = kThreads % kChunksPerRow != 0;
  static constexpr int kRowsPerPass = kFlat ? 1 : kThreads / kChunksPerRow;
  static constexpr int kPasses = kBlockN / kRowsPerPass;
  static constexpr int kFlatPasses = (kBlockN * kChunksPerRow + kThreads - 1) / kThreads;
  static_assert(kFlat || kBlockN % kRowsPerPass == 0, "tile and threads must match");

  // Thread `tid` copies chunk tid % kChunksPerRow of rows tid /
  // kChunksPerRow + i * kRowsPerPass: a warp covers whole 128-byte lines.
  __device__ KvTileLoader(const ForwardParams &p, int32_t batch, int32_t group, int32_t head_kv, int tid)
      : seq_(p.seq), batch_(batch), chunk_(tid % kChunksPerRow), row_(tid / kChunksPerRow), tid_(tid) {
    const T *k = static_cast<const T *>(p.k) + group * p.k_stride[2] + head_kv * p.k_stride[3];
    const T *v = static_cast<const T *>(p.v) + group * p.v_stride[2] + head_kv * p.v_stride[3];
    k_chunk_ = chunk_ * kElemsPerChunk < p.head_dim_qk ? k + chunk_ * kElemsPerChunk : nullptr;
    // V_FROM_K: no V view (p.v NULL); the kernel reads V from the K tile.
    v_chunk_ = p.v != nullptr && chunk_ * kElemsPerChunk < p.head_dim_v ? v + chunk_ * kElemsPerChunk : nullptr;
    k_head_ = k;
    v_head_ = p.v != nullptr ? v : nullptr;
    head_dim_qk_ = p.head_dim_qk;
    head_dim_v_ = p.head_dim_v;
    k_stride0_ = p.k_stride[0];
    k_stride1_ = p.k_stride[1];
    v_stride0_ = p.v_stride[0];
    v_stride1_ = p.v_stride[1];
    seq_offset_ = sequence_key_origin(seq_, batch);
    // Dense, padded and gappy rows are linear in the key: key j of this
    // thread's chunk is at *_key0_ + j * stride1, no per-row lookup.
    contiguous_ = seq_.kv_layout != FMHA_KV_PAGED && seq_.kv_layout != FMHA_KV_RAGGED;
    if (contiguous_) {
      const int64_t outer = seq_.kv_layout == FMHA_KV_GAPPY ? 0 : batch;
      k_key0_ = k_chunk_ != nullptr ? k_chunk_ + outer * k_stride0_ + seq_offset_ * k_stride1_ : nullptr;
      v_key0_ = v_chunk_ != nullptr ? v_chunk_ + outer * v_stride0_ + seq_offset_ * v_stride1_ : nullptr;
    }
  }

  // Zeroes the chunks past the head dims in every stage once: they are
  // never loaded, and K's must be 0 (not stale NaN) because Q's zero
  // padding multiplies them. Needs a __syncthreads() before the first read
  // (the pipeline's first wait provides it).
  __device__ void zero_padding(uint8_t *k_tiles, uint8_t *v_tiles, int stages, int head_dim_qk, int head_dim_v, int tid,
                               int threads) const {
    const int k_chunks = head_dim_qk / kElemsPerChunk;
    const int v_chunks = head_dim_v / kElemsPerChunk;
    if (k_chunks == kChunksPerRow && v_chunks == kChunksPerRow) return;
    for (int i = tid; i < stages * kBlockN * kChunksPerRow; i += threads) {
      const int chunk = i % kChunksPerRow;
      const int row = i / kChunksPerRow;  // over all stages: rows stay 8-aligned per tile
      const uint32_t offset = swizzled<kRowBytes>(row, chunk);
      if (chunk >= k_chunks) *reinterpret_cast<uint4 *>(k_tiles + offset) = make_uint4(0, 0, 0, 0);
      if (chunk >= v_chunks) *reinterpret_cast<uint4 *>(v_tiles + offset) = make_uint4(0, 0, 0, 0);
    }
  }

  // Issues the copies of keys [tile_start, tile_start + kBlockN) into the K
  // and V tiles at shared addresses k_tile / v_tile; keys at or past kv_end
  // are zero-filled without touching memory (nor the block table).
  __device__ void load(SmemAddr k_tile, SmemAddr v_tile, int32_t tile_start, int32_t kv_end) const {
    if constexpr (kFlat) {
      const int64_t outer = seq_.kv_layout == FMHA_KV_GAPPY ? 0 : batch_;
#pragma unroll 2
      for (int pass = 0; pass < kFlatPasses; ++pass) {
        const int i = tid_ + pass * kThreads;
        if (i >= kBlockN * kChunksPerRow) break;
        const int row = i / kChunksPerRow;
        const int chunk = i % kChunksPerRow;
        const int32_t key = tile_start + row;
        const bool valid = key < kv_end;
        int64_t k_offset = 0;
        int64_t v_offset = 0;
        if (valid) {
          if (contiguous_) {
            k_offset = outer * k_stride0_ + (seq_offset_ + key) * k_stride1_;
            v_offset = outer * v_stride0_ + (seq_offset_ + key) * v_stride1_;
          } else {
            row_offsets(key, &k_offset, &v_offset);
          }
        }
        const uint32_t offset = swizzled<kRowBytes>(row, chunk);
        const int elem = chunk * kElemsPerChunk;
        if (elem < head_dim_qk_) copy_async_16(k_tile + offset, k_head_ + (valid ? k_offset + elem : 0), valid);
        if (v_head_ != nullptr && elem < head_dim_v_)
          copy_async_16(v_tile + offset, v_head_ + (valid ? v_offset + elem : 0), valid);
      }
      return;
    }
    if (contiguous_) {
      // Rows past kv_end: passes from rows_left / kRowsPerPass on.
      const int32_t rows_left = kv_end - tile_start - row_;
      if (k_key0_ != nullptr) copy_rows(k_tile, k_key0_, k_stride1_, tile_start, rows_left);
      if (v_key0_ != nullptr) copy_rows(v_tile, v_key0_, v_stride1_, tile_start, rows_left);
      return;
    }
    // Paged / ragged: each row's page comes from a table lookup. The
    // lookups of a tile are made by the load() before it (tiles are
    // loaded in order, kBlockN keys apart), so their latency passes
    // during a tile's math instead of stalling these copies (page size 1:
    // one lookup per row).
    if (tile_start != lookahead_start_) {
#pragma unroll
      for (int pass = 0; pass < kPasses; ++pass)
        lookahead_page_[pass] = row_page(tile_start + row_ + pass * kRowsPerPass, kv_end);
    }
    int32_t page[kPasses];
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) page[pass] = lookahead_page_[pass];
    const int32_t rows_left = kv_end - tile_start - row_;
    // This thread's first row of the tile within its page (the row of pass
    // `pass` is kRowsPerPass * pass further, modulo the page size). Only
    // the low bits count: unsigned 32-bit sums wrap without changing them.
    const uint32_t in_page = (seq_.kv_layout == FMHA_KV_PAGED ? static_cast<uint32_t>(seq_offset_) : 0u) +
                             static_cast<uint32_t>(tile_start + row_);
    if (k_chunk_ != nullptr) copy_paged_rows(k_tile, k_chunk_, k_stride0_, k_stride1_, page, in_page, rows_left);
    if (v_chunk_ != nullptr) copy_paged_rows(v_tile, v_chunk_, v_stride0_, v_stride1_, page, in_page, rows_left);
    lookahead_start_ = tile_start + kBlockN;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass)
      lookahead_page_[pass] = row_page(lookahead_start_ + row_ + pass * kRowsPerPass, kv_end);
  }

 private:
  // Shared-memory offset of this thread's chunk in pass `pass` (row row_ +
  // pass * kRowsPerPass): row_'s swizzle when a pass covers a multiple of
  // the swizzle's 8 rows, else the row's own.
  __device__ __forceinline__ uint32_t pass_offset(int pass) const {
    if constexpr (kRowsPerPass % 8 == 0)
      return swizzle_row0_ + pass * kRowsPerPass * kRowBytes;
    else
      return swizzled<kRowBytes>(row_ + pass * kRowsPerPass, chunk_);
  }

  // The contiguous layouts' copies of one tensor's tile: this thread's
  // chunk of rows row_ + pass * kRowsPerPass. Per pass only a pointer step,
  // a compare and the copy: the loop runs once per tile in every warp of
  // the small grids, where the kernel is bound by instruction issue and
  // latency (ncu, run 67: the per-row 64-bit products, swizzles and
  // branches of the old loop were 205 instructions per tile and warp).
  __device__ __forceinline__ void copy_rows(SmemAddr tile, const T *key0, int64_t stride, int32_t tile_start,
                                            int32_t rows_left) const {
    const T *src = key0 + static_cast<int64_t>(tile_start + row_) * stride;
    const int64_t pass_stride = static_cast<int64_t>(kRowsPerPass) * stride;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const bool valid = pass * kRowsPerPass < rows_left;
      copy_async_16(tile + pass_offset(pass), valid ? src : key0, valid);
      src += pass_stride;
    }
  }

  // The paged / ragged layouts' copies of one tensor's tile, the rows'
  // pages looked up (page[pass]); as copy_rows, without per-row branches.
  __device__ __forceinline__ void copy_paged_rows(SmemAddr tile, const T *chunk0, int64_t page_stride,
                                                  int64_t row_stride, const int32_t (&page)[kPasses], uint32_t in_page,
                                                  int32_t rows_left) const {
    const uint32_t page_mask = (1u << seq_.page_size_log2) - 1u;
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) {
      const bool valid = pass * kRowsPerPass < rows_left;
      const uint32_t inner = (in_page + pass * kRowsPerPass) & page_mask;
      const T *src = chunk0 + page[pass] * page_stride + static_cast<int64_t>(inner) * row_stride;
      copy_async_16(tile + pass_offset(pass), valid ? src : chunk0, valid);
    }
  }

  // The physical page of key `key` (index within the sequence) of a paged
  // or ragged sequence, from the block table / page list; 0 for keys at or
  // past kv_end, whose entries are not read.
  __device__ __forceinline__ int32_t row_page(int32_t key, int32_t kv_end) const {
    if (key >= kv_end) return 0;
    if (seq_.kv_layout == FMHA_KV_PAGED)
      return __ldg(seq_.block_table + batch_ * seq_.block_table_stride[0] +
                   ((seq_offset_ + key) >> seq_.page_size_log2) * seq_.block_table_stride[1]);
    return __ldg(seq_.kv_indices + (seq_offset_ + (key >> seq_.page_size_log2)) * seq_.kv_indices_stride);
  }

  // Element offsets of key `key` in paged or ragged K and V, on page `page`.
  __device__ __forceinline__ void row_offsets(int32_t key, int64_t page, int64_t *k_offset, int64_t *v_offset) const {
    const int32_t page_mask = (1 << seq_.page_size_log2) - 1;
    // The row within the page.
    const int64_t inner = seq_.kv_layout == FMHA_KV_PAGED ? (seq_offset_ + key) & page_mask : key & page_mask;
    *k_offset = page * k_stride0_ + inner * k_stride1_;
    *v_offset = page * v_stride0_ + inner * v_stride1_;
  }

  // Element offsets of key `key` in paged or ragged K and V.
  __device__ __forceinline__ void row_offsets(int32_t key, int64_t *k_offset, int64_t *v_offset) const {
    row_offsets(key, row_page(key, key + 1), k_offset, v_offset);
  }

  const SeqLayout &seq_;
  const int64_t batch_;
  const int chunk_;
  const int row_;
  const int tid_;
  // Where this thread's chunk of the tile's row row_ sits in shared memory.
  const uint32_t swizzle_row0_ = swizzled<kRowBytes>(row_, chunk_);
  const T *k_head_;  // the head's row 0 (flat path)
  const T *v_head_;  // null with V_FROM_K
  int32_t head_dim_qk_, head_dim_v_;
  const T *k_chunk_;  // this thread's chunk of row 0 of the head; null past Dqk
  const T *v_chunk_;  // likewise past Dv
  int64_t k_stride0_, k_stride1_, v_stride0_, v_stride1_;
  int64_t seq_offset_;         // GAPPY / PAGED: first key position; RAGGED: first page index
  bool contiguous_;            // DENSE, PADDED, GAPPY
  const T *k_key0_ = nullptr;  // contiguous: this thread's chunk of the sequence's key 0
  const T *v_key0_ = nullptr;
  // Paged / ragged: the pages of this thread's rows of the tile that
  // starts at lookahead_start_ (looked up by the previous load()).
  mutable int32_t lookahead_start_ = -1;
  mutable int32_t lookahead_page_[kPasses] = {};
};

}  // namespace fmha::gpu::kernels

#endif  // FMHA_SPLITK_BACKENDS_GPU_KERNELS_KV_TILE_LOADER_CUH_
