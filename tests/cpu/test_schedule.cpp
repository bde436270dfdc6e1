// Unit tests of the split-K schedule (src/core/schedule.cpp, compiled into
// this executable): choose_schedule, max_pieces and partition.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/schedule.h"

namespace {

using fmha::core::choose_schedule;
using fmha::core::max_pieces;
using fmha::core::partition;
using fmha::core::Piece;
using fmha::core::uses_row_pairs;

struct Shape {
  int64_t batch = 4;
  int64_t max_q_seqlen = 1;
  int64_t max_kv_seqlen = 4096;
  int32_t groups = 1;
  int32_t heads_q = 8;
  int32_t heads_kv = 1;
  int32_t head_dim_v = 128;
  int32_t split_k = 0;
  uint32_t flags = 0;
  int32_t kv_chunk_size = 0;
  int32_t kv_layout = FMHA_KV_PADDED;
  int32_t num_workers = 8;
  int32_t dl_device_type = kDLCPU;
  double memory_bandwidth_gbps = 0.0;  // peak, GB/s (0: unknown)
};

fmha_plan_data plan_for(const Shape &shape) {
  fmha_plan_data plan{};
  fmha_splitk_problem &p = plan.problem;
  p.struct_size = sizeof p;
  p.batch = shape.batch;
  p.max_q_seqlen = shape.max_q_seqlen;
  p.max_kv_seqlen = shape.max_kv_seqlen;
  p.groups = shape.groups;
  p.heads_q = shape.heads_q;
  p.heads_kv = shape.heads_kv;
  p.head_dim_qk = shape.head_dim_v;
  p.head_dim_v = shape.head_dim_v;
  p.split_k = shape.split_k;
  p.flags = shape.flags;
  p.kv_chunk_size = shape.kv_chunk_size;
  p.kv_layout = shape.kv_layout;
  plan.device.num_workers = shape.num_workers;
  plan.device.dl_device_type = shape.dl_device_type;
  plan.device.memory_bandwidth_gbps = shape.memory_bandwidth_gbps;
  return plan;
}

// GQA 32 / 8 heads on a GPU of `num_workers` SMs (or CUs) whose memory
// gives `memory_bandwidth_gbps` (0: unknown), the shape most GPU rules here
// are stated for.
Shape gqa_on_gpu(int32_t num_workers, int32_t dl_device_type, double memory_bandwidth_gbps = 0.0) {
  Shape shape;
  shape.heads_kv = 8;
  shape.heads_q = 32;
  shape.num_workers = num_workers;
  shape.dl_device_type = dl_device_type;
  shape.memory_bandwidth_gbps = memory_bandwidth_gbps;
  return shape;
}

fmha_plan_data scheduled(const Shape &shape, const int32_t *hint = nullptr) {
  fmha_plan_data plan = plan_for(shape);
  std::string message;
  EXPECT_EQ(choose_schedule(plan, hint, message), FMHA_STATUS_SUCCESS) << message;
  return plan;
}

std::vector<Piece> pieces_of(const fmha_plan_data &plan, const std::vector<int32_t> &kv_len) {
  std::vector<Piece> pieces(static_cast<size_t>(max_pieces(plan)) + 1);
  const int64_t count = partition(plan, kv_len.data(), pieces.data());
  EXPECT_LE(count, max_pieces(plan));
  pieces.resize(static_cast<size_t>(count));
  return pieces;
}

// The invariants every schedule keeps (schedule.h): pieces ordered by
// sequence, each sequence covered exactly once and in order, slots dense
// from 0 and below max_partials, slot -1 only for a piece that is its
// sequence's whole.
void expect_valid_partition(const fmha_plan_data &plan, const std::vector<int32_t> &kv_len,
                            const std::vector<Piece> &pieces) {
  size_t index = 0;
  int32_t next_slot = 0;
  for (int32_t b = 0; b < static_cast<int32_t>(kv_len.size()); ++b) {
    const size_t first = index;
    int32_t covered = 0;
    while (index < pieces.size() && pieces[index].batch == b) {
      const Piece &piece = pieces[index];
      EXPECT_EQ(piece.kv_begin, covered) << "sequence " << b << " piece " << index;
      EXPECT_LE(piece.kv_begin, piece.kv_end);
      covered = piece.kv_end;
      if (piece.slot >= 0) {
        EXPECT_EQ(piece.slot, next_slot++);
        EXPECT_LT(piece.slot, plan.max_partials);
      }
      ++index;
    }
    ASSERT_GT(index, first) << "sequence " << b << " has no piece";
    EXPECT_EQ(covered, kv_len[static_cast<size_t>(b)]) << "sequence " << b;
    const size_t count = index - first;
    for (size_t i = first; i < index; ++i)
      EXPECT_EQ(pieces[i].slot < 0, count == 1) << "sequence " << b << ": slot -1 means the whole sequence";
    if (kv_len[static_cast<size_t>(b)] == 0 && plan.schedule != FMHA_SCHEDULE_UNIFORM) {
      EXPECT_EQ(count, 1u) << "a zero-length sequence is one empty piece";
    }
  }
  EXPECT_EQ(index, pieces.size()) << "pieces past the last sequence";
}

std::vector<int32_t> random_lengths(std::mt19937 &rng, int64_t batch, int32_t max_kv) {
  std::uniform_int_distribution<int32_t> length(0, max_kv);
  std::bernoulli_distribution empty(0.15);
  std::vector<int32_t> lengths(static_cast<size_t>(batch));
  for (int32_t &len : lengths) len = empty(rng) ? 0 : length(rng);
  return lengths;
}

TEST(Schedule, UniformMatchesReferenceChunking) {
  Shape shape;
  shape.batch = 3;
  shape.max_kv_seqlen = 1000;
  shape.split_k = 7;
  const fmha_plan_data plan = scheduled(shape);
  EXPECT_EQ(plan.schedule, FMHA_SCHEDULE_UNIFORM);
  EXPECT_EQ(plan.split_k, 7);
  EXPECT_EQ(plan.kv_chunk_size, 143);  // ceil(1000 / 7), the reference's BLOCK_N_PER_SPLIT
  EXPECT_EQ(plan.max_partials, 21);
  EXPECT_EQ(max_pieces(plan), 21);
  const std::vector<int32_t> kv_len = {1000, 500, 0};
  const std::vector<Piece> pieces = pieces_of(plan, kv_len);
  ASSERT_EQ(pieces.size(), 21u);
  expect_valid_partition(plan, kv_len, pieces);
  for (int32_t b = 0; b < 3; ++b) {
    for (int32_t s = 0; s < 7; ++s) {
      const Piece &piece = pieces[static_cast<size_t>(b) * 7 + static_cast<size_t>(s)];
      const int32_t len = kv_len[static_cast<size_t>(b)];
      EXPECT_EQ(piece.batch, b);
      EXPECT_EQ(piece.kv_begin, std::min(s * 143, len));
      EXPECT_EQ(piece.kv_end, std::min((s + 1) * 143, len));
      EXPECT_EQ(piece.slot, b * 7 + s) << "chunk s of sequence b is slot b * split_k + s";
    }
  }
}

TEST(Schedule, UniformSplitOneWritesOutputDirectly) {
  Shape shape;
  shape.split_k = 1;
  const fmha_plan_data plan = scheduled(shape);
  EXPECT_EQ(plan.schedule, FMHA_SCHEDULE_UNIFORM);
  EXPECT_EQ(plan.max_partials, 0);
  EXPECT_EQ(plan.workspace_size, 0u);
  EXPECT_EQ(plan.ws_meta_size, 0u);
  const std::vector<int32_t> kv_len = {4096, 0, 17, 1};
  const std::vector<Piece> pieces = pieces_of(plan, kv_len);
  ASSERT_EQ(pieces.size(), 4u);
  expect_valid_partition(plan, kv_len, pieces);
  for (const Piece &piece : pieces) EXPECT_EQ(piece.slot, -1);
}

TEST(Schedule, UniformMoreSplitsThanKeysLeavesEmptyChunks) {
  Shape shape;
  shape.batch = 2;
  shape.max_kv_seqlen = 3;
  shape.split_k = 5;
  const fmha_plan_data plan = scheduled(shape);
  EXPECT_EQ(plan.kv_chunk_size, 1);
  const std::vector<int32_t> kv_len = {3, 0};
  const std::vector<Piece> pieces = pieces_of(plan, kv_len);
  ASSERT_EQ(pieces.size(), 10u);
  expect_valid_partition(plan, kv_len, pieces);
  EXPECT_EQ(pieces[3].kv_begin, pieces[3].kv_end);
  EXPECT_EQ(pieces[9].kv_begin, 0);
  EXPECT_EQ(pieces[9].kv_end, 0);
}

TEST(Schedule, FixedChunkPiecesDependOnlyOnTheSequence) {
  Shape shape;
  shape.batch = 5;
  shape.flags = FMHA_FLAG_BATCH_INVARIANT;
  shape.kv_chunk_size = 256;
  const fmha_plan_data plan = scheduled(shape);
  EXPECT_EQ(plan.schedule, FMHA_SCHEDULE_FIXED_CHUNK);
  EXPECT_EQ(plan.kv_chunk_size, 256);
  EXPECT_EQ(plan.max_partials, 5 * 16);
  std::mt19937 rng(7);
  const int32_t probe = 1000;  // sequence 2 keeps this length while the rest changes
  std::vector<Piece> reference;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int32_t> kv_len = random_lengths(rng, shape.batch, 4096);
    kv_len[2] = probe;
    const std::vector<Piece> pieces = pieces_of(plan, kv_len);
    expect_valid_partition(plan, kv_len, pieces);
    std::vector<Piece> of_probe;
    for (const Piece &piece : pieces)
      if (piece.batch == 2) of_probe.push_back(piece);
    ASSERT_EQ(of_probe.size(), 4u);  // ceil(1000 / 256)
    for (size_t c = 0; c < of_probe.size(); ++c) {
      EXPECT_EQ(of_probe[c].kv_begin, static_cast<int32_t>(c) * 256);
      EXPECT_EQ(of_probe[c].kv_end, std::min(static_cast<int32_t>(c + 1) * 256, probe));
    }
    if (trial == 0) reference = of_probe;
    for (size_t c = 0; c < of_probe.size(); ++c) {
      EXPECT_EQ(of_probe[c].kv_begin, reference[c].kv_begin);
      EXPECT_EQ(of_probe[c].kv_end, reference[c].kv_end);
    }
  }
  // A sequence that fits in one chunk writes O directly.
  const std::vector<int32_t> short_lengths = {256, 1, 0, 255, 100};
  for (const Piece &piece : pieces_of(plan, short_lengths)) EXPECT_EQ(piece.slot, -1);
}

TEST(Schedule, FixedChunkWithOneChunkNeedsNoWorkspace) {
  Shape shape;
  shape.max_kv_seqlen = 200;
  shape.flags = FMHA_FLAG_BATCH_INVARIANT;
  shape.kv_chunk_size = 256;
  const fmha_plan_data plan = scheduled(shape);
  EXPECT_EQ(plan.max_partials, 0);
  EXPECT_EQ(plan.workspace_size, 0u);
  EXPECT_EQ(plan.split_k, 1);
}

TEST(Schedule, ForcedSplitTakesPrecedenceOverBatchInvariant) {
  Shape shape;
  shape.split_k = 4;
  shape.flags = FMHA_FLAG_BATCH_INVARIANT;
  shape.kv_chunk_size = 256;
  EXPECT_EQ(scheduled(shape).schedule, FMHA_SCHEDULE_UNIFORM);
}

TEST(Schedule, BalancedSplitsALoneLongSequenceEvenly) {
  Shape shape;
  shape.batch = 1;
  shape.max_kv_seqlen = 100000;
  shape.num_workers = 8;
  const fmha_plan_data plan = scheduled(shape);
  EXPECT_EQ(plan.schedule, FMHA_SCHEDULE_BALANCED);
  EXPECT_GT(plan.num_ranges, 1);
  EXPECT_GE(static_cast<int64_t>(plan.num_ranges) * shape.groups * shape.heads_kv, shape.num_workers)
      << "ranges x K/V heads must fill the workers";
  EXPECT_EQ(plan.split_k, plan.num_ranges);
  const std::vector<int32_t> kv_len = {100000};
  const std::vector<Piece> pieces = pieces_of(plan, kv_len);
  expect_valid_partition(plan, kv_len, pieces);
  ASSERT_EQ(static_cast<int64_t>(pieces.size()), plan.num_ranges);
  const int32_t range_len = (100000 + plan.num_ranges - 1) / plan.num_ranges;
  for (const Piece &piece : pieces) EXPECT_LE(piece.kv_end - piece.kv_begin, range_len);
  EXPECT_GE(pieces.back().kv_end - pieces.back().kv_begin, range_len - plan.num_ranges);
}

TEST(Schedule, BalancedCutsTheConcatenationIntoEqualRanges) {
  Shape shape;
  shape.batch = 6;
  shape.max_kv_seqlen = 8192;
  shape.num_workers = 16;
  const fmha_plan_data plan = scheduled(shape);
  ASSERT_EQ(plan.schedule, FMHA_SCHEDULE_BALANCED);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<int32_t> kv_len = random_lengths(rng, shape.batch, 8192);
    const std::vector<Piece> pieces = pieces_of(plan, kv_len);
    expect_valid_partition(plan, kv_len, pieces);
    int64_t total = 0;
    for (int32_t len : kv_len) total += len;
    const int64_t ranges = std::min<int64_t>(plan.num_ranges, std::max<int64_t>(1, total / plan.kv_chunk_size));
    const int64_t range_len = (total + ranges - 1) / ranges;
    // Every piece lies inside one range of the concatenated keys, and each
    // range ends exactly at a piece boundary.
    std::vector<int64_t> seq_start(kv_len.size(), 0);
    for (size_t b = 1; b < kv_len.size(); ++b) seq_start[b] = seq_start[b - 1] + kv_len[b - 1];
    for (const Piece &piece : pieces) {
      if (piece.kv_begin == piece.kv_end) continue;
      const int64_t begin = seq_start[static_cast<size_t>(piece.batch)] + piece.kv_begin;
      const int64_t end = seq_start[static_cast<size_t>(piece.batch)] + piece.kv_end;
      EXPECT_EQ(begin / range_len, (end - 1) / range_len) << "piece crosses a range boundary";
      if (piece.slot >= 0 && piece.kv_end < kv_len[static_cast<size_t>(piece.batch)]) {
        EXPECT_EQ(end % range_len, 0) << "a sequence is split only at a range boundary";
      }
    }
    EXPECT_LE(static_cast<int64_t>(pieces.size()), shape.batch + ranges - 1);
  }
}

TEST(Schedule, BalancedKeepsRangesAboveTheMinimumPieceLength) {
  Shape shape;
  shape.batch = 1;
  shape.max_kv_seqlen = 65536;
  shape.num_workers = 64;
  const fmha_plan_data plan = scheduled(shape);
  ASSERT_EQ(plan.schedule, FMHA_SCHEDULE_BALANCED);
  for (int32_t len : {1, 63, 64, 200, 1000, 5000}) {
    const std::vector<int32_t> kv_len = {len};
    const std::vector<Piece> pieces = pieces_of(plan, kv_len);
    expect_valid_partition(plan, kv_len, pieces);
    for (size_t i = 0; i + 1 < pieces.size(); ++i) {
      EXPECT_GE(pieces[i].kv_end - pieces[i].kv_begin, plan.kv_chunk_size) << "length " << len;
    }
    if (len < 2 * plan.kv_chunk_size) {
      EXPECT_EQ(pieces.size(), 1u) << "length " << len;
    }
  }
}

// On a GPU, a batch of short sequences whose items fit one wave of resident
// CTAs (3 per SM at head dim 128) runs unsplit.
TEST(Schedule, BalancedDoesNotSplitWhenTheBatchFillsOneWave) {
  Shape shape = gqa_on_gpu(132, kDLCUDA);
  shape.batch = 32;
  const fmha_plan_data plan = scheduled(shape);
  EXPECT_EQ(plan.schedule, FMHA_SCHEDULE_BALANCED);
  EXPECT_EQ(plan.num_ranges, 1);
  EXPECT_EQ(plan.max_partials, 0);
  EXPECT_EQ(plan.workspace_size, 0u);
  EXPECT_EQ(plan.split_k, 1);
  EXPECT_EQ(plan.kv_chunk_size, 256) << "GPU minimum piece length";
}

// ... but splits into one full wave when the items overflow it (B 64 x 8
// heads > 3 x 132), when the sequences are long, and at head dim 256 aims
// at 3 waves too (on a GPU whose memory feeds each SM 30 GB/s or more:
// an H200's 4.8 TB/s over 132 SMs).
TEST(Schedule, BalancedSplitsPastOneWaveOrLongSequences) {
  Shape shape = gqa_on_gpu(132, kDLCUDA, 4800.0);
  shape.batch = 64;
  const fmha_plan_data wide = scheduled(shape);
  EXPECT_EQ(wide.num_ranges, 3 * 132 / 8);
  shape.batch = 32;
  shape.max_kv_seqlen = 16384;
  const fmha_plan_data long_sequences = scheduled(shape);
  EXPECT_EQ(long_sequences.num_ranges, 3 * 132 / 8);
  shape.batch = 16;
  shape.max_kv_seqlen = 8192;
  shape.head_dim_v = 256;
  const fmha_plan_data d256 = scheduled(shape);
  EXPECT_EQ(d256.num_ranges, 3 * 132 / 8);
}

// Where the memory feeds each SM less than 30 GB/s (an H100's 3.35 TB/s
// over 132 SMs), a uniform batch whose 16-row CTAs fill whole layers of
// the SMs, 90% or more, all resident (at most 3 per SM to head dim 128, 2
// at 256), stays unsplit however long its sequences; past one resident
// wave, below 90% of a layer, with uneven expected lengths, or with
// faster memory it splits as before.
TEST(Schedule, SlowMemoryKeepsBatchesFillingWholeLayersUnsplit) {
  Shape shape = gqa_on_gpu(132, kDLCUDA, 3352.0);
  const auto ranges = [&](int64_t batch, int64_t keys) {
    shape.batch = batch;
    shape.max_kv_seqlen = keys;
    return scheduled(shape).num_ranges;
  };
  EXPECT_EQ(ranges(32, 16384), 1) << "256 CTAs: 97% of 2 layers";
  EXPECT_EQ(ranges(16, 8192), 1) << "128 CTAs: 97% of 1 layer";
  EXPECT_GT(ranges(64, 16384), 1) << "512 CTAs: past 3 per SM";
  EXPECT_GT(ranges(8, 32768), 1) << "64 CTAs: 48% of 1 layer";
  EXPECT_GT(ranges(40, 16384), 1) << "320 CTAs: 81% of 3 layers";
  shape.max_q_seqlen = 4;  // 16 rows per K/V head: still one CTA each
  EXPECT_EQ(ranges(32, 8192), 1) << "Mq 4: 256 CTAs";
  shape.max_q_seqlen = 8;  // 32 rows: row pairs, whose own rule splits 64 of them
  EXPECT_GT(ranges(8, 8192), 1);
  shape.max_q_seqlen = 1;
  shape.head_dim_v = 256;
  EXPECT_EQ(ranges(16, 8192), 1) << "D 256: 128 CTAs, 2 resident per SM";
  EXPECT_GT(ranges(64, 8192), 1) << "D 256: 512 CTAs, past 2 per SM";
  shape.head_dim_v = 128;
  shape.memory_bandwidth_gbps = 4800.0;
  EXPECT_GT(ranges(32, 16384), 1) << "faster memory: split as before";
  shape.memory_bandwidth_gbps = 3352.0;
  // A hint of uneven lengths (a padded batch): the CTAs are not equal.
  shape.batch = 32;
  shape.max_kv_seqlen = 16384;
  std::vector<int32_t> hint(32, 16384);
  EXPECT_EQ(scheduled(shape, hint.data()).num_ranges, 1);
  hint[0] = 1000;
  EXPECT_GT(scheduled(shape, hint.data()).num_ranges, 1);
}

// ... except a small batch (at most 1.5 MiB of K/V per SM) whose 256-key
// pieces would make more than 2 CTAs per SM: 2 CTAs per SM, row tiles
// counted, with pieces of at least 512 keys.
TEST(Schedule, BalancedGivesSmallBatchesTwoCtasPerSmOfLongerPieces) {
  Shape shape;
  shape.batch = 1;
  shape.max_kv_seqlen = 16384;
  shape.heads_q = 64;
  shape.heads_kv = 8;
  shape.num_workers = 132;
  shape.dl_device_type = kDLCUDA;
  const fmha_plan_data one = scheduled(shape);
  EXPECT_EQ(one.num_ranges, 16384 / 512) << "2 x 132 / 8 = 33 ranges, but none shorter than 512 keys";
  EXPECT_EQ(one.kv_chunk_size, 512);
  shape.batch = 8;
  shape.max_kv_seqlen = 4096;
  shape.heads_q = 32;
  EXPECT_EQ(scheduled(shape).num_ranges, 2 * 132 / 8);
  // MQA: 32 query heads over one K/V head are one row pair (a CTA of 32
  // rows, 2 resident per SM), so the 256-key pieces of B 4 L 16384 make
  // 256 CTAs, at most 2 per SM: they stay.
  shape.batch = 4;
  shape.max_kv_seqlen = 16384;
  shape.heads_kv = 1;
  const fmha_plan_data mqa = scheduled(shape);
  EXPECT_EQ(mqa.num_ranges, 4 * 16384 / 256);
  EXPECT_EQ(mqa.kv_chunk_size, 256);
  // A larger MQA batch: one wave of pairs is 2 per SM (not 3).
  shape.batch = 32;
  shape.max_kv_seqlen = 8192;
  EXPECT_EQ(scheduled(shape).num_ranges, 2 * 132);
  shape.batch = 4;
  // 256-key pieces that make at most 2 CTAs per SM stay (B 4 L 2048).
  shape.heads_kv = 8;
  shape.max_kv_seqlen = 2048;
  const fmha_plan_data short_total = scheduled(shape);
  EXPECT_EQ(short_total.num_ranges, 4 * 2048 / 256);
  EXPECT_EQ(short_total.kv_chunk_size, 256);
  // More work per SM keeps 3 waves of 256-key pieces: B 4 L 16384 at head
  // dim 256 is 4 MiB per SM.
  shape.max_kv_seqlen = 16384;
  shape.head_dim_v = 256;
  const fmha_plan_data large = scheduled(shape);
  EXPECT_EQ(large.num_ranges, 3 * 132 / 8);
  EXPECT_EQ(large.kv_chunk_size, 256);
}

// The CUDA plugin's row pairs (32 query rows per CTA): for more than 16
// query rows per K/V head, native K/V up to head dim 128, not MLA; batch
// invariant plans count the rows of one query only (max_q_seqlen is the
// batch's longest, and the pair kernel rounds in another order).
TEST(Schedule, RowPairsForMoreThanSixteenRowsPerKvHead) {
  Shape shape;
  shape.dl_device_type = kDLCUDA;
  shape.heads_q = 32;
  shape.heads_kv = 1;
  EXPECT_TRUE(uses_row_pairs(plan_for(shape)));  // MQA: 32 rows
  shape.heads_kv = 8;
  EXPECT_FALSE(uses_row_pairs(plan_for(shape)));  // GQA 4 rows
  shape.max_q_seqlen = 4;
  EXPECT_FALSE(uses_row_pairs(plan_for(shape)));  // 16 rows: one tile
  shape.max_q_seqlen = 5;
  EXPECT_TRUE(uses_row_pairs(plan_for(shape)));
  shape.flags = FMHA_FLAG_BATCH_INVARIANT;
  EXPECT_FALSE(uses_row_pairs(plan_for(shape)));
  shape.heads_kv = 1;
  EXPECT_TRUE(uses_row_pairs(plan_for(shape)));  // 32 rows per query
  shape.flags = 0;
  fmha_plan_data plan = plan_for(shape);
  plan.problem.kv_quant = FMHA_KV_QUANT_FP8;
  EXPECT_FALSE(uses_row_pairs(plan));
  plan = plan_for(shape);
  plan.problem.flags = FMHA_FLAG_V_FROM_K;
  EXPECT_FALSE(uses_row_pairs(plan));
  shape.head_dim_v = 256;
  EXPECT_FALSE(uses_row_pairs(plan_for(shape)));
  shape.head_dim_v = 128;
  shape.dl_device_type = kDLROCM;
  EXPECT_FALSE(uses_row_pairs(plan_for(shape)));
}

// Row pairs that already fill whole waves of pair CTAs (2 per SM), 90% or
// more, stay unsplit: Mq 16 of GQA 32/8 at B 32 is 32 x 8 x 2 = 512 pair
// CTAs, 97% of 2 waves of 264. Fewer than one wave (MQA B 32: 32 CTAs) or
// a wave much less full still split.
TEST(Schedule, RowPairsFillingWholeWavesStayUnsplit) {
  Shape shape;
  shape.dl_device_type = kDLCUDA;
  shape.num_workers = 132;
  shape.batch = 32;
  shape.max_kv_seqlen = 8192;
  shape.heads_q = 32;
  shape.heads_kv = 8;
  shape.max_q_seqlen = 16;
  ASSERT_TRUE(uses_row_pairs(plan_for(shape)));
  EXPECT_EQ(scheduled(shape).num_ranges, 1) << "512 pair CTAs: 97% of 2 waves";
  shape.batch = 128;
  shape.max_kv_seqlen = 2048;
  EXPECT_EQ(scheduled(shape).num_ranges, 1) << "2048 pair CTAs: 97% of 8 waves";
  shape.batch = 20;
  shape.max_kv_seqlen = 8192;
  EXPECT_GT(scheduled(shape).num_ranges, 1) << "320 pair CTAs: 61% of 2 waves";
  shape.batch = 32;
  shape.max_q_seqlen = 1;
  shape.heads_kv = 1;
  EXPECT_GT(scheduled(shape).num_ranges, 1) << "MQA: 32 pair CTAs, an eighth of a wave";
}

// AMD GPUs start from the reference operator's HIP split count, as a
// balanced partition of about B x split_k ranges with 64-key pieces: B 1
// L 32768 over 8 K/V heads splits 128 ways (the reference's count) rounded
// up to whole waves of the CUs; B 128 L 8192 is not split.
TEST(Schedule, BalancedOnAmdGpusStartsFromTheReferenceSplitCount) {
  Shape shape = gqa_on_gpu(304, kDLROCM);
  shape.batch = 1;
  shape.max_kv_seqlen = 32768;
  const fmha_plan_data one = scheduled(shape);
  EXPECT_EQ(one.schedule, FMHA_SCHEDULE_BALANCED);
  EXPECT_EQ(one.kv_chunk_size, 64);
  EXPECT_GE(one.num_ranges, 128);
  EXPECT_LE(one.num_ranges, 128 + 304 / 8);
  shape.batch = 64;
  shape.max_kv_seqlen = 4096;
  const fmha_plan_data batch = scheduled(shape);
  EXPECT_GE(batch.num_ranges, 64 * 2);
  EXPECT_LE(batch.num_ranges, 64 * 2 + 304 / 8);
  shape.batch = 128;
  shape.max_kv_seqlen = 8192;
  const fmha_plan_data large = scheduled(shape);
  EXPECT_EQ(large.num_ranges, 1);
  EXPECT_EQ(large.max_partials, 0);
}

TEST(Schedule, BalancedHintSplitsTheLongSequenceOfAnUnevenBatch) {
  Shape shape;
  shape.batch = 16;
  shape.max_kv_seqlen = 131072;
  shape.num_workers = 8;
  std::vector<int32_t> hint(16, 128);
  hint[5] = 131072;
  const fmha_plan_data even = scheduled(shape);
  const fmha_plan_data uneven = scheduled(shape, hint.data());
  EXPECT_EQ(even.num_ranges, 1) << "16 equal sequences fill 8 workers";
  EXPECT_GT(uneven.num_ranges, 1);
  EXPECT_GT(uneven.split_k, 1);
  const std::vector<Piece> pieces = pieces_of(uneven, hint);
  expect_valid_partition(uneven, hint, pieces);
  int32_t pieces_of_long = 0;
  for (const Piece &piece : pieces) pieces_of_long += piece.batch == 5;
  EXPECT_EQ(pieces_of_long, uneven.split_k) << "split_k reports the most pieces of a hinted sequence";
  // Runs may pass other lengths and stay correct.
  const std::vector<int32_t> other(16, 131072);
  expect_valid_partition(uneven, other, pieces_of(uneven, other));
}

TEST(Schedule, RandomPlansKeepTheInvariants) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> small(1, 12);
  for (int trial = 0; trial < 300; ++trial) {
    Shape shape;
    shape.batch = small(rng) - 1;
    shape.max_kv_seqlen = std::uniform_int_distribution<int32_t>(0, 20000)(rng);
    shape.max_q_seqlen = small(rng);
    shape.heads_kv = 1 << (small(rng) % 3);
    shape.heads_q = shape.heads_kv * (1 << (small(rng) % 3));
    shape.groups = 1 + small(rng) % 2;
    shape.num_workers = small(rng) * 11;
    shape.dl_device_type = trial % 2 ? kDLCPU : kDLCUDA;
    switch (trial % 3) {
      case 0:
        shape.split_k = small(rng);
        break;
      case 1:
        shape.flags = FMHA_FLAG_BATCH_INVARIANT;
        shape.kv_chunk_size = 64 << (small(rng) % 4);
        break;
      default:
        break;
    }
    const fmha_plan_data plan = scheduled(shape);
    for (int run = 0; run < 5; ++run) {
      const std::vector<int32_t> kv_len = random_lengths(rng, shape.batch, static_cast<int32_t>(shape.max_kv_seqlen));
      const std::vector<Piece> pieces = pieces_of(plan, kv_len);
      expect_valid_partition(plan, kv_len, pieces);
      const std::vector<Piece> again = pieces_of(plan, kv_len);
      ASSERT_EQ(again.size(), pieces.size());
      for (size_t i = 0; i < pieces.size(); ++i) {
        EXPECT_EQ(again[i].kv_begin, pieces[i].kv_begin) << "partition must be deterministic";
        EXPECT_EQ(again[i].slot, pieces[i].slot);
      }
    }
  }
}

// The GPU kernels that cut their own range (PieceSource::kInline) find a
// range's pieces with find_span_ends over each thread's share of the
// batch, after block-wide prefix sums of the lengths and slots: simulated
// here thread by thread for several block sizes, the ranges' pieces,
// concatenated, must be partition()'s, piece for piece and slot for slot,
// with 64-bit keys and with the kernels' 32-bit ones.
template <class Key>
void expect_range_spans_give_the_partition(uint32_t seed) {
  using fmha::core::BalancedCut;
  using fmha::core::RangeSpan;
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 400; ++trial) {
    fmha_plan_data plan = plan_for(Shape{});
    plan.schedule = FMHA_SCHEDULE_BALANCED;
    plan.problem.batch = std::uniform_int_distribution<int32_t>(1, trial % 4 == 0 ? 300 : 12)(rng);
    plan.num_ranges = std::uniform_int_distribution<int32_t>(1, 40)(rng);
    plan.kv_chunk_size = std::uniform_int_distribution<int32_t>(1, 600)(rng);
    const int32_t max_kv = trial % 5 == 0 ? 7 : 5000;
    std::vector<int32_t> kv_len = random_lengths(rng, plan.problem.batch, max_kv);
    if (trial % 7 == 0) kv_len.back() = 0;  // empty sequences at the very end
    std::vector<Piece> expected(static_cast<size_t>(plan.problem.batch + plan.num_ranges));
    expected.resize(static_cast<size_t>(partition(plan, kv_len.data(), expected.data())));

    const auto len_of = [&](int32_t b) -> Key { return kv_len[static_cast<size_t>(b)]; };
    Key total = 0;
    for (int32_t len : kv_len) total += len;
    const BalancedCut<Key> cut = fmha::core::balanced_cut<Key>(total, plan.num_ranges, plan.kv_chunk_size);
    const auto batch = static_cast<int32_t>(plan.problem.batch);
    for (const int32_t threads : {1, 3, 32, 128}) {
      const int32_t per = (batch + threads - 1) / threads;
      // Each thread's share [b0, b1) and its exclusive prefixes.
      std::vector<Key> starts, slots;
      Key start = 0, slot = 0;
      for (int32_t t = 0; t < threads; ++t) {
        const int32_t b0 = std::min(t * per, batch), b1 = std::min(b0 + per, batch);
        starts.push_back(start);
        slots.push_back(slot);
        for (int32_t b = b0; b < b1; ++b) start += kv_len[static_cast<size_t>(b)];
        slot += fmha::core::sequences_slots(cut, b0, b1, starts.back(), len_of);
      }
      std::vector<Piece> found;
      for (Key r = 0; r < plan.num_ranges + 1; ++r) {
        RangeSpan<Key> span{};
        span.first_batch = 0;
        span.last_batch = -1;
        for (int32_t t = 0; t < threads; ++t) {
          const int32_t b0 = std::min(t * per, batch), b1 = std::min(b0 + per, batch);
          fmha::core::find_span_ends(cut, r, batch, b0, b1, starts[static_cast<size_t>(t)],
                                     static_cast<int32_t>(slots[static_cast<size_t>(t)]), len_of, &span);
        }
        for (int32_t i = 0; i <= span.last_batch - span.first_batch; ++i) {
          const Piece piece = fmha::core::span_piece(cut, r, span, i, len_of);
          if (i > 0 && piece.batch != span.last_batch) {
            EXPECT_EQ(piece.slot, -1) << "a sequence inside a range is uncut";
          }
          found.push_back(piece);
        }
      }
      ASSERT_EQ(found.size(), expected.size()) << "trial " << trial << ", " << threads << " threads";
      for (size_t i = 0; i < found.size(); ++i) {
        EXPECT_EQ(found[i].batch, expected[i].batch) << "trial " << trial << " piece " << i;
        EXPECT_EQ(found[i].kv_begin, expected[i].kv_begin) << "trial " << trial << " piece " << i;
        EXPECT_EQ(found[i].kv_end, expected[i].kv_end) << "trial " << trial << " piece " << i;
        EXPECT_EQ(found[i].slot, expected[i].slot) << "trial " << trial << " piece " << i;
      }
    }
  }
}

TEST(Schedule, BalancedRangeSpansGiveThePartitionsPieces) {
  expect_range_spans_give_the_partition<int64_t>(11);
  expect_range_spans_give_the_partition<int32_t>(12);
}

TEST(Schedule, WorkspaceRegionsAreAlignedAndDisjoint) {
  Shape shape;
  shape.batch = 3;
  shape.max_q_seqlen = 5;
  shape.groups = 2;
  shape.heads_q = 6;
  shape.heads_kv = 3;
  shape.head_dim_v = 72;
  shape.split_k = 3;
  const fmha_plan_data plan = scheduled(shape);
  EXPECT_EQ(plan.rows_per_kv_head, 5 * 2);
  const size_t slots = static_cast<size_t>(plan.max_partials);
  const size_t lse_bytes = slots * 2 * 6 * 5 * sizeof(float);
  const size_t o_bytes = lse_bytes * 72;
  const size_t meta_bytes = static_cast<size_t>(max_pieces(plan)) * sizeof(Piece);
  EXPECT_EQ(plan.ws_meta_size, meta_bytes);
  for (size_t offset : {plan.ws_partial_o_offset, plan.ws_partial_lse_offset, plan.ws_meta_offset, plan.workspace_size})
    EXPECT_EQ(offset % 256, 0u);
  EXPECT_GE(plan.ws_partial_lse_offset, plan.ws_partial_o_offset + o_bytes);
  EXPECT_GE(plan.ws_meta_offset, plan.ws_partial_lse_offset + lse_bytes);
  EXPECT_GE(plan.workspace_size, plan.ws_meta_offset + plan.ws_meta_size);
  EXPECT_LT(plan.workspace_size, plan.ws_meta_offset + plan.ws_meta_size + 256);
}

TEST(Schedule, BatchZeroNeedsNothing) {
  Shape shape;
  shape.batch = 0;
  for (int32_t split_k : {0, 1, 4}) {
    shape.split_k = split_k;
    const fmha_plan_data plan = scheduled(shape);
    EXPECT_EQ(max_pieces(plan), 0);
    EXPECT_EQ(plan.workspace_size, 0u);
    EXPECT_EQ(partition(plan, nullptr, nullptr), 0);
  }
}

TEST(Schedule, WorkspaceOverflowIsRefused) {
  Shape shape;
  shape.batch = 1000;
  shape.split_k = 1000;
  shape.max_q_seqlen = int64_t{1} << 30;
  shape.heads_q = 1 << 30;
  shape.heads_kv = 1;
  shape.head_dim_v = 512;
  fmha_plan_data plan = plan_for(shape);
  std::string message;
  EXPECT_EQ(choose_schedule(plan, nullptr, message), FMHA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(message.find("overflows"), std::string::npos) << message;
}

TEST(Schedule, TooManyPartialSlotsAreRefused) {
  Shape shape;
  shape.batch = int64_t{1} << 30;
  shape.split_k = 8;
  fmha_plan_data plan = plan_for(shape);
  std::string message;
  EXPECT_EQ(choose_schedule(plan, nullptr, message), FMHA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(message.find("partial slots"), std::string::npos) << message;
}

}  // namespace
