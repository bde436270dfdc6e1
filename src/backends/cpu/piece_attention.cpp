// The CPU attention kernel of one work item (see piece_attention.h).
#include "backends/cpu/piece_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/thread_pool.h"

namespace fmha::cpu {
namespace {

using core::Piece;

// Keys converted to fp32 at a time; every query row of a tile uses them.
constexpr int64_t kKeyBlock = 64;
// Enough rows for Mq x (Hq / Hkv) of decode and speculative decode, so a
// piece's keys are usually swept once.
constexpr int64_t kMaxTileRows = 256;
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// A worker's tiles, carved from its pool scratch for the problem's head
// dims: fp32 copies of a tile of query rows and of a block of keys and
// values, and the running softmax state of each row. With V_FROM_K the
// value rows are the key rows (v aliases k, rows head_dim_qk apart).
struct Tiles {
  int64_t head_dim_qk;
  int64_t head_dim_v;
  int64_t v_stride;
  float *q;               // [rows, head_dim_qk]
  float *acc;             // [rows, head_dim_v]
  float *k;               // [kKeyBlock, head_dim_qk]
  float *v;               // [kKeyBlock, head_dim_v]
  float *scores;          // [kKeyBlock]
  float *row_max;         // [rows], log2 units
  float *row_sum;         // [rows]
  int64_t *key_begin;     // [rows]: keys the row sees within the piece
  int64_t *key_end;       // [rows]
  const void **bias_row;  // [rows]

  float *q_row(int64_t r) const { return q + r * head_dim_qk; }
  float *acc_row(int64_t r) const { return acc + r * head_dim_v; }
  float *k_row(int64_t j) const { return k + j * head_dim_qk; }
  float *v_row(int64_t j) const { return v + j * v_stride; }
};

// Scratch bytes of one tile row and of the key block.
constexpr size_t tile_row_bytes(int64_t head_dim_qk, int64_t head_dim_v) {
  return static_cast<size_t>(head_dim_qk + head_dim_v + 2) * sizeof(float) + 2 * sizeof(int64_t) + sizeof(void *);
}
constexpr size_t key_block_bytes(int64_t head_dim_qk, int64_t head_dim_v) {
  return static_cast<size_t>(kKeyBlock * (head_dim_qk + head_dim_v + 1)) * sizeof(float);
}

// Query rows per tile that fit in a worker's scratch beside the key block
// (less the 64-byte rounding of the ten regions carve_tiles() takes).
constexpr int64_t tile_rows(int64_t head_dim_qk, int64_t head_dim_v) {
  const size_t free_bytes = kWorkerScratchBytes - key_block_bytes(head_dim_qk, head_dim_v) - size_t{64} * 10;
  return std::min<int64_t>(kMaxTileRows, static_cast<int64_t>(free_bytes / tile_row_bytes(head_dim_qk, head_dim_v)));
}
static_assert(tile_rows(kMaxHeadDim, kMaxHeadDim) >= 32, "worker scratch too small for the largest head dim");

Tiles carve_tiles(void *scratch, int64_t head_dim_qk, int64_t head_dim_v, bool v_from_k) {
  const int64_t rows = tile_rows(head_dim_qk, head_dim_v);
  auto *cursor = static_cast<uint8_t *>(scratch);
  auto take = [&cursor](size_t bytes) {
    void *region = cursor;
    cursor += (bytes + 63) / 64 * 64;
    return region;
  };
  const auto count = static_cast<size_t>(rows);
  Tiles tiles{};
  tiles.head_dim_qk = head_dim_qk;
  tiles.head_dim_v = head_dim_v;
  tiles.key_begin = static_cast<int64_t *>(take(count * sizeof(int64_t)));
  tiles.key_end = static_cast<int64_t *>(take(count * sizeof(int64_t)));
  tiles.bias_row = static_cast<const void **>(take(count * sizeof(void *)));
  tiles.row_max = static_cast<float *>(take(count * sizeof(float)));
  tiles.row_sum = static_cast<float *>(take(count * sizeof(float)));
  tiles.scores = static_cast<float *>(take(kKeyBlock * sizeof(float)));
  tiles.q = static_cast<float *>(take(count * static_cast<size_t>(head_dim_qk) * sizeof(float)));
  tiles.acc = static_cast<float *>(take(count * static_cast<size_t>(head_dim_v) * sizeof(float)));
  tiles.k = static_cast<float *>(take(static_cast<size_t>(kKeyBlock * head_dim_qk) * sizeof(float)));
  tiles.v = static_cast<float *>(take(static_cast<size_t>(kKeyBlock * head_dim_v) * sizeof(float)));
  tiles.v_stride = head_dim_v;
  if (v_from_k) {
    tiles.v = tiles.k;
    tiles.v_stride = head_dim_qk;
  }
  return tiles;
}

// Keys [begin, end) of a sequence with kv_len keys and q_len queries that
// query i sees under the mask (DESIGN 5.4: bottom-right aligned).
void visible_keys(const fmha_splitk_problem &problem, int64_t kv_len, int64_t q_len, int64_t i, int64_t &begin,
                  int64_t &end) {
  const int64_t position = kv_len - q_len + i;
  switch (problem.mask) {
    case FMHA_MASK_CAUSAL:
      begin = 0;
      end = position + 1;
      break;
    case FMHA_MASK_LOCAL:
      begin = position - problem.window_left;
      end = position + problem.window_right + 1;
      break;
    case FMHA_MASK_CAUSAL_LOCAL:
      begin = position - problem.window_left;
      end = position + 1;
      break;
    default:
      begin = 0;
      end = kv_len;
      break;
  }
}

// Fixed summation order (eight lanes, then a fixed tree): reproducible and
// vectorisable without reassociation.
float dot(const float *a, const float *b, int64_t count) {
  float lanes[8] = {};
  int64_t d = 0;
  for (; d + 8 <= count; d += 8)
    for (int lane = 0; lane < 8; ++lane) lanes[lane] += a[d + lane] * b[d + lane];
  float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
  for (; d < count; ++d) sum += a[d] * b[d];
  return sum;
}

// The larger of two log2-unit scores; a NaN wins, so it reaches the output.
float nan_max(float a, float b) { return (b > a || std::isnan(b)) ? b : a; }

// FMHA_FLAG_FP8_PV: the P of one row and one key block, relative to the
// running max after the block updated it (p_j = exp2(s_j - row_max)), is
// quantised with p_scale = max_j p_j / fp8_max (448 E4M3FN, 240 E4M3FNUZ):
// P_q = fp8_round(p / p_scale) (ties to even, saturating), and PV adds
// P_q * p_scale * V. The block is the kernel's key block (kKeyBlock keys
// from the first key any row of the tile sees), restricted to the keys
// the row sees. The denominator sums the unquantised p (as the reference
// does), so only the PV product carries the fp8 rounding. A block whose p
// all underflow to 0 adds nothing; a NaN score stays NaN.
void accumulate_fp8_p(const AttentionContext &ctx, const Tiles &tiles, int64_t r, int64_t block_begin, int64_t begin,
                      int64_t end, float block_max, float row_max) {
  float *acc = tiles.acc_row(r);
  const float p_scale = std::exp2(block_max - row_max) / ctx.fp8->max_finite;
  for (int64_t j = begin; j < end; ++j) {
    const float p = std::exp2(tiles.scores[j - begin] - row_max);
    tiles.row_sum[r] += p;
    const float p_quantised = p_scale > 0.0f ? fp8_round(p / p_scale, *ctx.fp8) * p_scale : p;
    const float *v = tiles.v_row(j - block_begin);
    for (int64_t d = 0; d < ctx.head_dim_v; ++d) acc[d] += p_quantised * v[d];
  }
}

// Folds keys [begin, end) of the converted block starting at key
// block_begin into row r's online softmax.
void accumulate_keys(const AttentionContext &ctx, const Tiles &tiles, int64_t r, int64_t block_begin, int64_t begin,
                     int64_t end) {
  const fmha_view &bias = ctx.views.bias;
  float block_max = kMinusInf;
  for (int64_t j = begin; j < end; ++j) {
    const float qk = dot(tiles.q_row(r), tiles.k_row(j - block_begin), ctx.head_dim_qk);
    float score = ctx.softcap ? ctx.cap_log2 * std::tanh(qk * ctx.tanh_scale) : qk * ctx.score_scale;
    if (bias.data != nullptr) score += kLog2e * load_float(tiles.bias_row[r], bias.elem, j * bias.stride[4]);
    tiles.scores[j - begin] = score;
    block_max = nan_max(block_max, score);
  }
  if (block_max == kMinusInf) return;  // every key masked out by the bias
  float *acc = tiles.acc_row(r);
  const float row_max = nan_max(tiles.row_max[r], block_max);
  if (row_max != tiles.row_max[r]) {
    const float rescale = std::exp2(tiles.row_max[r] - row_max);
    tiles.row_sum[r] *= rescale;
    for (int64_t d = 0; d < ctx.head_dim_v; ++d) acc[d] *= rescale;
    tiles.row_max[r] = row_max;
  }
  if (ctx.fp8_pv) {
    accumulate_fp8_p(ctx, tiles, r, block_begin, begin, end, block_max, row_max);
    return;
  }
  for (int64_t j = begin; j < end; ++j) {
    const float p = std::exp2(tiles.scores[j - begin] - row_max);
    tiles.row_sum[r] += p;
    const float *v = tiles.v_row(j - block_begin);
    for (int64_t d = 0; d < ctx.head_dim_v; ++d) acc[d] += p * v[d];
  }
}

// Row r's sink logit joins its denominator (no value row).
void fold_sink(const AttentionContext &ctx, const Tiles &tiles, int64_t r, float sink) {
  const float sink_log2 = sink * kLog2e;
  const float row_max = nan_max(tiles.row_max[r], sink_log2);
  if (row_max == kMinusInf) return;
  const float rescale = std::exp2(tiles.row_max[r] - row_max);
  tiles.row_sum[r] = tiles.row_sum[r] * rescale + std::exp2(sink_log2 - row_max);
  for (int64_t d = 0; d < ctx.head_dim_v; ++d) tiles.acc_row(r)[d] *= rescale;
  tiles.row_max[r] = row_max;
}

// Normalises row r and writes O (converted to the target's type) and LSE.
// A row that saw no key (and no sink) gives O = 0, LSE = -inf.
void write_row(const AttentionContext &ctx, const Tiles &tiles, int64_t r, const RowTarget &target, int64_t i,
               int64_t g, int64_t hq) {
  float *acc = tiles.acc_row(r);
  float lse = kMinusInf;
  if (tiles.row_sum[r] != 0.0f) {
    const float inverse_sum = 1.0f / tiles.row_sum[r];
    for (int64_t d = 0; d < ctx.head_dim_v; ++d) acc[d] *= inverse_sum;
    lse = (tiles.row_max[r] + std::log2(tiles.row_sum[r])) * kLn2;
  }
  store_row(acc, ctx.head_dim_v, target.o_elem, target.o_row(i, g, hq));
  if (target.lse != nullptr) *target.lse_at(i, g, hq) = lse;
}

// The address of the scale of row (outer, inner) of head (g, head) in a
// scale tensor of `granularity`: per row [outer, inner, G, H], per head
// [G, H], per tensor [1] (K/V rows and Q rows alike).
const void *scale_at(const fmha_view &scales, int32_t granularity, int64_t outer, int64_t inner, int64_t g,
                     int64_t head) {
  switch (granularity) {
    case FMHA_SCALE_PER_ROW:
      return view_ptr(scales, {outer, inner, g, head});
    case FMHA_SCALE_PER_HEAD:
      return view_ptr(scales, {g, head});
    default:
      return scales.data;
  }
}

// The fp8 scale (and shift) of K/V row `row` of head (g, kv_head), from a
// scale tensor of the problem's kind and granularity.
ScaleShift fp8_kv_scale(const AttentionContext &ctx, const fmha_view &scales, const KeyRow &row, int64_t g,
                        int64_t kv_head) {
  const fmha_splitk_problem &problem = ctx.plan.problem;
  const void *scale = scale_at(scales, problem.kv_scale_granularity, row.outer, row.inner, g, kv_head);
  if (problem.kv_scale_kind == FMHA_KV_SCALE_F32) return {*static_cast<const float *>(scale), 0.0f};
  return unpack_scale_shift(*static_cast<const int32_t *>(scale));
}

// Decodes the K or V row `row` of head (g, kv_head) (head_dim dims, from
// `rows` with scales `scales` for fp8) to fp32: one decoder per format,
// all feeding the same fp32 math.
void load_kv_row(const AttentionContext &ctx, const fmha_view &rows, const fmha_view &scales, const KeyRow &row,
                 int64_t g, int64_t kv_head, int64_t head_dim, float *destination) {
  const void *source = view_ptr(rows, {row.outer, row.inner, g, kv_head});
  switch (ctx.kv_quant) {
    case FMHA_KV_QUANT_INT4:
      load_int4_row(static_cast<const int32_t *>(source), ctx.kv_quant_groups, head_dim, destination);
      return;
    case FMHA_KV_QUANT_FP8:
      load_fp8_row(static_cast<const uint8_t *>(source), *ctx.fp8, fp8_kv_scale(ctx, scales, row, g, kv_head), head_dim,
                   destination);
      return;
    default:
      load_row(source, rows.elem, head_dim, destination);
  }
}

// Loads keys and values [block_begin, block_begin + count) of sequence b,
// K/V head (g, kv_head), into the tiles' key block as fp32 (with V_FROM_K
// the key rows are the value rows).
void load_key_block(const AttentionContext &ctx, const Tiles &tiles, int64_t b, int64_t g, int64_t kv_head,
                    int64_t block_begin, int64_t count) {
  for (int64_t j = 0; j < count; ++j) {
    const KeyRow row = ctx.sequences.key_row(b, block_begin + j);
    load_kv_row(ctx, ctx.views.k, ctx.views.k_scale, row, g, kv_head, ctx.head_dim_qk, tiles.k_row(j));
    if (!ctx.v_from_k)
      load_kv_row(ctx, ctx.views.v, ctx.views.v_scale, row, g, kv_head, ctx.head_dim_v, tiles.v_row(j));
  }
}

// Query row (q_batch, q_row, g, hq) as fp32; fp8 Q is dequantised with its
// q_scale (FMHA_FLAG_FP8_QK: the scores are then exact fp32 products of
// the dequantised Q and K).
void load_query_row(const AttentionContext &ctx, int64_t q_batch, int64_t q_row, int64_t g, int64_t hq,
                    float *destination) {
  const fmha_view &q = ctx.views.q;
  const void *source = view_ptr(q, {q_batch, q_row, g, hq});
  if (!ctx.fp8_qk) {
    load_row(source, q.elem, ctx.head_dim_qk, destination);
    return;
  }
  const void *scale = scale_at(ctx.views.q_scale, ctx.plan.problem.q_scale_granularity, q_batch, q_row, g, hq);
  load_fp8_row(static_cast<const uint8_t *>(source), *ctx.fp8, {*static_cast<const float *>(scale), 0.0f},
               ctx.head_dim_qk, destination);
}

}  // namespace

AttentionContext::AttentionContext(const fmha_plan_data &plan_data, const fmha_run_views &run_views,
                                   const SequenceMap &sequence_map)
    : plan(plan_data),
      views(run_views),
      sequences(sequence_map),
      groups(plan_data.problem.groups),
      heads_q(plan_data.problem.heads_q),
      heads_kv(plan_data.problem.heads_kv),
      heads_per_kv(heads_q / heads_kv),
      head_dim_qk(plan_data.problem.head_dim_qk),
      head_dim_v(plan_data.problem.head_dim_v),
      softcap(plan_data.problem.softcap > 0.0f),
      score_scale(plan_data.problem.softmax_scale * kLog2e),
      tanh_scale(softcap ? plan_data.problem.softmax_scale / plan_data.problem.softcap : 0.0f),
      cap_log2(plan_data.problem.softcap * kLog2e),
      tile_rows(cpu::tile_rows(head_dim_qk, head_dim_v)),
      kv_quant(plan_data.problem.kv_quant),
      kv_quant_groups(plan_data.problem.kv_quant_groups),
      fp8(kv_quant == FMHA_KV_QUANT_FP8 ? &fp8_format(plan_data.problem.fp8_format) : nullptr),
      v_from_k((plan_data.problem.flags & FMHA_FLAG_V_FROM_K) != 0),
      fp8_qk((plan_data.problem.flags & FMHA_FLAG_FP8_QK) != 0),
      fp8_pv((plan_data.problem.flags & FMHA_FLAG_FP8_PV) != 0) {}

// GQA packing: the Hq / Hkv query heads sharing the K/V head are rows of the
// same tile, so each key is read and converted once per tile (once per
// piece unless Mq x Hq / Hkv exceeds a tile). The caller passes
// first_piece for one piece per sequence, so merging a sequence's pieces
// (or the caller merging its partials) counts the sink exactly once.
void attend_piece(const AttentionContext &ctx, void *scratch, const Piece &piece, bool first_piece,
                  const RowTarget &target, int64_t g, int64_t kv_head) {
  const Tiles tiles = carve_tiles(scratch, ctx.head_dim_qk, ctx.head_dim_v, ctx.v_from_k);
  const fmha_splitk_problem &problem = ctx.plan.problem;
  const int64_t b = piece.batch;
  const int64_t kv_len = ctx.sequences.kv_len(b);
  const int64_t q_len = ctx.sequences.q_len(b);
  const int64_t q_batch = ctx.sequences.q_batch(b);
  const int64_t q_first = ctx.sequences.q_first(b);
  const int64_t rows = q_len * ctx.heads_per_kv;
  for (int64_t tile_begin = 0; tile_begin < rows; tile_begin += ctx.tile_rows) {
    const int64_t rows_in_tile = std::min(ctx.tile_rows, rows - tile_begin);
    int64_t tile_key_begin = piece.kv_end;  // union of the rows' visible keys
    int64_t tile_key_end = piece.kv_begin;
    for (int64_t r = 0; r < rows_in_tile; ++r) {
      const int64_t i = (tile_begin + r) / ctx.heads_per_kv;
      const int64_t hq = kv_head * ctx.heads_per_kv + (tile_begin + r) % ctx.heads_per_kv;
      load_query_row(ctx, q_batch, q_first + i, g, hq, tiles.q_row(r));
      int64_t begin = 0;
      int64_t end = 0;
      visible_keys(problem, kv_len, q_len, i, begin, end);
      begin = std::max<int64_t>(begin, piece.kv_begin);
      end = std::min<int64_t>(end, piece.kv_end);
      tiles.key_begin[r] = begin;
      tiles.key_end[r] = end;
      if (begin < end) {
        tile_key_begin = std::min(tile_key_begin, begin);
        tile_key_end = std::max(tile_key_end, end);
      }
      tiles.row_max[r] = kMinusInf;
      tiles.row_sum[r] = 0.0f;
      std::fill_n(tiles.acc_row(r), ctx.head_dim_v, 0.0f);
      tiles.bias_row[r] = ctx.views.bias.data != nullptr ? view_ptr(ctx.views.bias, {b, g, hq, i}) : nullptr;
    }
    for (int64_t block_begin = tile_key_begin; block_begin < tile_key_end; block_begin += kKeyBlock) {
      const int64_t block_keys = std::min(kKeyBlock, tile_key_end - block_begin);
      load_key_block(ctx, tiles, b, g, kv_head, block_begin, block_keys);
      for (int64_t r = 0; r < rows_in_tile; ++r) {
        const int64_t begin = std::max(tiles.key_begin[r], block_begin);
        const int64_t end = std::min(tiles.key_end[r], block_begin + block_keys);
        if (begin < end) accumulate_keys(ctx, tiles, r, block_begin, begin, end);
      }
    }
    for (int64_t r = 0; r < rows_in_tile; ++r) {
      const int64_t i = (tile_begin + r) / ctx.heads_per_kv;
      const int64_t hq = kv_head * ctx.heads_per_kv + (tile_begin + r) % ctx.heads_per_kv;
      if (first_piece && ctx.views.sinks.data != nullptr)
        fold_sink(ctx, tiles, r, *static_cast<const float *>(view_ptr(ctx.views.sinks, {g, hq})));
      write_row(ctx, tiles, r, target, i, g, hq);
    }
  }
}

}  // namespace fmha::cpu
