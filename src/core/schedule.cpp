// Split-K heuristic and work partition (see schedule.h and DESIGN 5.1).
#include "core/schedule.h"

#include <algorithm>
#include <limits>

namespace fmha::core {
namespace {

// Every workspace region starts at this alignment (GPU vector loads, and the
// alignment the public API promises for the workspace base).
constexpr size_t kWorkspaceAlignment = 256;

// Shortest BALANCED range. A piece that is split off costs one partial row
// written and read back per query row, so it must hold enough keys to
// amortise the merge: a GPU streams about 256 keys per tile pass; CPU
// threads are few and their merge is cheap, so shorter pieces pay off there.
constexpr int32_t kMinPieceKeysGpu = 256;
constexpr int32_t kMinPieceKeysCpu = 64;

// BALANCED aims at this many (piece, group, K/V head) work items per worker,
// so that uneven pieces still leave a short last wave.
constexpr int64_t kItemsPerWorker = 2;

// Sequences up to this many keys are short: a wave of them is over before
// a split's combine pass would pay for itself (H200: B=32 L=4096 runs
// fastest unsplit).
constexpr int64_t kShortSequenceKeys = 4096;

// A GPU batch whose K/V work per SM is at most this many key rows x head
// dims (every row tile's pass counted; 1.5 MiB of bf16 K and V) is small:
// its split aims at kSmallBatchCtasPerSm CTAs per SM with pieces of at
// least kLongPieceKeysGpu keys (see heuristic_choice). The H200 autotune
// measured the gain up to 1 MiB per SM and a loss from 2 MiB
// (docs/performance.md).
constexpr double kSmallWorkPerSm = 3 << 17;
constexpr int64_t kSmallBatchCtasPerSm = 2;
constexpr int32_t kLongPieceKeysGpu = 512;

// Query rows per CTA of the GPU forward kernels (one MMA row tile): each
// range runs one CTA per row tile and head. The CUDA tile kernel's row
// pairs take 32 (two row tiles) with 2 CTAs resident per SM where a K/V
// head has more rows than one tile (uses_row_pairs).
constexpr int64_t kRowsPerCta = 16;
constexpr int64_t kRowsPerPair = 32;

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

int64_t ceil_div(int64_t numerator, int64_t denominator) { return (numerator + denominator - 1) / denominator; }

// Chunks of FIXED_CHUNK a sequence of kv_len keys is cut into (>= 1).
int64_t fixed_chunks(int64_t kv_len, int32_t kv_chunk_size) {
  return std::max<int64_t>(1, ceil_div(kv_len, kv_chunk_size));
}

// size_t arithmetic that remembers whether it overflowed.
class ByteCount {
 public:
  explicit ByteCount(size_t value) : value_(value) {}
  ByteCount &times(uint64_t factor) {
    if (factor != 0 && value_ > std::numeric_limits<size_t>::max() / factor) overflow_ = true;
    value_ *= factor;
    return *this;
  }
  ByteCount &plus(size_t addend) {
    if (value_ > std::numeric_limits<size_t>::max() - addend) overflow_ = true;
    value_ += addend;
    return *this;
  }
  ByteCount &align_up() {
    plus(kWorkspaceAlignment - 1);
    value_ &= ~(kWorkspaceAlignment - 1);
    return *this;
  }
  ByteCount &plus(const ByteCount &other) {
    overflow_ = overflow_ || other.overflow_;
    return plus(other.value_);
  }
  size_t value() const { return value_; }
  bool overflowed() const { return overflow_; }

 private:
  size_t value_;
  bool overflow_ = false;
};

// Calls emit(Piece) for every piece of the batch in (batch, kv_begin) order,
// with slots numbered densely in that order. kv_len(b) gives the keys of
// sequence b, in [0, max_kv_seqlen]. The single definition of the partition:
// partition() stores it, choose_schedule() measures it.
template <class KvLen, class Emit>
void for_each_piece(const fmha_plan_data &plan, KvLen kv_len, Emit emit) {
  const int64_t batch = plan.problem.batch;
  int32_t next_slot = 0;
  switch (plan.schedule) {
    case FMHA_SCHEDULE_UNIFORM: {
      const int64_t chunk = plan.kv_chunk_size;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = kv_len(b);
        if (plan.split_k == 1) {
          emit(Piece{static_cast<int32_t>(b), 0, static_cast<int32_t>(len), -1});
          continue;
        }
        // Every chunk is a piece, empty ones included: each owns its slot
        // (and, with FMHA_FLAG_WRITE_PARTIALS, its o_partial index).
        for (int64_t s = 0; s < plan.split_k; ++s) {
          const int64_t begin = std::min(s * chunk, len);
          const int64_t end = std::min((s + 1) * chunk, len);
          emit(Piece{static_cast<int32_t>(b), static_cast<int32_t>(begin), static_cast<int32_t>(end), next_slot++});
        }
      }
      return;
    }
    case FMHA_SCHEDULE_FIXED_CHUNK: {
      const int64_t chunk = plan.kv_chunk_size;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = kv_len(b);
        const int64_t chunks = fixed_chunks(len, plan.kv_chunk_size);
        if (chunks == 1) {
          emit(Piece{static_cast<int32_t>(b), 0, static_cast<int32_t>(len), -1});
          continue;
        }
        for (int64_t c = 0; c < chunks; ++c) {
          emit(Piece{static_cast<int32_t>(b), static_cast<int32_t>(c * chunk),
                     static_cast<int32_t>(std::min((c + 1) * chunk, len)), next_slot++});
        }
      }
      return;
    }
    case FMHA_SCHEDULE_BALANCED: {
      int64_t total_keys = 0;
      for (int64_t b = 0; b < batch; ++b) total_keys += kv_len(b);
      const BalancedCut<int64_t> cut = balanced_cut<int64_t>(total_keys, plan.num_ranges, plan.kv_chunk_size);
      int64_t seq_start = 0;  // offset of sequence b in the concatenation
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = kv_len(b);
        const int64_t cuts = sequence_cut(cut, seq_start, len).cuts;
        for (int64_t k = 0; k <= cuts; ++k)
          emit(sequence_piece(cut, static_cast<int32_t>(b), seq_start, len, next_slot, k));
        next_slot += static_cast<int32_t>(sequence_slots(cuts));
        seq_start += len;
      }
      return;
    }
    default:
      return;
  }
}

// BALANCED: the ranges that `waves` work items per worker give for the
// expected lengths, none shorter than min_piece keys.
int64_t ranges_for_waves(const fmha_plan_data &plan, int64_t total_keys, int32_t waves, int32_t min_piece) {
  const fmha_splitk_problem &problem = plan.problem;
  if (waves <= 0 || total_keys == 0) return 1;
  const int64_t items_per_range = static_cast<int64_t>(problem.groups) * problem.heads_kv;
  const int64_t workers = std::max<int32_t>(1, plan.device.num_workers);
  // A GPU's wave is rounded down so that no CTA is left for another wave;
  // the CPU's threads round up, for balance.
  const int64_t wanted = plan.device.dl_device_type == kDLCPU ? ceil_div(waves * workers, items_per_range)
                                                              : std::max<int64_t>(1, waves * workers / items_per_range);
  const int64_t by_length = std::max<int64_t>(1, total_keys / min_piece);
  return std::min({wanted, by_length, kMaxInt32});
}

// AMD GPUs (HIP): the split count of the reference operator's HIP
// heuristic (get_split_k in the seeds' triton_splitk.py), the issue's
// starting point, for B sequences of Mk keys over G x H K/V heads: about
// (Mk + B H) / (B H) splits, fewer while a split would hold under 64 keys,
// halved down to 1024 / (B G H), one more when the split size is not a
// multiple of 64, at most 512. Its paged rule (no split longer than a
// page) is left out: that is its kernel's limit, not ours.
int64_t reference_hip_split_k(int64_t batch, int64_t groups, int64_t heads, int64_t keys) {
  const int64_t bh = std::max<int64_t>(batch * heads, 1);
  constexpr int64_t kChunk = 64;
  int64_t split = std::max<int64_t>(keys + bh - 1, 1024) / bh;
  const double stop = std::max(1024.0 / static_cast<double>(std::max<int64_t>(batch * groups * heads, 1)), 1.0);
  while (split > 1 && static_cast<double>(keys) / static_cast<double>(split - 1) < kChunk) --split;
  while (static_cast<double>(split) > stop) split /= 2;
  const int64_t split_size = ceil_div(keys, std::max<int64_t>(split, 1));
  if (split_size / kChunk * kChunk < split_size) ++split;
  return std::clamp<int64_t>(split, 1, 512);
}

// The heuristic's choice for the expected lengths (hint, or max_kv_seqlen
// each): no waves (one range) when the longest sequence is no more work than
// the mean load of a worker (the batch alone fills the device evenly);
// otherwise enough that ranges x groups x K/V heads is a small multiple of
// the workers, with the shortest pieces that amortise their merge.
ScheduleChoice heuristic_choice(const fmha_plan_data &plan, int64_t total_keys, int64_t longest) {
  const fmha_splitk_problem &problem = plan.problem;
  const int64_t items_per_range = static_cast<int64_t>(problem.groups) * problem.heads_kv;
  const int64_t workers = std::max<int32_t>(1, plan.device.num_workers);
  const bool cpu = plan.device.dl_device_type == kDLCPU;
  const int32_t min_piece = cpu ? kMinPieceKeysCpu : kMinPieceKeysGpu;
  if (total_keys == 0) return ScheduleChoice{0, min_piece};
  // longest * workers <= total_keys * items_per_range, without overflow.
  const double mean_worker_load =
      static_cast<double>(total_keys) * static_cast<double>(items_per_range) / static_cast<double>(workers);
  const bool evenly = static_cast<double>(longest) <= mean_worker_load;
  // The CPU's threads take 2 items each, for balance.
  if (cpu) return ScheduleChoice{evenly ? 0 : static_cast<int32_t>(kItemsPerWorker), min_piece};
  if (plan.device.dl_device_type == kDLROCM) {
    // The reference's split count as a balanced partition: B x split_k
    // ranges (about: whole waves of the CUs), so a uniform batch gets
    // split_k pieces per sequence and an uneven one the same work per CU;
    // pieces of at least its 64-key chunk. Untuned: no AMD GPU has run it.
    const int64_t split = reference_hip_split_k(problem.batch, problem.groups, problem.heads_kv, longest);
    constexpr int32_t kHipMinPiece = 64;
    if (split <= 1) return ScheduleChoice{0, kHipMinPiece};
    const int64_t waves = ceil_div(problem.batch * split * items_per_range, workers);
    return ScheduleChoice{static_cast<int32_t>(std::min<int64_t>(waves, kMaxInt32)), kHipMinPiece};
  }
  // A GPU's forward kernels keep 3 CTAs resident per SM up to head dim 128,
  // 2 at 256 and 1 beyond (TilePolicy in backends/gpu/vendor/cuda_tile.cuh). The
  // batch alone is the better partition only when its items fit one wave of
  // those and are short: otherwise a second, partly empty wave, or SMs
  // holding fewer CTAs than they could, cost more than the combine pass.
  // Autotuning on the H200 (docs/performance.md, 2026-12-03) measured the
  // split 1.02-1.43x faster than the unsplit batch on every grid problem
  // outside that case (B 32-128 dense, paged, varying lengths, MHA), and 3
  // waves ahead of 2 at head dim 256 (1.15x).
  // Row pairs: 2 resident CTAs of 32 rows, so one wave of them is 2 per
  // SM. An even batch whose pair CTAs already fill whole waves of them
  // (at least one, 90% full or more: Mq 16 of GQA 32/8 at B 32 is 512 CTAs,
  // 97% of 2 waves) stays unsplit: splitting adds as many CTAs again
  // for the same waves, plus the combine (autotune, run 54 of
  // docs/validation.md: Mq 16 unsplit 637 us against 697 split in 2).
  const int32_t head_dim = std::max(problem.head_dim_qk, problem.head_dim_v);
  const bool pairs = uses_row_pairs(plan);
  const int64_t resident = pairs ? 2 : head_dim <= 128 ? 3 : head_dim <= 256 ? 2 : 1;
  const int64_t items = problem.batch * items_per_range;
  if (evenly && items <= resident * workers && longest <= kShortSequenceKeys) return ScheduleChoice{0, min_piece};
  if (pairs && evenly) {
    const int64_t pair_ctas =
        items * ceil_div(problem.max_q_seqlen * (problem.heads_q / problem.heads_kv), kRowsPerPair);
    const int64_t wave = resident * workers;
    const int64_t waves = ceil_div(pair_ctas, wave);
    if (pair_ctas >= wave && pair_ctas * 10 >= waves * wave * 9) return ScheduleChoice{0, min_piece};
  }
  // A uniform batch whose 16-row CTAs fill whole layers of the SMs, 90%
  // or more, all resident at once (head dims up to 256), stays unsplit
  // where the SMs get less than kWideTileMinGbpsPerSm each (H100): every
  // SM streams the same keys, and a split only adds CTAs, pieces and the
  // merge. The H100 tunes at 4cc7e77 (runs 86-89 of docs/validation.md,
  // graph replays in run 89) measured the unsplit batch 1.01-1.07x faster
  // on MHA B 8 L 8192, Mq 4 B 32 L 8192, D 64 / D 256 B 16 L 8192, B 32 L
  // 16384 and the paged B 32 L 16384 batches (128 or 256 CTAs), 1.05x and
  // 1.18x on fp8 and int4 paged; and slower past one resident wave (the
  // uniform B 64 batch of the grid, 512 CTAs: 0.96x); the rule's build
  // against 4cc7e77 (run 90): 1.012-1.163x, page 1 0.996x. With faster
  // memory the plugin runs such a grid on its wide kernel, and the H200
  // tunes favoured splits there (docs/performance.md), so that case keeps
  // them until an H200 A/B at main says otherwise (wip/README.md). Other
  // GPUs under the bound (A100, L40) take the rule unmeasured. "Uniform":
  // the expected lengths (the hint, else max_kv_seqlen for every sequence)
  // are equal.
  const int64_t row_tiles =
      ceil_div(problem.max_q_seqlen * (problem.heads_q / problem.heads_kv), pairs ? kRowsPerPair : kRowsPerCta);
  const bool uniform = longest * problem.batch == total_keys;
  const bool slow_memory = plan.device.memory_bandwidth_gbps < kWideTileMinGbpsPerSm * static_cast<double>(workers);
  if (!pairs && uniform && slow_memory && head_dim <= 256) {
    const int64_t ctas = items * row_tiles;
    const int64_t layers = ceil_div(ctas, workers);
    if (layers <= resident && ctas * 10 >= layers * workers * 9) return ScheduleChoice{0, min_piece};
  }
  const ScheduleChoice default_waves{pairs ? 2 : head_dim <= 256 ? 3 : 2, min_piece};
  // A small batch (little K/V work per SM) whose 256-key pieces would make
  // more than 2 CTAs per SM, counting the row tiles of each range (MQA's 32
  // query heads are 2 tiles): a third resident CTA hides little latency in
  // a pass this short, while every extra piece reloads Q, writes a partial
  // row and lengthens the combine. So it aims at 2 CTAs per SM with pieces
  // of at least 512 keys (whole tiles, fewer pieces per sequence). H200
  // autotune (h200-tune-36e52f1.json, fitted offline by
  // bench/fit_heuristic.py): 1.02-1.48x on the batches of at most 1 MiB per
  // SM (B 1-64, mostly B 1-4 with 16K-32K keys), at worst 2.4% slower than
  // 3 waves of 256-key pieces. Batches whose 256-key pieces make at most 2
  // CTAs per SM keep them (longer pieces lost there: B 4 L 2048), and
  // ranges of more than 2 row tiles are unchanged (not measured).
  if (head_dim > 256 || row_tiles < 1 || row_tiles > kSmallBatchCtasPerSm) return default_waves;
  const double ctas_per_range = static_cast<double>(items_per_range) * static_cast<double>(row_tiles);
  const double work_per_sm = static_cast<double>(total_keys) * ctas_per_range * head_dim / static_cast<double>(workers);
  const double short_piece_ctas = static_cast<double>(total_keys / kMinPieceKeysGpu) * ctas_per_range;
  if (work_per_sm <= kSmallWorkPerSm &&
      short_piece_ctas > static_cast<double>(kSmallBatchCtasPerSm) * static_cast<double>(workers))
    return ScheduleChoice{static_cast<int32_t>(kSmallBatchCtasPerSm / row_tiles), kLongPieceKeysGpu};
  return default_waves;
}

bool refuse(std::string &message, std::string text) {
  message = std::move(text);
  return false;
}

// The preconditions the schedule's arithmetic relies on (the core validates
// the problem, and the hint against max_kv_seqlen, fully before; this keeps
// the schedule's own arithmetic defined).
bool check_problem(const fmha_splitk_problem &problem, std::string &message) {
  if (problem.batch < 0 || problem.max_q_seqlen < 0 || problem.max_kv_seqlen < 0)
    return refuse(message, "problem.batch = " + std::to_string(problem.batch) +
                               ", problem.max_q_seqlen = " + std::to_string(problem.max_q_seqlen) +
                               ", problem.max_kv_seqlen = " + std::to_string(problem.max_kv_seqlen) +
                               ": sizes must be >= 0");
  if (problem.groups < 1 || problem.heads_q < 1 || problem.heads_kv < 1 || problem.heads_q % problem.heads_kv != 0 ||
      problem.head_dim_v < 1)
    return refuse(message, "problem.groups = " + std::to_string(problem.groups) +
                               ", problem.heads_q = " + std::to_string(problem.heads_q) +
                               ", problem.heads_kv = " + std::to_string(problem.heads_kv) +
                               ", problem.head_dim_v = " + std::to_string(problem.head_dim_v) +
                               ": the schedule needs groups, heads and head_dim_v >= 1 and heads_kv dividing heads_q");
  if (problem.batch > kMaxInt32)
    return refuse(message, "problem.batch = " + std::to_string(problem.batch) +
                               " exceeds 2147483647, the largest sequence index of a work partition");
  if (problem.max_kv_seqlen > kMaxInt32)
    return refuse(message, "problem.max_kv_seqlen = " + std::to_string(problem.max_kv_seqlen) +
                               " exceeds 2147483647, the largest key index of a work partition");
  if (problem.split_k < 0)
    return refuse(message, "problem.split_k = " + std::to_string(problem.split_k) + " must be >= 0");
  if (problem.split_k == 0 && (problem.flags & FMHA_FLAG_BATCH_INVARIANT) && problem.kv_chunk_size < 1)
    return refuse(message, "problem.kv_chunk_size = " + std::to_string(problem.kv_chunk_size) +
                               " must be >= 1 with FMHA_FLAG_BATCH_INVARIANT");
  return true;
}

// Lays out the workspace regions for plan.max_partials partial slots and
// max_pieces(plan) metadata entries.
bool size_workspace(fmha_plan_data &plan, std::string &message) {
  const fmha_splitk_problem &problem = plan.problem;
  plan.ws_partial_o_offset = 0;
  plan.ws_partial_lse_offset = 0;
  plan.ws_meta_offset = 0;
  plan.ws_meta_size = 0;
  plan.workspace_size = 0;
  if (plan.max_partials == 0) return true;  // pieces write O directly: no workspace

  ByteCount lse_bytes(sizeof(float));
  lse_bytes.times(static_cast<uint64_t>(plan.max_partials))
      .times(static_cast<uint64_t>(problem.groups))
      .times(static_cast<uint64_t>(problem.heads_q))
      .times(static_cast<uint64_t>(problem.max_q_seqlen));
  ByteCount o_bytes = lse_bytes;
  o_bytes.times(static_cast<uint64_t>(problem.head_dim_v));
  ByteCount meta_bytes(sizeof(Piece));
  meta_bytes.times(static_cast<uint64_t>(max_pieces(plan)));

  ByteCount lse_offset(0);
  lse_offset.plus(o_bytes).align_up();
  ByteCount meta_offset = lse_offset;
  meta_offset.plus(lse_bytes).align_up();
  ByteCount total = meta_offset;
  total.plus(meta_bytes).align_up();
  if (total.overflowed())
    return refuse(message, "workspace of " + std::to_string(plan.max_partials) + " partial slots x groups " +
                               std::to_string(problem.groups) + " x heads_q " + std::to_string(problem.heads_q) +
                               " x max_q_seqlen " + std::to_string(problem.max_q_seqlen) + " x head_dim_v " +
                               std::to_string(problem.head_dim_v) + " overflows size_t");
  plan.ws_partial_lse_offset = lse_offset.value();
  plan.ws_meta_offset = meta_offset.value();
  plan.ws_meta_size = meta_bytes.value();
  plan.workspace_size = total.value();
  return true;
}

}  // namespace

bool uses_row_pairs(const fmha_plan_data &plan) {
  const fmha_splitk_problem &problem = plan.problem;
  const int64_t heads_per_kv = problem.heads_q / std::max<int32_t>(1, problem.heads_kv);
  // Batch invariant: a row's rounding must not depend on the rest of the
  // batch, and the pair kernel sums QK^T's k-steps and PV's bf16 parts in
  // another order than the 16-row kernel; so there the choice sees the
  // rows of one query only (max_q_seqlen is the batch's longest).
  const int64_t rows = (problem.flags & FMHA_FLAG_BATCH_INVARIANT) ? heads_per_kv : problem.max_q_seqlen * heads_per_kv;
  return plan.device.dl_device_type == kDLCUDA && problem.kv_quant == FMHA_KV_QUANT_NONE &&
         !(problem.flags & FMHA_FLAG_V_FROM_K) && std::max(problem.head_dim_qk, problem.head_dim_v) <= 128 &&
         rows > kRowsPerCta;
}

int64_t effective_ranges(const fmha_plan_data &plan, int64_t total_keys) {
  return balanced_cut<int64_t>(total_keys, plan.num_ranges, plan.kv_chunk_size).ranges;
}

fmha_status choose_schedule(fmha_plan_data &plan, const int32_t *kv_seqlen_hint, std::string &message,
                            ScheduleChoice *choice) {
  const fmha_splitk_problem &problem = plan.problem;
  if (!check_problem(problem, message)) return FMHA_STATUS_INVALID_ARGUMENT;

  const int64_t batch = problem.batch;
  const int64_t max_kv = problem.max_kv_seqlen;
  const bool dense = problem.kv_layout == FMHA_KV_DENSE;
  // The lengths the plan expects: the hint where there is one.
  auto expected_len = [&](int64_t b) -> int64_t {
    return kv_seqlen_hint != nullptr && !dense ? kv_seqlen_hint[b] : max_kv;
  };

  plan.rows_per_kv_head = problem.max_q_seqlen * (problem.heads_q / problem.heads_kv);
  plan.num_ranges = 0;
  int64_t partials = 0;
  if (problem.split_k >= 1) {
    plan.schedule = FMHA_SCHEDULE_UNIFORM;
    plan.split_k = problem.split_k;
    plan.kv_chunk_size = static_cast<int32_t>(std::max<int64_t>(1, ceil_div(max_kv, problem.split_k)));
    partials = problem.split_k == 1 ? 0 : batch * problem.split_k;
  } else if (problem.flags & FMHA_FLAG_BATCH_INVARIANT) {
    plan.schedule = FMHA_SCHEDULE_FIXED_CHUNK;
    plan.kv_chunk_size = problem.kv_chunk_size;
    const int64_t chunks = fixed_chunks(max_kv, problem.kv_chunk_size);
    int64_t expected_chunks = 1;
    for (int64_t b = 0; b < batch; ++b)
      expected_chunks = std::max(expected_chunks, fixed_chunks(expected_len(b), problem.kv_chunk_size));
    plan.split_k = static_cast<int32_t>(expected_chunks);
    partials = chunks == 1 ? 0 : batch * chunks;
  } else {
    plan.schedule = FMHA_SCHEDULE_BALANCED;
    int64_t total_keys = 0;
    int64_t longest = 0;
    for (int64_t b = 0; b < batch; ++b) {
      total_keys += expected_len(b);
      longest = std::max(longest, expected_len(b));
    }
    ScheduleChoice used;
    if (choice != nullptr && choice->waves >= 0) {
      if (choice->min_piece < 1) {
        message = "schedule choice: min_piece = " + std::to_string(choice->min_piece) + " must be >= 1";
        return FMHA_STATUS_INVALID_ARGUMENT;
      }
      used = *choice;
    } else {
      used = heuristic_choice(plan, total_keys, longest);
    }
    if (choice != nullptr) *choice = used;
    const int32_t min_piece = used.min_piece;
    const int64_t ranges = ranges_for_waves(plan, total_keys, used.waves, min_piece);
    plan.kv_chunk_size = min_piece;
    plan.num_ranges = static_cast<int32_t>(ranges);
    // R ranges have R - 1 inner boundaries; each adds one piece, and a split
    // sequence's pieces all take slots: at most 2 (R - 1), and at most
    // B + R - 1 (every piece).
    partials = std::min(2 * (ranges - 1), batch + ranges - 1);
    if (batch == 0) partials = 0;
    // split_k reports the most pieces a sequence gets with expected lengths.
    int64_t most = 1;
    int64_t run_batch = -1;
    int64_t run_length = 0;
    for_each_piece(plan, expected_len, [&](const Piece &piece) {
      run_length = piece.batch == run_batch ? run_length + 1 : 1;
      run_batch = piece.batch;
      most = std::max(most, run_length);
    });
    plan.split_k = static_cast<int32_t>(most);
  }
  if (partials > kMaxInt32) {
    message = "problem.batch = " + std::to_string(batch) + " with " + std::to_string(plan.split_k) +
              " chunks per sequence needs " + std::to_string(partials) + " partial slots, more than 2147483647";
    return FMHA_STATUS_INVALID_ARGUMENT;
  }
  if (choice != nullptr && plan.schedule != FMHA_SCHEDULE_BALANCED) *choice = ScheduleChoice{-1, plan.kv_chunk_size};
  plan.max_partials = partials;
  if (!size_workspace(plan, message)) return FMHA_STATUS_INVALID_ARGUMENT;
  return FMHA_STATUS_SUCCESS;
}

int64_t max_pieces(const fmha_plan_data &plan) {
  const int64_t batch = plan.problem.batch;
  if (batch == 0) return 0;
  switch (plan.schedule) {
    case FMHA_SCHEDULE_UNIFORM:
      return batch * plan.split_k;
    case FMHA_SCHEDULE_FIXED_CHUNK:
      return batch * fixed_chunks(plan.problem.max_kv_seqlen, plan.kv_chunk_size);
    case FMHA_SCHEDULE_BALANCED:
      return batch + plan.num_ranges - 1;
    default:
      return 0;
  }
}

int64_t partition(const fmha_plan_data &plan, const int32_t *kv_len, Piece *pieces) {
  int64_t count = 0;
  for_each_piece(
      plan, [kv_len](int64_t b) -> int64_t { return kv_len[b]; }, [&](const Piece &piece) { pieces[count++] = piece; });
  return count;
}

}  // namespace fmha::core
