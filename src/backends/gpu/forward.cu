// Plan and launch of the GPU (CUDA and HIP) split-K forward path: which kernel, which
// grid, which passes. Every launch heuristic of the forward path is here.
//
// A run is up to three kernels on the caller's stream:
//  1. BALANCED with several ranges and sequences only, and only where the
//     forward kernel does not merge (a caller's workspace, a merge too
//     long for one CTA, more than kMaxInlineBatch sequences): the
//     scheduling pass (one CTA) writes the pieces into the workspace from
//     the device-side lengths. Otherwise each forward CTA cuts its own
//     range from the lengths (PieceSource::kInline); UNIFORM and
//     FIXED_CHUNK pieces, and BALANCED ones of a single sequence or of a
//     dense batch (every sequence max_kv_seqlen keys), are pure arithmetic
//     on the lengths, so the forward kernel finds them itself
//     (find_piece());
//  2. the forward kernel: one CTA per (work item, row tile of 16 query
//     rows, group, K/V head); a work item is a piece, or with the scheduling
//     pass a range of equal key count (all its pieces); CTAs past the run's
//     items exit;
//  3. when some sequence is split: the combine kernel merges its partial
//     slots into O / LSE and adds the sinks (on sm_90 launched to overlap
//     the forward kernel's tail: programmatic dependent launch).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backends/gpu/forward.h"
#include "backends/gpu/forward_kernels.cuh"
#if FMHA_GPU_HAS_MLA_KERNEL
#include "backends/gpu/kernels/mla_forward.cuh"
#endif
#include "backends/gpu/kernels/splitk_forward.cuh"
#if FMHA_GPU_HAS_QUANT_STREAM
#include "backends/gpu/forward_quant_stream.cuh"
#endif
#include "backends/gpu/metadata_check.cuh"
#include "backends/gpu/schedule_device.cuh"
#include "backends/gpu/status.h"
#include "core/schedule.h"

namespace fmha::gpu {
namespace {

constexpr size_t kWorkspaceAlignment = 256;
constexpr int64_t kMaxGridX = std::numeric_limits<int32_t>::max();

// The forward configuration a plan stores in plan->backend_private (at its
// start; plain data).
struct ForwardPlan {
  int32_t head_dim_bucket;
  int32_t num_row_tiles;
  int32_t piece_source;    // PieceSource
  int32_t pieces_per_seq;  // kUniform / kFixedChunk
  int32_t kv_chunk;        // kUniform / kFixedChunk
  int32_t combine;         // nonzero: some sequence may be split (combine pass)
  int32_t streaming;       // nonzero: the streaming quantised kernel (else the tile kernel)
  int32_t mla_kernel;      // nonzero: the MLA decode kernel (fp8: where the rows allow 16-byte copies)
  int32_t row_pairs;       // nonzero: the tile kernel's row pairs (32 query rows per CTA)
  int32_t wide;            // nonzero: the tile kernel's wide variant (8 warps, 3 stages; native D 128)
  int32_t fused_merge;     // nonzero: runs given merge counters merge in the forward kernel (no combine pass)
  int32_t inline_ranges;   // kScheduled: runs given merge counters cut their ranges in the kernel (kInline)
  int64_t work_items;      // forward work items per row tile and head: pieces, or ranges (kScheduled)
  int64_t combine_items;   // combine work items: sequences, or pieces (kScheduled)
};
static_assert(sizeof(ForwardPlan) <= sizeof(fmha_plan_data{}.backend_private), "ForwardPlan must fit the plan");

const char *dtype_name(int32_t dtype) {
  switch (dtype) {
    case FMHA_DTYPE_F16:
      return "f16";
    case FMHA_DTYPE_BF16:
      return "bf16";
    case FMHA_DTYPE_F32:
      return "f32";
    case FMHA_DTYPE_FP8:
      return "fp8";
    default:
      return "?";
  }
}

size_t align_up(size_t bytes) { return (bytes + kWorkspaceAlignment - 1) & ~(kWorkspaceAlignment - 1); }

int32_t log2_exact(int32_t power_of_two) {
  int32_t log2 = 0;
  while ((int32_t{1} << log2) < power_of_two) ++log2;
  return log2;
}

int element_bytes(int32_t elem) {
  switch (elem) {
    case FMHA_ELEM_F16:
    case FMHA_ELEM_BF16:
      return 2;
    case FMHA_ELEM_F64:
      return 8;
    case FMHA_ELEM_FP8:
      return 1;
    default:
      return 4;
  }
}

// The kernels move rows in 16-byte chunks (cp.async, vector stores): every
// row start of these views must be 16-byte aligned (`alignment`; packed
// quantised rows may also move in 4-byte pieces, fp8 Q in 8-byte ones).
bool rows_aligned(const fmha_view &view, int row_dims, int alignment = 16) {
  const int bytes = element_bytes(view.elem);
  if (reinterpret_cast<uintptr_t>(view.data) % alignment != 0) return false;
  for (int d = 0; d < row_dims; ++d)
    if (view.shape[d] > 1 && (view.stride[d] * bytes) % alignment != 0) return false;
  return true;
}

// The range length of a balanced plan over a dense batch whose pieces the
// kernels may find by arithmetic (PieceSource::kBalancedDense), else 0:
// several sequences (B = 1 has kBalancedSingle), every one max_kv_seqlen
// keys (dense; no checked mode, whose bad sequences have none), several
// ranges (effective_ranges(), schedule.cpp).
int64_t dense_balanced_range_len(const fmha_plan_data &plan) {
  const fmha_splitk_problem &problem = plan.problem;
  if (problem.kv_layout != FMHA_KV_DENSE || (problem.flags & FMHA_FLAG_CHECKED) || problem.batch < 2 ||
      plan.num_ranges < 2 || plan.kv_chunk_size < 1)
    return 0;
  const int64_t total_keys = problem.batch * problem.max_kv_seqlen;
  const int64_t ranges = core::effective_ranges(plan, total_keys);
  if (ranges < 2) return 0;
  const int64_t range_len = (total_keys + ranges - 1) / ranges;
  // Piece numbers (ranges x the most pieces a range meets) and slots stay
  // in int32.
  const int64_t numbers = ranges * (range_len / problem.max_kv_seqlen + 2);
  constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
  if (range_len > kMaxInt32 || numbers > kMaxInt32 || 2 * ranges > kMaxInt32) return 0;
  return range_len;
}

const char *kv_quant_name(int32_t kv_quant) {
  return kv_quant == FMHA_KV_QUANT_INT4 ? "int4" : kv_quant == FMHA_KV_QUANT_FP8 ? "fp8" : "none";
}

}  // namespace

fmha_status plan_forward(fmha_plan_data *plan, fmha_msg msg) {
  const fmha_splitk_problem &problem = plan->problem;
  const bool quantised = problem.kv_quant != FMHA_KV_QUANT_NONE;
  const bool mla = (problem.flags & FMHA_FLAG_V_FROM_K) != 0;
  if (mla && !(problem.head_dim_qk == 576 && problem.head_dim_v == 512)) {
    write_msg(msg,
              "the " FMHA_GPU_BACKEND_NAME
              " backend reads V from K (FMHA_FLAG_V_FROM_K) only for MLA's head_dim_qk 576 / head_dim_v 512, "
              "not %d / %d",
              problem.head_dim_qk, problem.head_dim_v);
    return FMHA_STATUS_NOT_SUPPORTED;
  }
  if (mla && problem.kv_quant == FMHA_KV_QUANT_INT4) {
    write_msg(msg,
              "the " FMHA_GPU_BACKEND_NAME
              " backend runs MLA decode with f16, bf16 or fp8 latents, not int4 (kv_quant %s)",
              kv_quant_name(problem.kv_quant));
    return FMHA_STATUS_NOT_SUPPORTED;
  }
  // fp8 Q (FMHA_FLAG_FP8_QK) comes with fp8 K/V (the core checks).
  if (problem.q_dtype != FMHA_DTYPE_F16 && problem.q_dtype != FMHA_DTYPE_BF16 &&
      !(problem.q_dtype == FMHA_DTYPE_FP8 && quantised)) {
    write_msg(msg, "the " FMHA_GPU_BACKEND_NAME " backend needs Q in f16 or bf16, not %s", dtype_name(problem.q_dtype));
    return FMHA_STATUS_NOT_SUPPORTED;
  }
  if (!quantised && problem.kv_dtype != problem.q_dtype) {
    write_msg(msg, "the " FMHA_GPU_BACKEND_NAME " backend needs K/V in Q's dtype (q_dtype %s, kv_dtype %s)",
              dtype_name(problem.q_dtype), dtype_name(problem.kv_dtype));
    return FMHA_STATUS_NOT_SUPPORTED;
  }
  if (problem.o_dtype != FMHA_DTYPE_F16 && problem.o_dtype != FMHA_DTYPE_BF16 && problem.o_dtype != FMHA_DTYPE_F32) {
    write_msg(msg, "the " FMHA_GPU_BACKEND_NAME " backend writes O in f16, bf16 or f32, not %s",
              dtype_name(problem.o_dtype));
    return FMHA_STATUS_NOT_SUPPORTED;
  }
  const int bucket = mla ? 576 : forward_head_dim_bucket(std::max(problem.head_dim_qk, problem.head_dim_v));
  if (quantised && bucket > 256 && !mla) {
    write_msg(msg, "the " FMHA_GPU_BACKEND_NAME " backend reads %s K/V for head dims up to 256, not head_dim_qk %d",
              kv_quant_name(problem.kv_quant), problem.head_dim_qk);
    return FMHA_STATUS_NOT_SUPPORTED;
  }
  if (bucket == 0) {
    write_msg(msg, "the " FMHA_GPU_BACKEND_NAME " backend has no kernel for head_dim_qk %d / head_dim_v %d",
              problem.head_dim_qk, problem.head_dim_v);
    return FMHA_STATUS_NOT_SUPPORTED;
  }

  // Read once per device (ordinals below 64): plan creation is on the
  // serving path.
  static std::atomic<int> smem_optin_cache[64] = {};
  const int device_id = plan->device.device_id;
  int smem_optin = device_id >= 0 && device_id < 64 ? smem_optin_cache[device_id].load(std::memory_order_relaxed) : 0;
  if (smem_optin == 0) {
    FMHA_GPU_CHECK(max_shared_memory_per_block(device_id, &smem_optin), msg);
    if (device_id >= 0 && device_id < 64) smem_optin_cache[device_id].store(smem_optin, std::memory_order_relaxed);
  }
  ForwardTileInfo tile = forward_tile_info(bucket, problem.q_dtype, quantised);
  // int4 / fp8 K/V up to head dim 128 stream through registers
  // (kernels/quant_stream_forward.cuh) where the vendor has that kernel.
  const bool streaming = FMHA_GPU_HAS_QUANT_STREAM && quantised && !mla && bucket <= 128;
#if FMHA_GPU_HAS_QUANT_STREAM
  if (streaming)
    tile = quant_stream_tile_info(bucket, problem.q_dtype, problem.kv_quant, problem.kv_scale_kind,
                                  problem.kv_quant_groups);
#endif
  // MLA decode has its own kernel where the vendor has one, for what the
  // issue's MLA asks: latents in Q's dtype (f16 / bf16), or E4M3FN ones
  // with one float scale beside f16 / bf16 Q or fp8 Q (FP8_QK), P in fp8
  // or not (FP8_PV); no bias. The rest (E4M3FNUZ, per-row or fp16x2 K
  // scales, a bias) runs in the tile kernel.
  const bool fp8_latents = problem.kv_quant == FMHA_KV_QUANT_FP8;
  const bool mla_kernel = FMHA_GPU_HAS_MLA_KERNEL && mla && !problem.has_bias &&
                          (!quantised || (fp8_latents && problem.fp8_format == FMHA_FP8_E4M3FN &&
                                          problem.kv_scale_kind == FMHA_KV_SCALE_F32 &&
                                          problem.kv_scale_granularity == FMHA_SCALE_PER_TENSOR));
#if FMHA_GPU_HAS_MLA_KERNEL
  if (mla_kernel) tile = ForwardTileInfo{32, fp8_latents ? 4 : 2, mla_smem_bytes(problem.q_dtype, fp8_latents)};
#endif
  // Row pairs (32 query rows per CTA, two MMA row tiles over each K/V
  // fragment) where a K/V head has more than 16 query rows (MQA, Mq 16 of
  // GQA 32/8) and the tile kernel runs: one CTA per 16 rows would repeat the
  // per-tile chain over the same K/V tile. The rule is the core's (its
  // heuristic counts the CTAs). FMHA_SPLITK_TEST_ROW_PAIRS=0 / 1 forces the
  // choice wherever pairs exist (tests: both kernels on the same cases).
  const int64_t heads_per_kv = problem.heads_q / problem.heads_kv;
  const int64_t rows = problem.max_q_seqlen * heads_per_kv;
  bool row_pairs = false;
#if FMHA_GPU_HAS_ROW_PAIRS
  if (!quantised && !mla && bucket <= 128) {
    row_pairs = core::uses_row_pairs(*plan);
    if (const char *forced = std::getenv("FMHA_SPLITK_TEST_ROW_PAIRS")) row_pairs = forced[0] == '1';
    if (row_pairs) tile = row_pair_tile_info(bucket, problem.q_dtype);
  }
#endif
  if (tile.smem_bytes > smem_optin) {
    write_msg(msg,
              "the " FMHA_GPU_BACKEND_NAME
              " forward kernel for head dim %d needs %d bytes of shared memory per block; device %d offers %d",
              bucket, tile.smem_bytes, plan->device.device_id, smem_optin);
    return FMHA_STATUS_NOT_SUPPORTED;
  }

  const int64_t rows_per_cta = row_pairs ? 32 : 16;
  const int64_t row_tiles = (rows + rows_per_cta - 1) / rows_per_cta;
  const int64_t max_pieces = core::max_pieces(*plan);
  const int64_t heads = static_cast<int64_t>(problem.groups) * problem.heads_kv;
  if (rows > std::numeric_limits<int32_t>::max() || max_pieces * row_tiles * heads > kMaxGridX) {
    write_msg(msg,
              "the " FMHA_GPU_BACKEND_NAME
              " forward grid is too large: %lld pieces x %lld row tiles (max_q_seqlen %lld x %lld heads per "
              "K/V head) x %lld K/V heads must stay below 2^31",
              static_cast<long long>(max_pieces), static_cast<long long>(row_tiles),
              static_cast<long long>(problem.max_q_seqlen), static_cast<long long>(heads_per_kv),
              static_cast<long long>(heads));
    return FMHA_STATUS_NOT_SUPPORTED;
  }

  ForwardPlan config{};
  config.head_dim_bucket = bucket;
  config.streaming = streaming;
  config.mla_kernel = mla_kernel;
  config.row_pairs = row_pairs;
  config.num_row_tiles = static_cast<int32_t>(row_tiles);
  config.work_items = max_pieces;
  config.combine_items = problem.batch;
  config.kv_chunk = plan->kv_chunk_size;
  const char *schedule_name = "uniform";
  switch (plan->schedule) {
    case FMHA_SCHEDULE_UNIFORM:
      config.piece_source = static_cast<int32_t>(PieceSource::kUniform);
      config.pieces_per_seq = plan->split_k;
      break;
    case FMHA_SCHEDULE_FIXED_CHUNK:
      schedule_name = "fixed_chunk";
      config.piece_source = static_cast<int32_t>(PieceSource::kFixedChunk);
      config.pieces_per_seq = static_cast<int32_t>(
          std::max<int64_t>(1, (problem.max_kv_seqlen + plan->kv_chunk_size - 1) / plan->kv_chunk_size));
      break;
    case FMHA_SCHEDULE_BALANCED:
      schedule_name = "balanced";
      if (plan->num_ranges > 1 && problem.batch == 1) {
        // One sequence: its pieces are arithmetic on its length, found by
        // the kernels themselves; no scheduling pass (one launch less: B 1
        // decode is where the pass's few microseconds show).
        config.piece_source = static_cast<int32_t>(PieceSource::kBalancedSingle);
        config.pieces_per_seq = plan->num_ranges;
        config.work_items = plan->num_ranges;
        config.combine_items = 1;
      } else if (const int64_t dense_range_len = dense_balanced_range_len(*plan); dense_range_len > 0) {
        // A dense batch: every sequence has max_kv_seqlen keys, so the
        // kernels cut the ranges by arithmetic too (no scheduling pass).
        schedule_name = "balanced_dense";
        config.piece_source = static_cast<int32_t>(PieceSource::kBalancedDense);
        config.kv_chunk = static_cast<int32_t>(dense_range_len);
        config.pieces_per_seq = static_cast<int32_t>((problem.batch * problem.max_kv_seqlen + dense_range_len - 1) /
                                                     dense_range_len);  // effective ranges
        config.work_items = config.pieces_per_seq;
      } else if (plan->num_ranges > 1) {
        // One CTA per range (per row tile and head): ranges hold equal key
        // counts, so the CTAs are equal however the sequences fall.
        config.piece_source = static_cast<int32_t>(PieceSource::kScheduled);
        config.work_items = plan->num_ranges;
        config.combine_items = max_pieces;
        // The meta region gets a header and the range table besides the
        // pieces; keep it the workspace's last region (schedule.cpp puts
        // it there).
        const size_t meta_bytes = schedule_layout(max_pieces, plan->num_ranges).bytes;
        if (plan->ws_meta_size < meta_bytes) {
          if (align_up(plan->ws_meta_offset + plan->ws_meta_size) != plan->workspace_size)
            plan->ws_meta_offset = align_up(plan->workspace_size);
          plan->ws_meta_size = meta_bytes;
          plan->workspace_size = align_up(plan->ws_meta_offset + meta_bytes);
        }
      } else {
        // One range: every sequence is one piece.
        config.piece_source = static_cast<int32_t>(PieceSource::kUniform);
        config.pieces_per_seq = 1;
        config.kv_chunk = static_cast<int32_t>(std::max<int64_t>(1, problem.max_kv_seqlen));
      }
      break;
    default:
      write_msg(msg, "internal: unknown schedule %d", plan->schedule);
      return FMHA_STATUS_INTERNAL_ERROR;
  }
#if FMHA_GPU_HAS_WIDE_TILES
  // The wide tile kernel (8 warps, 3 stages, 2 CTAs per SM) where the grid
  // has at most two CTAs per SM: there it doubles the warps and the tiles
  // in flight; on larger grids the third resident CTA of the 4-warp kernel
  // keeps more K/V in flight (docs/performance.md, run 52). Only where the
  // memory feeds each SM at least 30 GB/s (peak, from the memory clock and
  // bus): the extra bytes in flight pay where bandwidth x latency is large
  // (H200, 37 GB/s per SM: 1.05-1.075x, run 54); on an H100 (25 GB/s per
  // SM) the wide kernel was 1.6-5.3% slower on three of four such
  // problems (run 57).
  // Not with FMHA_FLAG_BATCH_INVARIANT: the choice depends on the batch's
  // grid, and the two kernels sum the softmax's warp partials in another
  // order. FMHA_SPLITK_TEST_WIDE_TILES=0 / 1 forces the choice (tests: both
  // kernels on the same cases).
  if (!quantised && !mla && !row_pairs && bucket == 128) {
    const int64_t grid_ctas = config.work_items * row_tiles * heads;
    const int32_t sms = std::max(1, plan->device.num_workers);
    config.wide = !(problem.flags & FMHA_FLAG_BATCH_INVARIANT) && grid_ctas <= 2 * static_cast<int64_t>(sms) &&
                  plan->device.memory_bandwidth_gbps >= core::kWideTileMinGbpsPerSm * sms;
    if (const char *forced = std::getenv("FMHA_SPLITK_TEST_WIDE_TILES")) config.wide = forced[0] == '1';
    if (config.wide) {
      tile = wide_tile_info(problem.q_dtype);
      if (tile.smem_bytes > smem_optin) config.wide = false, tile = forward_tile_info(bucket, problem.q_dtype, false);
    }
  }
#endif
  if (problem.flags & FMHA_FLAG_CHECKED) {
    // The check's record and per-sequence flags: the workspace's last
    // region, which run_forward and the status read find from its end.
    plan->workspace_size = align_up(plan->workspace_size) + checked_region_bytes(problem.batch);
  }
  config.combine = plan->max_partials > 0 && !(problem.flags & FMHA_FLAG_WRITE_PARTIALS);
  // The merge inside the tile kernel: the last CTA of each (sequence, row
  // tile, K/V head) to finish its piece merges the sequence's slots for its
  // rows, so a run is one launch instead of two (host cost: a launch is
  // 3.4-4.7 us). Where a sequence's slots are arithmetic on its length
  // (not the scheduling pass's pieces), a row tile's LSE values of all of
  // them fit the CTA's shared memory, and that one CTA's share of the
  // merge is short: at most kMaxMergeLoads float4 loads of partial O per
  // thread. The combine pass spreads the rows over many CTAs: MQA (32 rows
  // x 10 slots x 32 float4 per row: 80 loads per thread) took 9 us longer
  // merged in the last CTA (H200, run 65); B 1 L 131072 (4 rows x 49
  // slots: 49) was 2.6% faster; D 256 (4 x 5 x 64: 10) and Mq 4 (16 x 3 x
  // 32: 12) fuse with the dense bound below (not yet measured). In the
  // tile, row-pair and streaming (int4 / fp8) kernels, not the MLA one
  // (its 16 rows x 512 dims per slot exceed the bound at most lengths the
  // plan must allow). The counters (one per unit) must be
  // zero before a run, which leaves them zero: only runs on the plan's own
  // workspace get them (the core zeroes them once); runs on a caller's
  // workspace, whose contents are unspecified, launch the combine pass.
  // Not with FMHA_FLAG_BATCH_INVARIANT: the rule reads the batch's longest
  // sequence (its chunk count), and the two merges sum the slots in another
  // order, so a sequence alone and in a batch could round differently.
  // FMHA_SPLITK_TEST_FUSED_MERGE=0 turns it off (tests and A/B).
  // The streaming kernel merges inside only the scheduled pieces (paged,
  // ragged, varying-length batches, where the merge also saves the pass's
  // launch): on dense batches its merge cost 4-6% (run 80: int4 g1 B 8 L
  // 32768 136.4 -> 142.0 us, its last CTA per sequence merging about 16
  // slots alone), the combine pass spreading them wider.
  plan->merge_counters = 0;
  const bool merge_source =
      !streaming || static_cast<PieceSource>(config.piece_source) == PieceSource::kScheduled;
  if (FMHA_GPU_HAS_FUSED_MERGE && config.combine && !mla_kernel && merge_source &&
      !(problem.flags & FMHA_FLAG_BATCH_INVARIANT)) {
    constexpr int64_t kMaxMergeLoads = 64;
    // The most slots one sequence has: its pieces (uniform, one sequence);
    // in a dense batch the ranges of kv_chunk keys it meets, at most
    // ceil(L / kv_chunk) + 1 (split_slots: 2 where ranges are longer than
    // a sequence), far fewer than the batch's ranges. The scheduling pass
    // (kScheduled: lengths known only on the device) cuts at most one piece
    // per range, and its ranges are at least kv_chunk_size keys long (the
    // minimum piece): at most min(ranges, ceil(L / kv_chunk_size) + 1).
    const PieceSource source = static_cast<PieceSource>(config.piece_source);
    int64_t most_slots = std::max<int32_t>(2, config.pieces_per_seq);
    if (source == PieceSource::kBalancedDense && config.kv_chunk > 0)
      most_slots = std::min<int64_t>(
          most_slots, std::max<int64_t>(2, (problem.max_kv_seqlen + config.kv_chunk - 1) / config.kv_chunk + 1));
    if (source == PieceSource::kScheduled)
      most_slots = std::max<int64_t>(
          2, std::min<int64_t>(plan->num_ranges, (problem.max_kv_seqlen + plan->kv_chunk_size - 1) /
                                                     std::max<int32_t>(1, plan->kv_chunk_size) +
                                                     1));
    const int64_t tile_rows = std::min(rows, rows_per_cta);
    const int64_t merge_loads =
        (tile_rows * most_slots * ((problem.head_dim_v + 3) / 4) + tile.threads - 1) / std::max(1, tile.threads);
    config.fused_merge = merge_smem_bytes(most_slots, rows_per_cta) <= static_cast<size_t>(tile.smem_bytes) &&
                         merge_loads <= kMaxMergeLoads;
    if (const char *forced = std::getenv("FMHA_SPLITK_TEST_FUSED_MERGE"); forced != nullptr && forced[0] == '0')
      config.fused_merge = 0;
    if (config.fused_merge) plan->merge_counters = config.combine_items * row_tiles * heads;
    // With the merge inside the kernel, the scheduling pass's table has no
    // reader but the forward kernel, and each of its CTAs can cut its own
    // range instead (PieceSource::kInline: a round trip to L2 and two
    // block scans per CTA): a run is then one launch instead of two (host
    // cost: docs/performance.md). Where the batch's lengths fit the
    // kernel's shared memory beside the scans', the batch is at most
    // kMaxInlineBatch sequences (every CTA reads all of them, and its
    // threads walk ceil(B / threads) each) and twice its keys fit int32
    // (the kernels cut with 32-bit arithmetic: fewer registers). Runs
    // without counters (a caller's workspace) launch the pass and the
    // combine pass.
    // FMHA_SPLITK_TEST_INLINE_RANGES=0 keeps the pass (tests and A/B).
    constexpr int64_t kMaxInlineBatch = 2048;
    config.inline_ranges = config.fused_merge && source == PieceSource::kScheduled &&
                           problem.batch <= kMaxInlineBatch &&
                           2 * problem.batch * problem.max_kv_seqlen <= std::numeric_limits<int32_t>::max() &&
                           range_span_smem_bytes(problem.batch, tile.threads) <= static_cast<size_t>(tile.smem_bytes);
    if (const char *forced = std::getenv("FMHA_SPLITK_TEST_INLINE_RANGES"); forced != nullptr && forced[0] == '0')
      config.inline_ranges = 0;
  }
  std::memcpy(plan->backend_private, &config, sizeof(config));
  std::snprintf(plan->kernel_name, sizeof(plan->kernel_name), "splitk_fwd_%s%s%s%s_d%d_%s%d_s%d%s/%s%s",
                dtype_name(problem.q_dtype), quantised ? "_" : "",
                !quantised ? ""
                : streaming && problem.kv_quant == FMHA_KV_QUANT_INT4 && problem.kv_quant_groups == 1
                    ? "int4row"
                    : kv_quant_name(problem.kv_quant),
                problem.flags & FMHA_FLAG_FP8_PV ? "_pv8" : "", bucket,
                streaming    ? "stream"
                : mla_kernel ? "mla"
                             : "n",
                tile.block_n, tile.stages,
                row_pairs     ? "_r32"
                : config.wide ? "_w8"
                              : "",
                schedule_name,
                config.inline_ranges ? "+inline_ranges+fused_merge"
                : config.fused_merge ? "+fused_merge"
                : config.combine     ? "+combine"
                                     : "");
  return FMHA_STATUS_SUCCESS;
}

fmha_status run_forward(const fmha_plan_data &plan, const fmha_run_views &views, Stream stream, fmha_msg msg) {
  ForwardPlan config;
  std::memcpy(&config, plan.backend_private, sizeof(config));
  const fmha_splitk_problem &problem = plan.problem;
  if (config.work_items == 0 || config.num_row_tiles == 0) return FMHA_STATUS_SUCCESS;  // no sequence or query

  const bool write_partials = (problem.flags & FMHA_FLAG_WRITE_PARTIALS) != 0;
  const bool quantised = problem.kv_quant != FMHA_KV_QUANT_NONE;
  const bool fp8_q = problem.q_dtype == FMHA_DTYPE_FP8;
  // Packed K/V rows move in 16-byte pieces when every row allows, else in
  // 4-byte ones; fp8 Q in 8-byte ones.
  const auto packed_row_bytes = [&](const fmha_view &view) {
    return view.shape[view.ndim - 1] * static_cast<int64_t>(element_bytes(view.elem));
  };
  // (FMHA_FLAG_V_FROM_K: no V view; V's rows are K's.)
  const fmha_view &v_rows = views.v.data != nullptr ? views.v : views.k;
  const bool kv_copy16 = quantised && rows_aligned(views.k, views.k.ndim - 1) &&
                         rows_aligned(v_rows, v_rows.ndim - 1) && packed_row_bytes(views.k) % 16 == 0 &&
                         packed_row_bytes(v_rows) % 16 == 0;
  // int4 rows of one group (4 + D / 2 bytes) are not whole 16-byte chunks,
  // but the streaming kernel may copy each row's aligned chunks whole,
  // with up to 12 bytes of the rows beside it, where every such chunk lies
  // inside the view (it starts and ends on 16-byte boundaries) and the
  // outer and row strides are whole chunks (a head's rows then share one
  // offset mod 16).
  const auto chunks_inside = [](const fmha_view &view) {
    const int64_t bytes = element_bytes(view.elem);
    if (view.ndim < 3 || reinterpret_cast<uintptr_t>(view.data) % 16 != 0) return false;
    int64_t last = 0;  // the last element's offset
    for (int d = 0; d < view.ndim; ++d) {
      if (view.shape[d] <= 0 || view.stride[d] < 0) return false;
      last += (view.shape[d] - 1) * view.stride[d];
    }
    for (int d = 0; d < 2; ++d)
      if (view.shape[d] > 1 && (view.stride[d] * bytes) % 16 != 0) return false;
    return ((last + 1) * bytes) % 16 == 0;
  };
  const bool kv_over16 = problem.kv_quant == FMHA_KV_QUANT_INT4 && problem.kv_quant_groups == 1 && !kv_copy16 &&
                         chunks_inside(views.k) && chunks_inside(v_rows);
  struct {
    const char *name;
    const fmha_view &view;
    int alignment;
  } const rows_checked[] = {{"q", views.q, fp8_q ? 8 : 16},
                            {"k", views.k, quantised ? 4 : 16},
                            {"v", views.v, quantised ? 4 : 16},
                            {write_partials ? "o_partial" : "o", write_partials ? views.o_partial : views.o, 16}};
  for (const auto &tensor : rows_checked) {
    if (!rows_aligned(tensor.view, tensor.view.ndim - 1, tensor.alignment)) {
      write_msg(msg,
                "%s: the " FMHA_GPU_BACKEND_NAME " backend needs every row (data pointer and strides) %d-byte aligned",
                tensor.name, tensor.alignment);
      return FMHA_STATUS_INVALID_ARGUMENT;
    }
  }

  ForwardParams params{};
  SeqLayout &seq = params.seq;
  seq.kv_layout = problem.kv_layout;
  seq.q_layout = problem.q_layout;
  seq.batch = static_cast<int32_t>(problem.batch);
  seq.max_kv_seqlen = static_cast<int32_t>(problem.max_kv_seqlen);
  seq.max_q_seqlen = static_cast<int32_t>(problem.max_q_seqlen);
  seq.page_size_log2 =
      problem.kv_layout == FMHA_KV_PAGED || problem.kv_layout == FMHA_KV_RAGGED ? log2_exact(problem.page_size) : 0;
  seq.kv_seqlen = static_cast<const int32_t *>(views.kv_seqlen.data);
  seq.kv_seqlen_stride = views.kv_seqlen.stride[0];
  seq.kv_seqstart = static_cast<const int32_t *>(views.kv_seqstart.data);
  seq.kv_seqstart_stride = views.kv_seqstart.stride[0];
  seq.q_seqstart = static_cast<const int32_t *>(views.q_seqstart.data);
  seq.q_seqstart_stride = views.q_seqstart.stride[0];
  seq.block_table = static_cast<const int32_t *>(views.block_table.data);
  seq.block_table_stride[0] = views.block_table.stride[0];
  seq.block_table_stride[1] = views.block_table.stride[1];
  seq.kv_indptr = static_cast<const int32_t *>(views.kv_indptr.data);
  seq.kv_indptr_stride = views.kv_indptr.stride[0];
  seq.kv_indices = static_cast<const int32_t *>(views.kv_indices.data);
  seq.kv_indices_stride = views.kv_indices.stride[0];
  seq.kv_last_page_len = static_cast<const int32_t *>(views.kv_last_page_len.data);
  seq.kv_last_page_len_stride = views.kv_last_page_len.stride[0];

  uint8_t *const workspace = static_cast<uint8_t *>(views.workspace);
  PieceTable &work = params.work;
  work.source = static_cast<PieceSource>(config.piece_source);
  work.pieces_per_seq = config.pieces_per_seq;
  work.kv_chunk = config.kv_chunk;
  ScheduleMeta *schedule_meta = nullptr;
  Piece *schedule_pieces = nullptr;
  int32_t *range_first = nullptr;
  if (work.source == PieceSource::kScheduled) {
    const ScheduleLayout layout = schedule_layout(core::max_pieces(plan), plan.num_ranges);
    uint8_t *const meta = workspace + plan.ws_meta_offset;
    schedule_meta = reinterpret_cast<ScheduleMeta *>(meta);
    schedule_pieces = reinterpret_cast<Piece *>(meta + layout.pieces_offset);
    range_first = reinterpret_cast<int32_t *>(meta + layout.range_first_offset);
    work.meta = schedule_meta;
    work.pieces = schedule_pieces;
    work.range_first = range_first;
  }
  if (plan.max_partials > 0 && !write_partials) {
    params.ws_o = reinterpret_cast<float *>(workspace + plan.ws_partial_o_offset);
    params.ws_lse = reinterpret_cast<float *>(workspace + plan.ws_partial_lse_offset);
  }
  // (The core gives counters only to runs on the plan's own workspace.)
  if (config.fused_merge && views.merge_counters != nullptr)
    params.merge_counters = static_cast<uint32_t *>(views.merge_counters);
  // The kernel cuts its own ranges where it also merges (no pass, and no
  // combine pass to read the pass's table).
  if (config.inline_ranges && params.merge_counters != nullptr) {
    work.source = PieceSource::kInline;
    work.pieces_per_seq = plan.num_ranges;
    work.kv_chunk = plan.kv_chunk_size;
    work.meta = nullptr;
    work.pieces = nullptr;
    work.range_first = nullptr;
  }

  params.q = views.q.data;
  params.k = views.k.data;
  params.v = views.v.data;
  params.o = views.o.data;
  params.o_elem = views.o.elem;
  params.lse = static_cast<float *>(views.lse.data);
  for (int d = 0; d < 4; ++d) {
    params.q_stride[d] = views.q.stride[d];
    params.k_stride[d] = views.k.stride[d];
    params.v_stride[d] = views.v.stride[d];
    params.o_stride[d] = views.o.stride[d];
    params.lse_stride[d] = views.lse.stride[d];
  }
  params.bias = views.bias.data;
  params.bias_elem = views.bias.elem;
  for (int d = 0; d < 5; ++d) {
    params.bias_stride[d] = views.bias.stride[d];
    params.o_partial_stride[d] = views.o_partial.stride[d];
    params.lse_partial_stride[d] = views.lse_partial.stride[d];
  }
  params.sinks = static_cast<const float *>(views.sinks.data);
  params.sinks_stride[0] = views.sinks.stride[0];
  params.sinks_stride[1] = views.sinks.stride[1];
  params.o_partial = static_cast<float *>(views.o_partial.data);
  params.lse_partial = static_cast<float *>(views.lse_partial.data);
  params.write_partials = write_partials;

  params.groups = problem.groups;
  params.heads_q = problem.heads_q;
  params.heads_kv = problem.heads_kv;
  params.heads_per_kv = problem.heads_q / problem.heads_kv;
  params.head_dim_qk = problem.head_dim_qk;
  params.head_dim_v = problem.head_dim_v;
  params.num_row_tiles = config.num_row_tiles;
  params.mask = problem.mask;
  params.window_left = problem.window_left;
  params.window_right = problem.window_right;
  params.has_softcap = problem.softcap > 0.f;
  if (params.has_softcap) {
    params.score_scale = problem.softmax_scale / problem.softcap;
    params.softcap_log2 = problem.softcap * kernels::kLog2e;
  } else {
    params.score_scale = problem.softmax_scale * kernels::kLog2e;
  }

  if (quantised) {
    params.kv_quant = problem.kv_quant;
    params.kv_quant_groups = problem.kv_quant_groups;
    params.fp8_format = problem.fp8_format;
    params.kv_scale_kind = problem.kv_scale_kind;
    params.kv_scale_granularity = problem.kv_scale_granularity;
    params.kv_copy16 = kv_copy16;
    params.kv_over16 = kv_over16;
    // With FMHA_FLAG_V_FROM_K there is no V view or v_scale: the loader
    // stages K rows only, decoded with k_scale.
    params.k_scale = views.k_scale.data;
    params.v_scale = views.v_scale.data;
    for (int d = 0; d < views.k_scale.ndim && d < 4; ++d) params.k_scale_stride[d] = views.k_scale.stride[d];
    for (int d = 0; d < views.v_scale.ndim && d < 4; ++d) params.v_scale_stride[d] = views.v_scale.stride[d];
    params.q_fp8 = fp8_q;
    params.q_scale_granularity = problem.q_scale_granularity;
    params.q_scale = static_cast<const float *>(views.q_scale.data);
    for (int d = 0; d < views.q_scale.ndim && d < 4; ++d) params.q_scale_stride[d] = views.q_scale.stride[d];
    params.fp8_pv = (problem.flags & FMHA_FLAG_FP8_PV) != 0;
    params.fp8_bias = problem.fp8_format == FMHA_FP8_E4M3FNUZ ? 8 : 7;
    params.fp8_max = problem.fp8_format == FMHA_FP8_E4M3FNUZ ? 240.f : 448.f;
  }

  if (problem.flags & FMHA_FLAG_CHECKED) {
    // Before every pass that reads the metadata: the scheduling pass, the
    // forward and the combine kernels see a bad sequence as empty.
    uint8_t *const region = workspace + checked_region_offset(plan);
    const fmha_view &v = views.v.data != nullptr ? views.v : views.k;
    MetadataLimits limits{};
    if (problem.kv_layout == FMHA_KV_PADDED || problem.kv_layout == FMHA_KV_GAPPY) {
      limits.kv_capacity = std::min(views.k.shape[1], v.shape[1]);
      limits.kv_rows = limits.kv_capacity;
    }
    if (problem.kv_layout == FMHA_KV_PAGED || problem.kv_layout == FMHA_KV_RAGGED)
      limits.num_pages = std::min(views.k.shape[0], v.shape[0]);
    if (problem.kv_layout == FMHA_KV_PAGED) limits.table_columns = views.block_table.shape[1];
    if (problem.kv_layout == FMHA_KV_RAGGED) limits.kv_indices_len = views.kv_indices.shape[0];
    if (problem.q_layout == FMHA_Q_VARLEN) limits.total_q = views.q.shape[1];
    const fmha_status st = launch_metadata_check(seq, limits, region, stream, msg);
    if (st != FMHA_STATUS_SUCCESS) return st;
    seq.seq_bad = checked_seq_flags(region);
  }

  if (work.source == PieceSource::kScheduled) {
    const fmha_status st = launch_balanced_schedule(seq, plan.num_ranges, plan.kv_chunk_size, schedule_meta,
                                                    schedule_pieces, range_first, stream, msg);
    if (st != FMHA_STATUS_SUCCESS) return st;
  }

  const dim3 grid(static_cast<unsigned>(config.work_items * config.num_row_tiles * problem.groups * problem.heads_kv));
  const int device = plan.device.device_id;
  const int bucket = config.head_dim_bucket;
  fmha_status st;
#if FMHA_GPU_HAS_MLA_KERNEL
  // (fp8 latents whose rows are only 4-byte aligned: the tile kernel's
  // 4-byte copies.)
  if (config.mla_kernel && (!quantised || params.kv_copy16))
    st = problem.q_dtype == FMHA_DTYPE_BF16 ? launch_mla_forward_bf16(params, grid, device, stream, msg)
                                            : launch_mla_forward_f16(params, grid, device, stream, msg);
  else
#endif
#if FMHA_GPU_HAS_QUANT_STREAM
      if (config.streaming)
    st = problem.q_dtype == FMHA_DTYPE_BF16
             ? launch_quant_stream_forward_bf16(params, bucket, grid, device, stream, msg)
             : launch_quant_stream_forward_f16(params, bucket, grid, device, stream, msg);
  else
#endif
      if (quantised)
    st = problem.q_dtype == FMHA_DTYPE_BF16
             ? launch_splitk_forward_quant_bf16(params, bucket, grid, device, stream, msg)
             : launch_splitk_forward_quant_f16(params, bucket, grid, device, stream, msg);
  else
#if FMHA_GPU_HAS_ROW_PAIRS
      if (config.row_pairs)
    st = problem.q_dtype == FMHA_DTYPE_F16 ? launch_row_pair_forward_f16(params, bucket, grid, device, stream, msg)
                                           : launch_row_pair_forward_bf16(params, bucket, grid, device, stream, msg);
  else
#endif
    st = problem.q_dtype == FMHA_DTYPE_F16
             ? launch_splitk_forward_f16(params, bucket, config.wide != 0, grid, device, stream, msg)
             : launch_splitk_forward_bf16(params, bucket, config.wide != 0, grid, device, stream, msg);
  if (st != FMHA_STATUS_SUCCESS || !config.combine || params.merge_counters != nullptr) return st;

  // (Programmatic dependent launch: CUDA compute capability 9.0 and newer;
  // the HIP vendor layer launches plainly.)
  const bool overlap = plan.device.compute_capability >= 90;
  return launch_split_combine(params, config.combine_items, overlap, device, stream, msg);
}

namespace {
// A tile shape's keys per tile, stages and shared memory.
template <typename Tile>
ForwardTileInfo info(Tile) {
  return ForwardTileInfo{Tile::kBlockN, Tile::kStages, Tile::kSmemBytes, Tile::kThreads};
}

template <typename T, bool kQuantised>
ForwardTileInfo tile_info(int head_dim_bucket) {
  switch (head_dim_bucket) {
    case 64:
      return info(kernels::ForwardTile<T, 64, kQuantised>{});
    case 128:
      return info(kernels::ForwardTile<T, 128, kQuantised>{});
    case 256:
      return info(kernels::ForwardTile<T, 256, kQuantised>{});
    case 576:
      return info(kernels::ForwardTile<T, 576, kQuantised>{});
    default:
      return info(kernels::ForwardTile<T, 512, false>{});
  }
}
}  // namespace

#if FMHA_GPU_HAS_QUANT_STREAM
ForwardTileInfo quant_stream_tile_info(int head_dim_bucket, int32_t q_dtype, int32_t kv_quant, int32_t kv_scale_kind,
                                       int32_t kv_quant_groups) {
  const auto of_tile = [](auto tile) {
    using Tile = decltype(tile);
    return ForwardTileInfo{Tile::kWarpKeys, Tile::kStages, Tile::kSmemBytes, Tile::kThreads};
  };
  const auto by_dtype = [&](auto t) {
    using T = decltype(t);
    const auto by_format = [&](auto bucket) {
      constexpr int kBucket = decltype(bucket)::value;
      using kernels::StreamFormat;
      // kInt4RowChunks is picked at launch (kv_over16) and sized as kInt4Row.
      static_assert(kernels::StreamTile<T, kBucket, StreamFormat::kInt4RowChunks, 2>::kSmemBytes ==
                        kernels::StreamTile<T, kBucket, StreamFormat::kInt4Row, 2>::kSmemBytes &&
                    kernels::StreamTile<T, kBucket, StreamFormat::kInt4RowChunks, 2>::kStages ==
                        kernels::StreamTile<T, kBucket, StreamFormat::kInt4Row, 2>::kStages);
      switch (stream_format(kv_quant, kv_scale_kind, kv_quant_groups)) {
        case StreamFormat::kInt4:
          return of_tile(kernels::StreamTile<T, kBucket, StreamFormat::kInt4, 2>{});
        case StreamFormat::kInt4Row:
          return of_tile(kernels::StreamTile<T, kBucket, StreamFormat::kInt4Row, 2>{});
        case StreamFormat::kFp8ScaleShift:
          return of_tile(kernels::StreamTile<T, kBucket, StreamFormat::kFp8ScaleShift, 2>{});
        default:
          return of_tile(kernels::StreamTile<T, kBucket, StreamFormat::kFp8Float, 2>{});
      }
    };
    return head_dim_bucket == 64 ? by_format(std::integral_constant<int, 64>{})
                                 : by_format(std::integral_constant<int, 128>{});
  };
  return q_dtype == FMHA_DTYPE_BF16 ? by_dtype(bf16_t{}) : by_dtype(half_t{});
}
#endif

#if FMHA_GPU_HAS_ROW_PAIRS
ForwardTileInfo row_pair_tile_info(int head_dim_bucket, int32_t q_dtype) {
  if (q_dtype == FMHA_DTYPE_BF16)
    return head_dim_bucket == 64 ? info(kernels::ForwardTile<bf16_t, 64, false, 2>{})
                                 : info(kernels::ForwardTile<bf16_t, 128, false, 2>{});
  return head_dim_bucket == 64 ? info(kernels::ForwardTile<half_t, 64, false, 2>{})
                               : info(kernels::ForwardTile<half_t, 128, false, 2>{});
}
#endif

#if FMHA_GPU_HAS_MLA_KERNEL
int mla_smem_bytes(int32_t q_dtype, bool fp8) {
  if (q_dtype == FMHA_DTYPE_BF16)
    return fp8 ? kernels::MlaTile<bf16_t, true>::kSmemBytes : kernels::MlaTile<bf16_t, false>::kSmemBytes;
  return fp8 ? kernels::MlaTile<half_t, true>::kSmemBytes : kernels::MlaTile<half_t, false>::kSmemBytes;
}
#endif

#if FMHA_GPU_HAS_WIDE_TILES
ForwardTileInfo wide_tile_info(int32_t q_dtype) {
  return q_dtype == FMHA_DTYPE_BF16 ? info(kernels::ForwardTile<bf16_t, 128, false, 1, true>{})
                                    : info(kernels::ForwardTile<half_t, 128, false, 1, true>{});
}
#endif

ForwardTileInfo forward_tile_info(int head_dim_bucket, int32_t q_dtype, bool quantised) {
  // bf16 P is split in two (one more P tile); quantised bf16 Q in two.
  if (!quantised)
    return q_dtype == FMHA_DTYPE_BF16 ? tile_info<bf16_t, false>(head_dim_bucket)
                                      : tile_info<half_t, false>(head_dim_bucket);
  return q_dtype == FMHA_DTYPE_BF16 ? tile_info<bf16_t, true>(head_dim_bucket)
                                    : tile_info<half_t, true>(head_dim_bucket);
}

}  // namespace fmha::gpu
