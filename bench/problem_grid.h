// The named benchmark grid (bench/problems.txt, which bench/peers.py reads
// too): its problems, the sequence lengths each specifies, and how the CLI
// lays out their K/V cache for the library.
#ifndef FMHA_SPLITK_BENCH_PROBLEM_GRID_H_
#define FMHA_SPLITK_BENCH_PROBLEM_GRID_H_

#include <fmha_splitk/fmha_splitk.h>

#include <cstdint>
#include <string>
#include <vector>

#include "decode_problem.h"

namespace fmha_cli {

// How a problem stores K/V: the optional last field of a problems.txt line
// (its header gives the syntax), as the library's problem fields.
struct KvQuant {
  std::string text = "none";  // the field as written
  int32_t kv_quant = FMHA_KV_QUANT_NONE;
  int32_t groups = 1;  // int4
  int32_t fp8_format = FMHA_FP8_E4M3FN;
  int32_t scale_kind = FMHA_KV_SCALE_F32;
  int32_t scale_granularity = FMHA_SCALE_PER_ROW;

  bool fp8() const { return kv_quant == FMHA_KV_QUANT_FP8; }
};

// One line of problems.txt (its header describes the fields).
struct GridProblem {
  std::string name;
  std::string kind;  // decode | paged | varlen | int4 | fp8: a label for reports
  int64_t batch = 0;
  int64_t kv_len = 0;
  int32_t heads_q = 0;
  int32_t heads_kv = 0;
  int32_t head_dim = 0;
  int64_t q_len = 1;
  int32_t page_size = 0;  // 0: contiguous K/V
  std::string lengths;    // uniform | random | equal_to:NAME
  KvQuant quant;
};

// The problems of a grid file, in its order. Throws std::runtime_error
// naming the file and line of a malformed problem or a repeated name.
std::vector<GridProblem> read_problem_grid(const std::string &path);

// A grid problem with its lengths resolved, laid out as the CLI runs it:
// PAGED when it has pages ([num_pages * page_size, Hkv, D], a block table of
// shuffled pages), else DENSE when every sequence is full ([B, L, Hkv, D]),
// else PADDED ([B, max length, Hkv, D] with kv_seqlen). Q [B, Mq, Hq, D] and
// O like it in bf16; K and V bf16, or packed as the problem's quant says
// (int4: int32 [..., Hkv, groups + D/8]; fp8: uint8 [..., Hkv, D] with scale
// tensors k_scale and v_scale shaped [..., Hkv] per row, [Hkv] per head, [1]
// per tensor).
struct BenchCase {
  GridProblem spec;
  std::vector<int32_t> kv_lengths;  // keys of each sequence
  fmha_kv_layout layout = FMHA_KV_DENSE;
  int64_t max_kv_len = 0;  // the longest sequence; rows per sequence for DENSE and PADDED
  int64_t num_pages = 0;   // PAGED: exactly the pages the sequences fill
  int64_t pages_per_seq = 0;
  // The problem this one's results are read against ("" for none): the
  // uniform batch of the same bytes for equal_to lengths; for a quantised
  // problem the bf16 one of the same shape and pages; for a bf16 paged
  // problem the one of the same shape with the largest pages.
  std::string reference;

  // Q, K and V as decode_problem.h sees them, K/V with max_kv_len rows.
  DecodeShape shape() const;
  // Rows of the K (and V) tensor: B * max_kv_len, or num_pages * page_size.
  int64_t kv_rows() const;
  // Bytes of one head of one row of K (or V): bf16 values or packed ones.
  int64_t kv_head_bytes() const;
  // Bytes of one fp8 scale element (0 without fp8), and the elements of
  // each of k_scale and v_scale: rows * Hkv, Hkv or 1.
  int64_t scale_element_bytes() const;
  int64_t scale_elements() const;
  // Bytes of K plus V (and their scales) allocated for one input set.
  double kv_allocated_bytes() const;
  // Bytes of K plus V that a run must read: the valid keys only, with
  // their scales (all of them when per head or per tensor).
  double kv_bytes() const;
  // Bytes a run must move at least: K and V (valid keys) and Q read, O written.
  double bytes_moved() const;
  // Problem for the library on `backend`, split chosen by the plan and
  // balanced by the lengths (kv_seqlen_hint points into this case).
  fmha_splitk_problem library_problem(int32_t backend) const;
  // PAGED: [B, pages_per_seq] page ids, a shuffle of every page (unused
  // entries of shorter sequences hold page 0).
  std::vector<int32_t> block_table(uint64_t seed) const;
};

// Sets the K/V quantisation fields of `problem` to `quant`'s.
void set_kv_quant(fmha_splitk_problem &problem, const KvQuant &quant);

// Resolves `spec`, whose equal_to lengths name another problem of `grid`.
// Throws std::runtime_error for a problem the CLI cannot lay out.
BenchCase resolve_case(const GridProblem &spec, const std::vector<GridProblem> &grid);

// The lengths problems.txt specifies, exactly as peers.py computes them.
std::vector<int32_t> grid_kv_lengths(const GridProblem &spec, const std::vector<GridProblem> &grid);

}  // namespace fmha_cli

#endif  // FMHA_SPLITK_BENCH_PROBLEM_GRID_H_
