// The split-K forward kernel: one CTA computes attention of up to 16 query
// rows (the Mq * Hq / Hkv rows that share one K/V head, GQA packing) over
// one piece of one sequence's keys, reading each K/V row once; or of 32
// rows (kRowTiles 2, "row pairs": MQA, Mq 16), two MMA row tiles sharing
// every K and V fragment a warp loads.
//
// Structure (kWarps warps, K/V tiles of kBlockN keys through a kStages-deep
// pipeline of asynchronous copies):
//  - S = Q K^T: warp w computes the scores of keys [w, w + 1) * kBlockN /
//    kWarps of the tile over the whole head dim (tensor-core MMAs with fp32
//    accumulation: m16n8k16 on NVIDIA, 16x16x16 MFMA on AMD);
//  - the row maxima of the warps meet in shared memory, so every warp runs
//    the same online softmax (exp2, scale * log2(e) folded in); P goes to
//    shared memory in the input dtype;
//  - O += P V: warp w owns head dims [w, w + 1) * Dv / kWarps over all keys
//    of the tile, so the accumulator is a slice of 16 x D per warp (16 x
//    128 fp32 at D = 512 on NVIDIA: no spills) and needs no cross-warp
//    reduction;
//  - the running sums of the warps are added once at the end.
// Decode is memory-bound, but at a 16-row tile (mostly padding at Mq 1) the
// per-tile instruction chain is what limits a CTA: the shape is chosen for
// several resident CTAs per SM with 2-3 tiles each in flight, straight-line
// MMA code and conflict-free shared memory.
//
// Written once for both vendors: what NVIDIA and AMD GPUs do differently
// (the MMA instructions and their fragment layouts, the copies, warp
// shuffles, the tile shapes that suit them) is the vendor layer's
// (backends/gpu/vendor/tile.cuh); this file sees an MMA fragment only
// through FragmentLayout's rows and columns.
#ifndef FMHA_SPLITK_BACKENDS_GPU_KERNELS_SPLITK_FORWARD_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_KERNELS_SPLITK_FORWARD_CUH_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/gpu/kernels/forward_params.cuh"
#include "backends/gpu/kernels/kv_tile_loader.cuh"
#include "backends/gpu/kernels/quant_tile_loader.cuh"
#include "backends/gpu/kernels/smem_tile.cuh"
#include "backends/gpu/merge_math.cuh"
#include "backends/gpu/split_combine.cuh"
#include "backends/gpu/vendor/block.cuh"
#include "backends/gpu/vendor/tile.cuh"

namespace fmha::gpu::kernels {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Bytes of one staging area of a quantised loader (0 for the native one,
// which has none).
template <typename Loader, bool kQuantised>
struct QuantStageBytes {
  static constexpr int value = 0;
};
template <typename Loader>
struct QuantStageBytes<Loader, true> {
  static constexpr int value = Loader::kStageBytes;
};

// Tile shape and shared-memory layout for one (Q dtype, head-dim bucket,
// K/V kind). Native: K and V arrive in T and the MMAs take T (bf16 P split
// in two, below). kQuantised: K/V are int4 or fp8, staged packed and
// dequantised per tile (quant_tile_loader.cuh) into fp16 K and V operand
// tiles, and every MMA is fp16. bf16 Q is then split once per piece into
// an fp16 high and low part (kSplitQ) after a power-of-two scale per row
// that keeps it in fp16's range: Q keeps ~22 bits, two MMAs per k-step.
// T is fp16 also for fp8 Q, whose codes fp16 holds exactly.
// Warps, keys per tile, stages and resident CTAs are the vendor's
// TilePolicy (what suits an SM or a CU, and its shared memory).
// kRowTilesPerCta 2 (row pairs; native K/V up to D 128): 32 query rows per
// CTA. Where a K/V head has more than 16 query rows (MQA's 32 heads, Mq 16 of
// GQA), one CTA per 16 rows would run the whole per-tile chain (copies,
// barriers, K and V fragment loads) once per 16 rows over the same K/V
// tile; a pair runs it once for 32, only the MMAs and the softmax doubled.
// kWide: the vendor's wide TilePolicy (8 warps; one row tile, native D 128).
template <typename T, int kHeadDimBucket, bool kQuantisedKv = false, int kRowTilesPerCta = 1, bool kWide = false>
struct ForwardTile {
  static constexpr bool kQuantised = kQuantisedKv;
  static constexpr int kRowTiles = kRowTilesPerCta;
  static_assert(kRowTiles == 1 || (kRowTiles == 2 && !kQuantisedKv && kHeadDimBucket <= 128),
                "row pairs: native K/V, head dims up to 128");
  static_assert(!kWide || kRowTiles == 1, "wide tiles: one row tile per CTA");
  using Policy = TilePolicy<kHeadDimBucket, kQuantisedKv, kWide>;
  using Layout = FragmentLayout;
  using QkType = T;  // Q's dtype in memory
  using QkMmaType = std::conditional_t<kQuantised, half_t, T>;
  using PvType = std::conditional_t<kQuantised, half_t, T>;
  // Bucket 576 is MLA decode: Dqk 576, Dv 512, V the first 512 dims of
  // the K rows (FMHA_FLAG_V_FROM_K): one tile per stage, read once.
  static constexpr bool kVFromK = kHeadDimBucket == 576;
  static constexpr int kHeadDim = kHeadDimBucket;  // QK dims (the K row)
  static constexpr int kHeadDimV = kVFromK ? 512 : kHeadDimBucket;
  static constexpr int kWarps = Policy::kWarps;
  static constexpr int kThreads = kWarps * kWarpSize;
  static constexpr int kRows = kRowTiles * Layout::kTileRows;         // query rows per CTA
  static constexpr int kLaneRows = kRowTiles * Layout::kRowsPerLane;  // fragment rows a lane holds
  static constexpr int kBlockN = Policy::kBlockN;
  static constexpr int kStages = Policy::kStages;
  // (A pair's fragments double: registers allow two CTAs per SM.)
  static constexpr int kMinBlocksPerSm = kRowTiles == 1 ? Policy::kMinBlocksPerSm : 2;
  static constexpr int kKeysPerWarp = kBlockN / kWarps;                 // S columns of a warp
  static constexpr int kDimsPerWarp = kHeadDimV / kWarps;               // O columns of a warp
  static constexpr int kScoreTiles = kKeysPerWarp / Layout::kTileCols;  // n-tiles of S per warp
  static constexpr int kOutTiles = kDimsPerWarp / Layout::kTileCols;    // n-tiles of O per warp
  static constexpr int kPStride = kBlockN + 8;  // P row, elements: 16-byte pad against bank conflicts
  // bf16 keeps 8 bits of P: rounding P alone costs ~1.5e-3 relative error
  // in O, most of the 2e-3 budget. So bf16 P is split into hi + lo bf16
  // parts (P to ~16 bits) and PV takes two MMAs; fp16's 11 bits suffice.
  // The MMAs are far from the bound of this memory-bound kernel.
  static constexpr bool kSplitP = std::is_same_v<PvType, bf16_t>;
  static constexpr bool kSplitQ = kQuantised && std::is_same_v<T, bf16_t>;
  static constexpr int kQTiles = kSplitQ ? 2 : 1;
  static constexpr int kPTiles = kSplitP ? 2 : 1;
  static constexpr int kPTileBytes = kRows * kPStride * static_cast<int>(sizeof(PvType));
  // Separate O accumulators for the two parts, except at D 512 and in row
  // pairs (registers; a pair's two row tiles are independent chains).
  static constexpr int kPvAccs = kSplitP && kOutTiles <= 8 && kRowTiles == 1 ? 2 : 1;

  using Loader = std::conditional_t<kQuantised, QuantKvTileLoader<kHeadDim, kBlockN, kThreads, kVFromK>,
                                    KvTileLoader<T, kHeadDim, kBlockN, kThreads>>;
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kTileBytes = kBlockN * kRowBytes;
  static_assert(Loader::kRowBytes == kRowBytes && Loader::kTileBytes == kTileBytes, "loader and tile agree");

  // Native: Q [16][kHeadDim] swizzled, then kStages K tiles and kStages V
  // tiles. Quantised: Q (hi, lo with kSplitQ), the K and the V operand
  // tile, then kStages staging areas of packed rows.
  static constexpr int kQOffset = 0;
  static constexpr int kKOffset = kQOffset + kQTiles * kRows * kRowBytes;
  static constexpr int kKBytes = kQuantised ? kTileBytes : kStages * kTileBytes;
  static constexpr int kVOffset = kKOffset + kKBytes;
  static constexpr int kVBytes = kVFromK ? 0 : kQuantised ? kTileBytes : kStages * kTileBytes;
  static constexpr int kStagingOffset = kVOffset + kVBytes;
  static constexpr int kStagingBytes = kQuantised ? kStages * QuantStageBytes<Loader, kQuantised>::value : 0;
  static constexpr int kPOffset = kStagingOffset + kStagingBytes;  // P [kPTiles][16][kPStride]
  static constexpr int kMaxOffset = kPOffset + kPTiles * kPTileBytes;
  static constexpr int kSumOffset = kMaxOffset + kWarps * kRows * static_cast<int>(sizeof(float));
  static constexpr int kQScaleOffset = kSumOffset + kWarps * kRows * static_cast<int>(sizeof(float));
  // A split Q row's chunks are adjacent lanes of one warp (power-of-two
  // chunk counts up to a warp), which agree on its scale by shuffles; else
  // (MLA's 72 chunks) the row maxima meet in shared memory (kQTopOffset).
  static constexpr int kQChunks = kRowBytes / 16;
  static constexpr bool kQRowInWarp = (kQChunks & (kQChunks - 1)) == 0 && kQChunks <= kWarpSize;
  static constexpr int kQTopOffset = kQScaleOffset + (kSplitQ ? kRows * static_cast<int>(sizeof(float)) : 0);
  static constexpr int kSmemBytes =
      kQTopOffset + (kSplitQ && !kQRowInWarp ? kRows * static_cast<int>(sizeof(float)) : 0);

  static_assert(kKeysPerWarp % Layout::kTileCols == 0, "S columns of a warp: whole n-tiles");
  static_assert(kDimsPerWarp % 16 == 0, "O columns of a warp: 16-column steps");
  static_assert(kBlockN % 16 == 0, "PV steps of 16 keys");

  // Tile row of a lane's fragment row r (0 .. kLaneRows - 1): row r % kRowsPerLane of row tile r / kRowsPerLane.
  __device__ __forceinline__ static int lane_row(int lane, int r) {
    return Layout::row(lane, r % Layout::kRowsPerLane) + Layout::kTileRows * (r / Layout::kRowsPerLane);
  }
};

__device__ __forceinline__ float load_as_float(const void *base, int32_t elem, int64_t index) {
  switch (elem) {
    case FMHA_ELEM_F16:
      return to_float(static_cast<const half_t *>(base)[index]);
    case FMHA_ELEM_BF16:
      return to_float(static_cast<const bf16_t *>(base)[index]);
    case FMHA_ELEM_F64:
      return static_cast<float>(static_cast<const double *>(base)[index]);
    default:
      return static_cast<const float *>(base)[index];
  }
}

// Stores kCols adjacent output elements (1 or 2; `index` even for 2, rows
// 16-byte aligned) of one fragment row.
template <int kCols>
__device__ __forceinline__ void store_row_elems(void *base, int32_t elem, int64_t index, const float *x) {
  if constexpr (kCols == 2) {
    switch (elem) {
      case FMHA_ELEM_F16:
        *reinterpret_cast<uint32_t *>(static_cast<half_t *>(base) + index) = pack2<half_t>(x[0], x[1]);
        break;
      case FMHA_ELEM_BF16:
        *reinterpret_cast<uint32_t *>(static_cast<bf16_t *>(base) + index) = pack2<bf16_t>(x[0], x[1]);
        break;
      default:
        *reinterpret_cast<float2 *>(static_cast<float *>(base) + index) = make_float2(x[0], x[1]);
        break;
    }
  } else {
    static_assert(kCols == 1, "one or two columns per fragment row");
    switch (elem) {
      case FMHA_ELEM_F16:
        static_cast<half_t *>(base)[index] = half_from_float(x[0]);
        break;
      case FMHA_ELEM_BF16:
        static_cast<bf16_t *>(base)[index] = bf16_from_float(x[0]);
        break;
      default:
        static_cast<float *>(base)[index] = x[0];
        break;
    }
  }
}

// Stores P of kCols adjacent keys (1 or 2) of one fragment row: rounded to
// T, and for kSplit (bf16) also the rounding remainder, in the tile
// `tile_bytes` further.
template <typename T, bool kSplit, int kCols>
__device__ __forceinline__ void store_p(T *at, int tile_bytes, const float *x) {
  if constexpr (kCols == 2) {
    if constexpr (kSplit) {
      uint32_t hi, lo;
      split_bf16x2(x[0], x[1], &hi, &lo);
      *reinterpret_cast<uint32_t *>(at) = hi;
      *reinterpret_cast<uint32_t *>(reinterpret_cast<uint8_t *>(at) + tile_bytes) = lo;
    } else {
      *reinterpret_cast<uint32_t *>(at) = pack2<T>(x[0], x[1]);
    }
  } else {
    static_assert(kCols == 1, "one or two columns per fragment row");
    // The low half of a packed pair is the first value.
    if constexpr (kSplit) {
      uint32_t hi, lo;
      split_bf16x2(x[0], 0.f, &hi, &lo);
      *reinterpret_cast<uint16_t *>(at) = static_cast<uint16_t>(hi);
      *reinterpret_cast<uint16_t *>(reinterpret_cast<uint8_t *>(at) + tile_bytes) = static_cast<uint16_t>(lo);
    } else {
      *reinterpret_cast<uint16_t *>(at) = static_cast<uint16_t>(pack2<T>(x[0], 0.f));
    }
  }
}

// The keys [lo, hi] (inclusive) query m of a sequence with `mq` queries and
// `kv_len` keys sees under the structural mask; int64 because the window
// arithmetic may leave the int32 range. Bottom-right aligned: query m sits
// at position kv_len - mq + m.
__device__ __forceinline__ void visible_keys(const ForwardParams &p, int32_t kv_len, int32_t mq, int32_t m, int64_t *lo,
                                             int64_t *hi) {
  const int64_t position = static_cast<int64_t>(kv_len) - mq + m;
  int64_t first = 0;
  int64_t last = static_cast<int64_t>(kv_len) - 1;
  switch (p.mask) {
    case FMHA_MASK_CAUSAL:
      last = min(last, position);
      break;
    case FMHA_MASK_LOCAL:
      first = max(first, position - p.window_left);
      last = min(last, position + p.window_right);
      break;
    case FMHA_MASK_CAUSAL_LOCAL:
      first = max(first, position - p.window_left);
      last = min(last, position);
      break;
    default:
      break;
  }
  *lo = first;
  *hi = last;
}

// A CTA's work item as attend_work_item keeps it through its pieces: one
// value per lane of each warp (lane k holds value k; lane_value fetches
// it), so that one register is live through every piece instead of ten
// (the kernels are at their register bounds: ptxas spilled more with
// them in registers). kFirst / kPieces: the item's first piece (kInline:
// its first sequence) and piece count; the rest only kInline: what its
// head and tail pieces need (sequences between them are whole) and the
// range length (int32: plan_forward takes kInline only where twice the
// batch's keys fit int32).
enum WorkLane : int {
  kFirst,
  kPieces,
  kHeadBegin,
  kHeadEnd,
  kHeadSlot,
  kHeadLen,
  kTailEnd,
  kTailSlot,
  kTailLen,
  kRangeLen,
  kWorkLanes
};

// What one CTA's row tile of a piece covers (the same in every forward
// kernel): the piece, its sequence's key count and queries, the tile's
// first packed row (query * heads_per_kv + head) and its real rows, and
// the keys [kv_lo, kv_hi) of the piece any of them sees (the structural
// mask trims whole tiles: causal rows skip the keys after them).
struct TileRows {
  Piece piece;
  int32_t kv_len;
  int32_t chunk;       // the piece's index in its sequence (o_partial)
  int32_t work_lanes;  // PieceAt::work_lanes
  QueryRange queries;
  int32_t row0;
  int32_t rows_here;
  int32_t kv_lo;
  int32_t kv_hi;
};

// Fills *t for piece `at` and row tile `row_tile` of `tile_rows` rows;
// false when the tile is past the sequence's rows (nothing to do).
// Uniform across the CTA.
__device__ __forceinline__ bool find_tile_rows(const ForwardParams &p, const PieceAt &at, int32_t row_tile,
                                               int32_t tile_rows, TileRows *t) {
  t->piece = at.piece;
  t->kv_len = at.kv_len;
  t->chunk = at.chunk;
  t->work_lanes = at.work_lanes;
  t->queries = query_range(p.seq, t->piece.batch);
  const int32_t rows = t->queries.count * p.heads_per_kv;
  t->row0 = row_tile * tile_rows;
  if (t->row0 >= rows) return false;
  t->rows_here = min(tile_rows, rows - t->row0);
  int64_t lo, hi, unused;
  visible_keys(p, t->kv_len, t->queries.count, t->row0 / p.heads_per_kv, &lo, &unused);
  visible_keys(p, t->kv_len, t->queries.count, (t->row0 + t->rows_here - 1) / p.heads_per_kv, &unused, &hi);
  t->kv_lo = static_cast<int32_t>(max(lo, static_cast<int64_t>(t->piece.kv_begin)));
  t->kv_hi =
      static_cast<int32_t>(max(min(hi + 1, static_cast<int64_t>(t->piece.kv_end)), static_cast<int64_t>(t->kv_lo)));
  return true;
}

// Row `row` of a tile (0-based; a padding row past rows_here takes the last
// real row's query and head): its query (index in the sequence), query head,
// and the keys [lo, hi] of the piece it sees (empty for padding rows).
struct RowKeys {
  int32_t query;
  int32_t head;
  int32_t lo;
  int32_t hi;
};
__device__ __forceinline__ RowKeys row_keys(const ForwardParams &p, const TileRows &t, int32_t head_kv, int32_t row) {
  RowKeys k;
  const int32_t packed = t.row0 + min(row, t.rows_here - 1);
  k.query = packed / p.heads_per_kv;
  k.head = head_kv * p.heads_per_kv + packed % p.heads_per_kv;
  int64_t lo, hi;
  visible_keys(p, t.kv_len, t.queries.count, k.query, &lo, &hi);
  k.lo = static_cast<int32_t>(max(lo, static_cast<int64_t>(t.kv_lo)));
  k.hi = static_cast<int32_t>(max(min(hi, static_cast<int64_t>(t.kv_hi) - 1), static_cast<int64_t>(-1)));
  if (row >= t.rows_here) {
    k.lo = 1;
    k.hi = 0;
  }
  return k;
}

// The scale of fp8 Q's codes in the row of query `query` (index within its
// sequence) and head `head` (FMHA_FLAG_FP8_QK): per row, per head or one.
__device__ __forceinline__ float q_code_scale(const ForwardParams &p, const QueryRange &queries, int32_t group,
                                              int32_t query, int32_t head) {
  int64_t at = 0;
  if (p.q_scale_granularity == FMHA_SCALE_PER_ROW)
    at = queries.batch * p.q_scale_stride[0] + (queries.row0 + query) * p.q_scale_stride[1] +
         group * p.q_scale_stride[2] + head * p.q_scale_stride[3];
  else if (p.q_scale_granularity == FMHA_SCALE_PER_HEAD)
    at = group * p.q_scale_stride[0] + head * p.q_scale_stride[1];
  return __ldg(p.q_scale + at);
}

// Where a CTA's rows go: the output (O, LSE), a workspace slot, or an
// o_partial index; element offsets are batch * s[0] + query * s[1] +
// group * s[2] + head * s[3] for O (plus the dim) and batch * s[0] +
// group * s[1] + head * s[2] + query * s[3] for LSE.
struct OutputTarget {
  void *o;
  float *lse;  // may be null
  int64_t o_stride[4];
  int64_t lse_stride[4];
  int32_t o_elem;
  int32_t batch;  // batch index in the target
  int32_t row0;   // query index of the sequence's first query in the target
  bool add_sink;  // fold the sinks into this result
};

__device__ __forceinline__ OutputTarget output_target(const ForwardParams &p, const Piece &piece, int32_t chunk,
                                                      const QueryRange &queries) {
  OutputTarget t;
  if (p.write_partials) {
    t.o = p.o_partial + chunk * p.o_partial_stride[0];
    t.lse = p.lse_partial != nullptr ? p.lse_partial + chunk * p.lse_partial_stride[0] : nullptr;
    for (int i = 0; i < 4; ++i) {
      t.o_stride[i] = p.o_partial_stride[i + 1];
      t.lse_stride[i] = p.lse_partial_stride[i + 1];
    }
    t.o_elem = FMHA_ELEM_F32;
    t.batch = queries.batch;
    t.row0 = queries.row0;
    // Merging the partials must give the attention with sinks: the sink
    // joins exactly one of them.
    t.add_sink = p.sinks != nullptr && chunk == 0;
  } else if (piece.slot >= 0) {
    // Workspace slot: O [G, Hq, Mq, Dv], LSE [G, Hq, Mq], Mq = max_q_seqlen.
    const int64_t mq = p.seq.max_q_seqlen;
    const int64_t rows_per_slot = static_cast<int64_t>(p.groups) * p.heads_q * mq;
    t.o = p.ws_o + piece.slot * rows_per_slot * p.head_dim_v;
    t.lse = p.ws_lse + piece.slot * rows_per_slot;
    t.o_stride[0] = 0;
    t.o_stride[1] = p.head_dim_v;
    t.o_stride[2] = p.heads_q * mq * p.head_dim_v;
    t.o_stride[3] = mq * p.head_dim_v;
    t.lse_stride[0] = 0;
    t.lse_stride[1] = p.heads_q * mq;
    t.lse_stride[2] = mq;
    t.lse_stride[3] = 1;
    t.o_elem = FMHA_ELEM_F32;
    t.batch = 0;
    t.row0 = 0;
    t.add_sink = false;  // the combine kernel adds it once
  } else {
    t.o = p.o;
    t.lse = p.lse;
    for (int i = 0; i < 4; ++i) {
      t.o_stride[i] = p.o_stride[i];
      t.lse_stride[i] = p.lse_stride[i];
    }
    t.o_elem = p.o_elem;
    t.batch = queries.batch;
    t.row0 = queries.row0;
    t.add_sink = p.sinks != nullptr;
  }
  return t;
}

// A finished row: its natural-log LSE and the scale of its unnormalised O,
// from its maximum (log2 units) and sum, with the sink folded in where the
// target adds it. No visible key gives LSE -inf and O = 0. A NaN score (NaN
// in Q or K) makes the sum NaN: then LSE and O are NaN too (sum != 0, not
// sum > 0), so a combine or merge propagates it instead of taking the
// piece for empty.
struct RowResult {
  float lse;
  float o_scale;
};
__device__ __forceinline__ RowResult finish_row(const ForwardParams &p, const OutputTarget &target, float row_max,
                                                float sum, int32_t group, int32_t head) {
  RowResult r;
  r.lse = sum != 0.f ? (row_max + log2f(sum)) * kLn2 : -INFINITY;
  r.o_scale = sum != 0.f ? 1.f / sum : 0.f;
  if (target.add_sink) {
    const float sink = p.sinks[group * p.sinks_stride[0] + head * p.sinks_stride[1]];
    const float top = fmaxf(r.lse, sink);
    const float with_sink = lse_of(top, exp_relative(r.lse, top) + exp_relative(sink, top));
    r.o_scale *= merge_weight(r.lse, with_sink);
    r.lse = with_sink;
  }
  return r;
}

// Element offset of O's row (query index within the sequence) in the target.
__device__ __forceinline__ int64_t o_row_offset(const OutputTarget &t, int32_t query, int32_t group, int32_t head) {
  return t.batch * t.o_stride[0] + (t.row0 + query) * t.o_stride[1] + group * t.o_stride[2] + head * t.o_stride[3];
}
__device__ __forceinline__ void store_lse(const OutputTarget &t, int32_t query, int32_t group, int32_t head,
                                          float lse) {
  if (t.lse != nullptr)
    t.lse[t.batch * t.lse_stride[0] + group * t.lse_stride[1] + head * t.lse_stride[2] +
          (t.row0 + query) * t.lse_stride[3]] = lse;
}

// The CTA's place in the forward grid: the K/V heads are the fastest grid
// index, so that the CTAs that run together read whole [G, Hkv, D] key rows
// between them, contiguous memory, rather than one head's 2*D bytes out of
// every row (DRAM page locality); then row tiles, then work items.
struct GridCell {
  int32_t group, head_kv, row_tile, item;
};
__device__ __forceinline__ GridCell grid_cell(const ForwardParams &p) {
  const int32_t heads = p.groups * p.heads_kv;
  const int32_t head_index = static_cast<int32_t>(blockIdx.x % heads);
  const int32_t tile_index = static_cast<int32_t>(blockIdx.x / heads);
  return GridCell{head_index / p.heads_kv, head_index % p.heads_kv, tile_index % p.num_row_tiles,
                  tile_index / p.num_row_tiles};
}

#if FMHA_GPU_HAS_FUSED_MERGE
// The merge inside the forward kernel (ForwardParams::merge_counters), run
// by every thread of a CTA that has just written its rows of a split
// sequence's slot: counts the slot in, and the last CTA of the (sequence,
// row tile, group, K/V head) to do so merges the sequence's slots for
// those rows into O and LSE, the sink joining the denominator: what the
// combine pass does for them, with the same merge_math, summing the slots
// in piece order (deterministic; the bits may differ from the combine
// pass's, which adds in another order). Why one launch instead of two:
// docs/performance.md. Uniform across the CTA.
//
// Memory order: the CTA's slot stores, a barrier, then one thread's
// device-scope acquire-release count (arrive_acq_rel: it releases the
// CTA's stores and, in the last CTA, acquires everyone's), a barrier, and
// the last CTA reads the slots through L2 only (__ldcg: another SM wrote
// them). The count wraps to 0 past slots - 1, so the last CTA leaves the
// counter zero for the next run.
template <int kThreads>
__device__ __forceinline__ void merge_if_last(const ForwardParams &p, const TileRows &t, int32_t row_tile,
                                              int32_t group, int32_t head_kv, uint8_t *smem) {
  // (In the dynamic shared memory: merge_smem_bytes.)
  int32_t &last = *reinterpret_cast<int32_t *>(smem);
  int32_t first_slot = 0;
  const int32_t slots = piece_slots(p.work, p.seq, t.piece, t.kv_len, lane_value(t.work_lanes, kRangeLen), &first_slot);
  __syncthreads();  // every thread's stores of the slot are issued; shared memory is free
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    const int64_t unit =
        ((static_cast<int64_t>(t.piece.batch) * p.num_row_tiles + row_tile) * p.groups + group) * p.heads_kv + head_kv;
    const uint32_t arrived = slots > 0 ? arrive_acq_rel(p.merge_counters + unit, static_cast<uint32_t>(slots - 1)) : 0u;
    last = slots > 0 && arrived == static_cast<uint32_t>(slots - 1);
  }
  __syncthreads();
  if (!last) return;

  // The plan sized this for the most slots a sequence can have
  // (merge_smem_bytes <= the tile's shared memory).
  const int32_t rows = t.rows_here;
  float *const weight = reinterpret_cast<float *>(smem + kMergeFlagBytes);  // [rows][slots]: slot LSE, then weight
  float *const merged_lse = weight + rows * slots;                          // [rows]
  const int64_t mq = p.seq.max_q_seqlen;
  const int64_t slot_rows = static_cast<int64_t>(p.groups) * p.heads_q * mq;  // LSE entries per slot
  // Tile row r's query (in its sequence) and query head, and its entry in a slot.
  const auto query_of = [&](int32_t r) { return (t.row0 + r) / p.heads_per_kv; };
  const auto head_of = [&](int32_t r) { return head_kv * p.heads_per_kv + (t.row0 + r) % p.heads_per_kv; };
  const auto slot_entry = [&](int32_t r) {
    return (static_cast<int64_t>(group) * p.heads_q + head_of(r)) * mq + query_of(r);
  };
  for (int32_t i = tid; i < rows * slots; i += kThreads) {
    const int32_t r = i / slots;
    const int32_t s = i % slots;
    weight[i] = __ldcg(p.ws_lse + (first_slot + s) * slot_rows + slot_entry(r));
  }
  __syncthreads();

  // A warp per row: the merged LSE, then the slots' weights.
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;
  const LaneGroup lanes(kWarpSize);
  const auto max_op = [](float a, float b) { return propagating_max(a, b); };
  for (int32_t r = warp; r < rows; r += kThreads / kWarpSize) {
    float *const row_weight = weight + r * slots;
    const float sink_lse =
        p.sinks != nullptr ? p.sinks[group * p.sinks_stride[0] + head_of(r) * p.sinks_stride[1]] : kNegInf;
    float max_lse = kNegInf;
    for (int32_t s = lane; s < slots; s += kWarpSize) max_lse = max_op(row_weight[s], max_lse);
    max_lse = max_op(sink_lse, lanes.reduce(max_lse, max_op));
    float sum_exp = 0.f;
    for (int32_t s = lane; s < slots; s += kWarpSize) sum_exp += exp_relative(row_weight[s], max_lse);
    const float lse = lse_of(max_lse, exp_relative(sink_lse, max_lse) + lanes.sum(sum_exp));
    for (int32_t s = lane; s < slots; s += kWarpSize) row_weight[s] = merge_weight(row_weight[s], lse);
    if (lane == 0) merged_lse[r] = lse;
  }
  __syncthreads();

  // A thread per (row, 4 dims of O): the slots in order, kLoads in flight.
  constexpr int kLoads = 8;
  const int32_t vectors = p.head_dim_v / 4;
  const int64_t slot_stride = slot_rows * p.head_dim_v;  // floats of O between slots
  const QueryRange &queries = t.queries;
  for (int32_t i = tid; i < rows * vectors; i += kThreads) {
    const int32_t r = i / vectors;
    const int32_t quad = i % vectors;
    const float *const row_weight = weight + r * slots;
    const float *const o_slots = p.ws_o + (first_slot * slot_rows + slot_entry(r)) * p.head_dim_v + 4 * quad;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int32_t s0 = 0; s0 < slots; s0 += kLoads) {
      float w[kLoads];
      float4 x[kLoads];
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        w[k] = s0 + k < slots ? row_weight[s0 + k] : 0.f;
        // An empty partial (weight 0) holds O = 0: skip its bytes.
        x[k] = w[k] != 0.f ? __ldcg(reinterpret_cast<const float4 *>(o_slots + (s0 + k) * slot_stride))
                           : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int k = 0; k < kLoads; ++k) add_weighted(acc, w[k], x[k]);
    }
    const int32_t query = queries.row0 + query_of(r);
    const int32_t head = head_of(r);
    store_quad(
        p.o, p.o_elem,
        queries.batch * p.o_stride[0] + query * p.o_stride[1] + group * p.o_stride[2] + head * p.o_stride[3] + 4 * quad,
        acc);
    if (quad == 0 && p.lse != nullptr)
      p.lse[queries.batch * p.lse_stride[0] + group * p.lse_stride[1] + head * p.lse_stride[2] +
            query * p.lse_stride[3]] = merged_lse[r];
  }
}
#endif

// Attention of row tile `row_tile` of piece `at` for one K/V head.
// Uniform across the CTA (every early return too).
template <typename Tile>
__device__ __forceinline__ void attend_piece(const ForwardParams &p, uint8_t *smem, const PieceAt &at, int32_t row_tile,
                                             int32_t group, int32_t head_kv) {
  using Layout = typename Tile::Layout;
  constexpr int kHeadDim = Tile::kHeadDim;
  constexpr int kBlockN = Tile::kBlockN;
  constexpr int kStages = Tile::kStages;
  constexpr int kRowBytes = Tile::kRowBytes;
  constexpr int kNS = Tile::kScoreTiles;
  constexpr int kNO = Tile::kOutTiles;
  constexpr int kR = Tile::kLaneRows;        // fragment rows of a lane (all its row tiles)
  constexpr int kRL = Layout::kRowsPerLane;  // ... in one row tile: row r is row r % kRL of tile r / kRL
  constexpr int kMT = Tile::kRowTiles;
  constexpr int kC = Layout::kColsPerRow;  // adjacent columns of a lane in each n-tile row
  using T = typename Tile::QkType;
  using PvType = typename Tile::PvType;

  TileRows tile_rows;
  if (!find_tile_rows(p, at, row_tile, Tile::kRows, &tile_rows)) return;
  const Piece &piece = tile_rows.piece;
  const QueryRange &queries = tile_rows.queries;
  const int32_t row0 = tile_rows.row0;
  const int32_t rows_here = tile_rows.rows_here;
  const int32_t kv_lo = tile_rows.kv_lo;
  const int32_t kv_hi = tile_rows.kv_hi;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;

  // Per fragment row of this lane: query index, head, visible keys
  // [vis_lo, vis_hi] (inside the piece; empty for padding rows), bias row.
  int32_t row_query[kR];
  int32_t row_head[kR];
  int32_t vis_lo[kR];
  int32_t vis_hi[kR];
  int64_t bias_row[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const RowKeys keys = row_keys(p, tile_rows, head_kv, Tile::lane_row(lane, r));
    row_query[r] = keys.query;
    row_head[r] = keys.head;
    vis_lo[r] = keys.lo;
    vis_hi[r] = keys.hi;
    bias_row[r] = piece.batch * p.bias_stride[0] + group * p.bias_stride[1] + row_head[r] * p.bias_stride[2] +
                  row_query[r] * p.bias_stride[3];
  }
  // The first global access (attend_work_item<true> may not have waited
  // for the previous kernel yet; a second wait returns at once).
  wait_for_prior_grids();

  // The score scale of each fragment row; fp8 Q's codes carry their own
  // scale, applied to the exact code products.
  float row_scale[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) row_scale[r] = p.score_scale;
  if (Tile::kQuantised && p.q_fp8) {
#pragma unroll
    for (int r = 0; r < kR; ++r) row_scale[r] *= q_code_scale(p, queries, group, row_query[r], row_head[r]);
  }

  // O accumulators: one per P part where registers allow (shorter chains).
  float acc[Tile::kPvAccs][kMT][kNO][Layout::kElems];
#pragma unroll
  for (int h = 0; h < Tile::kPvAccs; ++h)
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int i = 0; i < kNO; ++i)
#pragma unroll
        for (int e = 0; e < Layout::kElems; ++e) acc[h][mt][i][e] = 0.f;
  float row_max[kR];  // running maxima, log2 units
  float row_sum[kR];  // this lane's share of the running sums
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0.f;
  }

  uint8_t *const q_tile = smem + Tile::kQOffset;
  uint8_t *const k_tiles = smem + Tile::kKOffset;
  uint8_t *const v_tiles = smem + Tile::kVOffset;
  PvType *const p_tile = reinterpret_cast<PvType *>(smem + Tile::kPOffset);
  float *const max_exchange = reinterpret_cast<float *>(smem + Tile::kMaxOffset);
  float *const sum_exchange = reinterpret_cast<float *>(smem + Tile::kSumOffset);
  const SmemAddr q_base = smem_address(q_tile);
  const SmemAddr k_base = smem_address(k_tiles);
  const SmemAddr v_base = smem_address(v_tiles);
  const SmemAddr staging_base = smem_address(smem + Tile::kStagingOffset);
  const SmemAddr p_base = smem_address(p_tile);

  const int num_tiles = (kv_hi - kv_lo + kBlockN - 1) / kBlockN;
  if (num_tiles > 0) {
    // The loader's tiles: native K/V stages, or (quantised) the operand
    // tiles and a ring of staging areas.
    const auto load_tile = [&](const typename Tile::Loader &loader, int s, int32_t tile_start) {
      if constexpr (Tile::kQuantised)
        loader.load(staging_base + s * (Tile::kStagingBytes / kStages), tile_start, kv_hi, tid);
      else
        loader.load(k_base + s * Tile::kTileBytes, v_base + s * Tile::kTileBytes, tile_start, kv_hi);
    };
    const typename Tile::Loader loader(p, piece.batch, group, head_kv, tid);
    if constexpr (Tile::kQuantised)
      loader.zero_tiles(k_tiles, v_tiles, tid);
    else
      // (V_FROM_K: V is K's tile, whose padding is K's.)
      loader.zero_padding(k_tiles, v_tiles, kStages, p.head_dim_qk, Tile::kVFromK ? kHeadDim : p.head_dim_v, tid,
                          Tile::kThreads);

    // Q rows of the tile (zero past rows_here and past Dqk), in the first
    // copy group together with K/V tile 0. fp8 Q is converted on the way
    // (its codes are exact in fp16).
    constexpr int kChunks = kRowBytes / 16;
    // Element offset in Q of the 8-element chunk c of packed row `packed`
    // (query packed / heads_per_kv, query head packed % heads_per_kv of
    // this K/V head).
    const auto q_chunk_offset = [&](int32_t packed, int c) -> int64_t {
      const int32_t head = head_kv * p.heads_per_kv + packed % p.heads_per_kv;
      return queries.batch * p.q_stride[0] +
             static_cast<int64_t>(queries.row0 + packed / p.heads_per_kv) * p.q_stride[1] + group * p.q_stride[2] +
             head * p.q_stride[3] + c * 8;
    };
    if constexpr (Tile::kSplitQ) {
      // bf16 Q to fp16 hi + lo, after scaling each row by 2^e (max |q| *
      // 2^e in [2^14, 2^15): no fp16 overflow, the low part mostly normal);
      // the scores are multiplied back by 2^-e. The row's maximum comes
      // from the lanes holding its chunks (kQRowInWarp: shuffles; each pass
      // of the loop then takes whole warps), or through shared memory.
      static_assert(!Tile::kQRowInWarp || (Tile::kRows * kChunks) % kWarpSize == 0, "rows within warps");
      const uint16_t *q = static_cast<const uint16_t *>(p.q);
      float *const q_row_scale = reinterpret_cast<float *>(smem + Tile::kQScaleOffset);
      uint32_t *const q_row_top = reinterpret_cast<uint32_t *>(smem + Tile::kQTopOffset);
      // The 8 values of chunk c of tile row `row` (0 past the rows and Dqk).
      const auto load_chunk = [&](int row, int c, float(&x)[8]) {
#pragma unroll
        for (int j = 0; j < 8; ++j) x[j] = 0.f;
        if (row < rows_here && c * 8 < p.head_dim_qk) {
          const int64_t offset = q_chunk_offset(row0 + row, c);
          const uint4 raw = *reinterpret_cast<const uint4 *>(q + offset);
          const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            x[2 * j] = __uint_as_float(words[j] << 16);
            x[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
          }
        }
      };
      const auto chunk_top = [](const float(&x)[8]) {
        float top = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) top = fmaxf(top, fabsf(x[j]));
        return top;
      };
      if constexpr (!Tile::kQRowInWarp) {
        // Non-negative floats order as their bits: an integer maximum.
        for (int i = tid; i < Tile::kRows; i += Tile::kThreads) q_row_top[i] = 0u;
        __syncthreads();
        for (int i = tid; i < Tile::kRows * kChunks; i += Tile::kThreads) {
          float x[8];
          load_chunk(i / kChunks, i % kChunks, x);
          atomicMax(&q_row_top[i / kChunks], __float_as_uint(chunk_top(x)));
        }
        __syncthreads();
      }
      for (int i = tid; i < Tile::kRows * kChunks; i += Tile::kThreads) {
        const int row = i / kChunks;
        const int c = i % kChunks;
        float x[8];
        load_chunk(row, c, x);
        float top;
        if constexpr (Tile::kQRowInWarp) {
          top = chunk_top(x);
#pragma unroll
          for (int lanes = kChunks / 2; lanes > 0; lanes /= 2) top = fmaxf(top, lane_xor(top, lanes));
        } else {
          top = __uint_as_float(q_row_top[row]);
        }
        // exponent(top) = floor(log2(top)); the shift stays inside fp32's
        // normal range; zero, inf and NaN rows keep scale 1.
        int shift = 0;
        if (top > 0.f && top <= 3.0e38f)
          shift = min(14 - (static_cast<int>((__float_as_uint(top) >> 23) & 0xffu) - 127), 126);
        const float up = __int_as_float((127 + shift) << 23);
        uint32_t hi[4];
        uint32_t lo[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float a = x[2 * j] * up;
          const float b = x[2 * j + 1] * up;
          const __half2 h = __floats2half2_rn(a, b);
          const float2 r = __half22float2(h);
          hi[j] = *reinterpret_cast<const uint32_t *>(&h);
          lo[j] = pack2<half_t>(a - r.x, b - r.y);
        }
        *reinterpret_cast<uint4 *>(q_tile + swizzled<kRowBytes>(row, c)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4 *>(q_tile + Tile::kRows * kRowBytes + swizzled<kRowBytes>(row, c)) =
            make_uint4(lo[0], lo[1], lo[2], lo[3]);
        if (c == 0) q_row_scale[row] = __int_as_float((127 - shift) << 23);
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kR; ++r) row_scale[r] *= q_row_scale[Tile::lane_row(lane, r)];
    } else if (Tile::kQuantised && p.q_fp8) {
      const uint8_t *q = static_cast<const uint8_t *>(p.q);
      const bool fnuz = p.fp8_format == FMHA_FP8_E4M3FNUZ;
      for (int i = tid; i < Tile::kRows * kChunks; i += Tile::kThreads) {
        const int row = i / kChunks;
        const int c = i % kChunks;
        uint4 value = make_uint4(0, 0, 0, 0);
        if (row < rows_here && c * 8 < p.head_dim_qk) {
          const int64_t offset = q_chunk_offset(row0 + row, c);
          const uint2 codes = *reinterpret_cast<const uint2 *>(q + offset);
          float x[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) x[j] = fp8_value((j < 4 ? codes.x : codes.y) >> (8 * (j % 4)), fnuz);
          value = make_uint4(pack2<half_t>(x[0], x[1]), pack2<half_t>(x[2], x[3]), pack2<half_t>(x[4], x[5]),
                             pack2<half_t>(x[6], x[7]));
        }
        *reinterpret_cast<uint4 *>(q_tile + swizzled<kRowBytes>(row, c)) = value;
      }
    } else {
      const T *q = static_cast<const T *>(p.q);
      for (int i = tid; i < Tile::kRows * kChunks; i += Tile::kThreads) {
        const int row = i / kChunks;
        const int c = i % kChunks;
        const bool valid = row < rows_here && c * 8 < p.head_dim_qk;
        const int64_t offset = q_chunk_offset(row0 + min(row, rows_here - 1), c);
        copy_async_16(q_base + swizzled<kRowBytes>(row, c), valid ? q + offset : q, valid);
      }
    }

    // The pipeline: with kStages >= 2, tiles tile + 1 .. tile + kStages - 1
    // are in flight while tile `tile` is computed; with one stage (the
    // largest heads in a small shared memory) the next tile is loaded once
    // the current one is consumed.
    constexpr int kAhead = kStages > 1 ? kStages - 1 : 1;
#pragma unroll
    for (int s = 0; s < kAhead; ++s) {
      if (s < num_tiles) load_tile(loader, s, kv_lo + s * kBlockN);
      copy_commit();
    }

    const int key0 = warp * Tile::kKeysPerWarp;  // first S column of this warp in a tile
    const int dim0 = warp * Tile::kDimsPerWarp;  // first O column of this warp

    for (int tile = 0; tile < num_tiles; ++tile) {
      copy_wait<kAhead - 1>();
      __syncthreads();  // tile `tile` visible to all; stage (tile - 1) % kStages free
      if constexpr (kStages > 1) {
        const int next = tile + kStages - 1;
        if (next < num_tiles) load_tile(loader, next % kStages, kv_lo + next * kBlockN);
        copy_commit();
      }
      const int stage = tile % kStages;
      SmemAddr k_stage = k_base;
      SmemAddr v_stage = Tile::kVFromK ? k_base : v_base;
      if constexpr (Tile::kQuantised) {
        // Decode the staged tile into the operand tiles; the previous
        // tile's readers are past the barrier above.
        loader.dequantise(smem + Tile::kStagingOffset + stage * (Tile::kStagingBytes / kStages), k_tiles, v_tiles, tid);
        __syncthreads();
      } else {
        k_stage = k_base + stage * Tile::kTileBytes;
        v_stage = Tile::kVFromK ? k_stage : v_base + stage * Tile::kTileBytes;
      }
      const int32_t tile_start = kv_lo + tile * kBlockN;

      // Bias loads first, so their latency overlaps the QK^T MMAs.
      float bias[kMT][kNS][Layout::kElems] = {};
      if (p.bias != nullptr) {
#pragma unroll
        for (int nt = 0; nt < kNS; ++nt) {
#pragma unroll
          for (int r = 0; r < kR; ++r) {
#pragma unroll
            for (int j = 0; j < kC; ++j) {
              const int32_t key = tile_start + key0 + nt * Layout::kTileCols + Layout::col(lane, j);
              if (key >= vis_lo[r] && key <= vis_hi[r])
                bias[r / kRL][nt][(r % kRL) * kC + j] =
                    load_as_float(p.bias, p.bias_elem, bias_row[r] + key * p.bias_stride[4]);
            }
          }
        }
      }

      // ---- S = Q K^T for this warp's keys --------------------------------
      float s[kMT][kNS][Layout::kElems];
      score_tile<Tile>(s, q_base, k_stage, key0, lane);

      // ---- Scores in log2 units, masked; row maxima across warps ---------
      float tile_max[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) tile_max[r] = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kNS; ++nt) {
#pragma unroll
        for (int r = 0; r < kR; ++r) {
#pragma unroll
          for (int j = 0; j < kC; ++j) {
            const int e = (r % kRL) * kC + j;
            const int mt = r / kRL;
            const int32_t key = tile_start + key0 + nt * Layout::kTileCols + Layout::col(lane, j);
            float x = p.has_softcap ? p.softcap_log2 * tanhf(s[mt][nt][e] * row_scale[r]) : s[mt][nt][e] * row_scale[r];
            x += bias[mt][nt][e] * kLog2e;
            s[mt][nt][e] = key >= vis_lo[r] && key <= vis_hi[r] ? x : -INFINITY;
            tile_max[r] = fmaxf(tile_max[r], s[mt][nt][e]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        tile_max[r] = Layout::row_max(tile_max[r]);
        if (Layout::row_leader(lane)) max_exchange[warp * Tile::kRows + Tile::lane_row(lane, r)] = tile_max[r];
      }
      __syncthreads();

      // ---- Online softmax (identical in every warp) ----------------------
      float reference[kR];     // the max P is taken against (0 while the row has seen nothing)
      float tile_row_max[kR];  // the row's largest score in this tile
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        float m = -INFINITY;
#pragma unroll
        for (int w = 0; w < Tile::kWarps; ++w) m = fmaxf(m, max_exchange[w * Tile::kRows + Tile::lane_row(lane, r)]);
        tile_row_max[r] = m;
        m = fmaxf(m, row_max[r]);
        reference[r] = m == -INFINITY ? 0.f : m;
        const float rescale = fast_exp2(row_max[r] - reference[r]);  // 0 when row_max is -inf
        row_max[r] = m;
        row_sum[r] *= rescale;
#pragma unroll
        for (int h = 0; h < Tile::kPvAccs; ++h)
#pragma unroll
          for (int nt = 0; nt < kNO; ++nt)
#pragma unroll
            for (int j = 0; j < kC; ++j) acc[h][r / kRL][nt][(r % kRL) * kC + j] *= rescale;
      }
      // FMHA_FLAG_FP8_PV: the PV product takes P rounded to fp8 against
      // p_scale = (the row's largest P in the tile) / fp8_max; the sums
      // keep the exact P (docs/design-notes.md).
      float p_scale[kR];
      float p_inverse[kR];
      const bool fp8_pv = Tile::kQuantised && p.fp8_pv;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        p_scale[r] = 0.f;
        p_inverse[r] = 0.f;
      }
      if (fp8_pv) {
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          p_scale[r] = fast_exp2(tile_row_max[r] - reference[r]) / p.fp8_max;
          p_inverse[r] = p_scale[r] > 0.f ? 1.f / p_scale[r] : 0.f;
        }
      }
      const auto pv_operand = [&](float x, int r) {
        return fp8_pv ? fp8_round(x * p_inverse[r], p.fp8_bias, p.fp8_max) * p_scale[r] : x;
      };
#pragma unroll
      for (int nt = 0; nt < kNS; ++nt) {
        float probability[kR][kC];
#pragma unroll
        for (int r = 0; r < kR; ++r)
#pragma unroll
          for (int j = 0; j < kC; ++j) probability[r][j] = fast_exp2(s[r / kRL][nt][(r % kRL) * kC + j] - reference[r]);
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          float part = probability[r][0];
#pragma unroll
          for (int j = 1; j < kC; ++j) part += probability[r][j];
          row_sum[r] += part;
        }
        const int column = key0 + nt * Layout::kTileCols + Layout::col(lane, 0);
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          float operand[kC];
#pragma unroll
          for (int j = 0; j < kC; ++j) operand[j] = pv_operand(probability[r][j], r);
          store_p<PvType, Tile::kSplitP, kC>(p_tile + Tile::lane_row(lane, r) * Tile::kPStride + column,
                                             Tile::kPTileBytes, operand);
        }
      }
      __syncthreads();

      // ---- O += P V for this warp's head dims ------------------------------
      accumulate_pv<Tile>(acc, p_base, v_stage, dim0, lane);

      if constexpr (kStages == 1) {
        // The one stage is free once every warp is past its PV.
        __syncthreads();
        if (tile + 1 < num_tiles) load_tile(loader, 0, kv_lo + (tile + 1) * kBlockN);
        copy_commit();
      }
    }
    copy_wait<0>();
  }

  // ---- Final sums, LSE, output ----------------------------------------
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    row_sum[r] = Layout::row_sum(row_sum[r]);
    if (Layout::row_leader(lane)) sum_exchange[warp * Tile::kRows + Tile::lane_row(lane, r)] = row_sum[r];
  }
  __syncthreads();

  const OutputTarget target = output_target(p, piece, tile_rows.chunk, queries);
  const int dim0 = warp * Tile::kDimsPerWarp;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int row = Tile::lane_row(lane, r);
    if (row >= rows_here) continue;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < Tile::kWarps; ++w) sum += sum_exchange[w * Tile::kRows + row];
    const RowResult result = finish_row(p, target, row_max[r], sum, group, row_head[r]);
    const float o_scale = result.o_scale;
    void *const o = target.o;
    const int64_t o_row = o_row_offset(target, row_query[r], group, row_head[r]);
#pragma unroll
    for (int nt = 0; nt < kNO; ++nt) {
      const int d = dim0 + nt * Layout::kTileCols + Layout::col(lane, 0);
      float x[kC];
#pragma unroll
      for (int j = 0; j < kC; ++j) {
        x[j] = acc[0][r / kRL][nt][(r % kRL) * kC + j];
#pragma unroll
        for (int h = 1; h < Tile::kPvAccs; ++h) x[j] += acc[h][r / kRL][nt][(r % kRL) * kC + j];
        x[j] *= o_scale;
      }
      if (d < p.head_dim_v) store_row_elems<kC>(o, target.o_elem, o_row + d, x);
    }
    if (warp == 0 && Layout::row_leader(lane)) store_lse(target, row_query[r], group, row_head[r], result.lse);
  }
#if FMHA_GPU_HAS_FUSED_MERGE
  if (p.merge_counters != nullptr && piece.slot >= 0 && !p.write_partials)
    merge_if_last<Tile::kThreads>(p, tile_rows, row_tile, group, head_kv, smem);
#endif
}

// Whether finding a CTA's pieces and tile rows reads no global memory:
// dense K/V (lengths from the parameters), fixed query rows, no metadata
// check, a partition computed from the parameters (not the scheduling
// pass's lists, nor one cut from the lengths).
__device__ __forceinline__ bool lookups_are_arithmetic(const ForwardParams &p) {
  return p.seq.kv_layout == FMHA_KV_DENSE && p.seq.q_layout != FMHA_Q_VARLEN && p.seq.seq_bad == nullptr &&
         p.work.source != PieceSource::kScheduled && p.work.source != PieceSource::kInline;
}

// find_range_span's shared memory (at the start of the kernel's dynamic
// shared memory, before the first piece uses it): the block scan's
// storage and the span within range_span_reserved_bytes, then the
// batch's lengths (plan_forward checks that they fit).
template <int kThreads>
constexpr size_t range_span_scan_bytes() {
  return (sizeof(typename BlockInt64<kThreads>::TempStorage) + 15) / 16 * 16;
}

// kInline: the pieces of range r and the run's cut, as the scheduling
// pass would have written them. The CTA reads the batch's lengths into
// shared memory (one coalesced round per kThreads sequences); then each
// thread takes a contiguous share of the batch (ceil(B / kThreads)
// sequences), two block-wide prefix sums give its first sequence's key
// offset and first slot, and core::find_span_ends finds the span's ends
// in its share. Instead of a launch: a round trip to L2 and two block
// scans per CTA. Every thread of the CTA calls it.
template <int kThreads>
__device__ __forceinline__ core::RangeSpan<int32_t> find_range_span(const ForwardParams &p, int32_t r, uint8_t *smem,
                                                                    core::BalancedCut<int32_t> *cut) {
  using Block = BlockInt64<kThreads>;
  constexpr size_t kSpanOffset = range_span_scan_bytes<kThreads>();
  constexpr size_t kLengthsOffset = range_span_reserved_bytes(kThreads);
  static_assert(kSpanOffset + sizeof(core::RangeSpan<int32_t>) <= kLengthsOffset, "find_range_span's shared memory");
  auto &temp = *reinterpret_cast<typename Block::TempStorage *>(smem);
  auto &shared_span = *reinterpret_cast<core::RangeSpan<int32_t> *>(smem + kSpanOffset);
  int32_t *const lengths = reinterpret_cast<int32_t *>(smem + kLengthsOffset);
  const SeqLayout &s = p.seq;
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll 4
  for (int32_t b = tid; b < s.batch; b += kThreads) lengths[b] = kv_length(s, b);
  if (tid == 0) shared_span = core::RangeSpan<int32_t>{0, -1, 0, -1, 0, 0, -1, 0};  // no piece until found
  __syncthreads();
  const auto len_of = [&](int32_t b) { return lengths[b]; };
  const int32_t per = (s.batch + kThreads - 1) / kThreads;
  const int32_t b0 = min(tid * per, s.batch);
  const int32_t b1 = min(b0 + per, s.batch);
  int64_t keys = 0;
  for (int32_t b = b0; b < b1; ++b) keys += lengths[b];
  int64_t start, total;
  Block(temp).ExclusiveSum(keys, start, total);
  __syncthreads();
  // (32-bit keys: plan_forward takes kInline only where twice the
  // batch's keys fit int32.)
  *cut = core::balanced_cut<int32_t>(static_cast<int32_t>(total), p.work.pieces_per_seq, p.work.kv_chunk);
  int64_t slot, slots_total;
  Block(temp).ExclusiveSum(core::sequences_slots(*cut, b0, b1, static_cast<int32_t>(start), len_of), slot, slots_total);
  core::find_span_ends(*cut, r, s.batch, b0, b1, static_cast<int32_t>(start), static_cast<int32_t>(slot), len_of,
                       &shared_span);
  __syncthreads();
  const core::RangeSpan<int32_t> span = shared_span;
  __syncthreads();  // the first piece may write the shared memory
  return span;
}

// One lane's value of `values` (WorkLane order).
template <int kCount>
__device__ __forceinline__ int32_t this_lanes(const int32_t (&values)[kCount]) {
  static_assert(kCount <= kWarpSize, "a value per lane");
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  int32_t mine = 0;
#pragma unroll
  for (int k = 0; k < kCount; ++k)
    if (lane == k) mine = values[k];
  return mine;
}

// kInline: this lane's WorkLane value of range r (32-bit arithmetic:
// the 64-bit divisions of the first version were subroutines that cost
// the streaming kernels hundreds of bytes of spills, ptxas). Not inlined:
// called once per CTA, before any piece, its block scans and span walk
// stay out of the register allocation of the kernel's body (inlined, they
// added spills to the streaming kernels' dense runs, which never take
// this path: run 82).
template <int kThreads>
__device__ __noinline__ int32_t range_work_lanes(const ForwardParams &p, int32_t r, uint8_t *smem) {
  core::BalancedCut<int32_t> cut;
  const core::RangeSpan<int32_t> span = find_range_span<kThreads>(p, r, smem, &cut);
  const auto len_of = [&](int32_t b) { return kv_length(p.seq, b); };
  const int32_t pieces = span.last_batch - span.first_batch + 1;
  const Piece head = core::span_piece(cut, r, span, 0, len_of);
  const Piece tail = core::span_piece(cut, r, span, pieces - 1, len_of);
  const int32_t values[kWorkLanes] = {span.first_batch, pieces,      head.kv_begin, head.kv_end,   head.slot,
                                      span.head_len,    tail.kv_end, tail.slot,     span.tail_len, cut.range_len};
  return this_lanes(values);
}

// The body of every forward kernel: `attend(piece, cell)` for each piece
// (a PieceAt) of this CTA's work item, in order. The kernel may have been
// launched overlapping the stream's previous kernel (launch_forward_kernel),
// which may write Q, K/V, the lengths or the schedule, or read O: it waits
// for it before any global access. kLateWait (the tile kernel, whose
// attend_piece waits again right before its first global access): where
// the lookups are arithmetic, the wait moves there, so that their integer
// divisions (and the fetch of their code: ncu, run 67) overlap the
// previous kernel's tail. The combine kernel may be scheduled into the
// grid's tail (it waits for the whole grid before it reads a partial).
// kInlineRanges false: the kernel is never given PieceSource::kInline (the
// MLA kernel, which never merges inside), so its code is left out.
template <int kThreads, bool kLateWait = false, bool kInlineRanges = true, typename Attend>
__device__ __forceinline__ void attend_work_item(const ForwardParams &p, uint8_t *smem, Attend attend) {
  if (!kLateWait || !lookups_are_arithmetic(p)) wait_for_prior_grids();
  allow_dependent_grids();
  const GridCell cell = grid_cell(p);
  const bool inline_ranges = kInlineRanges && p.work.source == PieceSource::kInline;
  int32_t work_lanes;
  if (inline_ranges) {
    work_lanes = range_work_lanes<kThreads>(p, cell.item, smem);
  } else {
    int32_t first = 0;
    const int32_t pieces = item_pieces(p.work, p.seq, cell.item, &first);
    const int32_t values[] = {first, pieces};
    work_lanes = this_lanes(values);
  }
  // One call of `attend` (the kernel's body, inlined once).
  for (int32_t i = 0; i < lane_value(work_lanes, kPieces); ++i) {
    const int32_t first = lane_value(work_lanes, kFirst);
    PieceAt at;
    at.work_lanes = work_lanes;
    if (inline_ranges) {
      const int32_t b = first + i;
      at.chunk = 0;
      if (i == 0) {
        at.piece = Piece{b, lane_value(work_lanes, kHeadBegin), lane_value(work_lanes, kHeadEnd),
                         lane_value(work_lanes, kHeadSlot)};
        at.kv_len = lane_value(work_lanes, kHeadLen);
      } else if (i == lane_value(work_lanes, kPieces) - 1) {
        at.piece = Piece{b, 0, lane_value(work_lanes, kTailEnd), lane_value(work_lanes, kTailSlot)};
        at.kv_len = lane_value(work_lanes, kTailLen);
      } else {
        at.kv_len = kv_length(p.seq, b);
        at.piece = Piece{b, 0, at.kv_len, -1};
      }
    } else if (!find_piece(p.work, p.seq, first + i, &at)) {
      continue;  // (uniform across the CTA)
    }
    if (i > 0) __syncthreads();  // the previous piece is done with shared memory
    attend(at, cell);
  }
  // A CTA with nothing to do never reached attend_piece's wait; every CTA
  // waits before it ends, so that this grid completes only after the
  // previous one (the next kernel's wait orders it after both).
  if (kLateWait) wait_for_prior_grids();
}

template <typename T, int kHeadDimBucket, bool kQuantised, int kRowTiles = 1, bool kWide = false>
__global__ void FMHA_GPU_LAUNCH_BOUNDS((ForwardTile<T, kHeadDimBucket, kQuantised, kRowTiles, kWide>::kThreads),
                                       (ForwardTile<T, kHeadDimBucket, kQuantised, kRowTiles, kWide>::kMinBlocksPerSm))
    splitk_forward_kernel(const FMHA_GPU_GRID_CONSTANT ForwardParams p) {
  using Tile = ForwardTile<T, kHeadDimBucket, kQuantised, kRowTiles, kWide>;
  extern __shared__ __align__(128) uint8_t smem[];
  attend_work_item<Tile::kThreads, true>(p, smem, [&](const PieceAt &piece, const GridCell &cell) {
    attend_piece<Tile>(p, smem, piece, cell.row_tile, cell.group, cell.head_kv);
  });
}

}  // namespace fmha::gpu::kernels

#endif  // FMHA_SPLITK_BACKENDS_GPU_KERNELS_SPLITK_FORWARD_CUH_
