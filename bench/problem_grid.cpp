#include "problem_grid.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>

#include "random_bf16.h"

namespace fmha_cli {
namespace {

constexpr double kElementBytes = 2.0;  // bf16
constexpr char kEqualTo[] = "equal_to:";
// equal_to may name a problem whose lengths are equal_to another: a longer
// chain than this is a cycle.
constexpr int kMaxEqualToChain = 16;

int64_t parse_field(const std::string &text, const char *field, int64_t min, const std::string &where) {
  char *end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < min || value > (int64_t{1} << 31) - 1) {
    throw std::runtime_error(where + ": " + field + " must be an integer in [" + std::to_string(min) +
                             ", 2^31), not '" + text + "'");
  }
  return value;
}

bool is_equal_to(const std::string &lengths) { return lengths.rfind(kEqualTo, 0) == 0; }

std::vector<std::string> split_colons(const std::string &text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, ':');) parts.push_back(part);
  if (!text.empty() && text.back() == ':') parts.emplace_back();
  return parts;
}

// `table`'s value for `word`, or an error naming the choices.
int32_t choose(const std::string &word, const std::vector<std::pair<const char *, int32_t>> &table, const char *what,
               const std::string &where) {
  std::string choices;
  for (const auto &[name, value] : table) {
    if (word == name) return value;
    choices += (choices.empty() ? "" : ", ") + std::string(name);
  }
  throw std::runtime_error(where + ": " + what + " must be one of " + choices + ", not '" + word + "'");
}

// The quant field: none | int4:gN | fp8:FORMAT:SCALE_KIND:GRANULARITY.
KvQuant parse_quant(const std::string &text, const std::string &where) {
  KvQuant quant;
  quant.text = text;
  const std::vector<std::string> parts = split_colons(text);
  if (text == "none") return quant;
  if (parts.size() == 2 && parts[0] == "int4") {
    quant.kv_quant = FMHA_KV_QUANT_INT4;
    quant.groups = choose(parts[1], {{"g1", 1}, {"g2", 2}, {"g4", 4}, {"g8", 8}}, "int4 groups", where);
    return quant;
  }
  if (parts.size() == 4 && parts[0] == "fp8") {
    quant.kv_quant = FMHA_KV_QUANT_FP8;
    quant.fp8_format =
        choose(parts[1], {{"e4m3fn", FMHA_FP8_E4M3FN}, {"e4m3fnuz", FMHA_FP8_E4M3FNUZ}}, "fp8 format", where);
    quant.scale_kind = choose(parts[2], {{"f32", FMHA_KV_SCALE_F32}, {"f16x2", FMHA_KV_SCALE_F16X2_SCALE_SHIFT}},
                              "fp8 scale kind", where);
    quant.scale_granularity =
        choose(parts[3], {{"row", FMHA_SCALE_PER_ROW}, {"head", FMHA_SCALE_PER_HEAD}, {"tensor", FMHA_SCALE_PER_TENSOR}},
               "fp8 scale granularity", where);
    return quant;
  }
  throw std::runtime_error(where + ": quant must be none, int4:gN or fp8:FORMAT:SCALE_KIND:GRANULARITY, not '" +
                           text + "'");
}

const GridProblem &find_problem(const std::vector<GridProblem> &grid, const std::string &name,
                                const std::string &from) {
  for (const GridProblem &problem : grid) {
    if (problem.name == name) return problem;
  }
  throw std::runtime_error(from + ": lengths equal_to:" + name + " names no problem of the grid");
}

std::vector<int32_t> lengths_of(const GridProblem &spec, const std::vector<GridProblem> &grid, int depth) {
  if (spec.lengths == "uniform")
    return std::vector<int32_t>(static_cast<size_t>(spec.batch), static_cast<int32_t>(spec.kv_len));
  if (spec.lengths == "random") {
    // problems.txt's generator: a 64-bit LCG, stepped before each use.
    std::vector<int32_t> lengths;
    uint64_t x = 0;
    for (int64_t b = 0; b < spec.batch; ++b) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      lengths.push_back(static_cast<int32_t>(1 + (x >> 33) % static_cast<uint64_t>(spec.kv_len)));
    }
    return lengths;
  }
  if (depth >= kMaxEqualToChain) throw std::runtime_error(spec.name + ": equal_to lengths form a cycle");
  const GridProblem &other = find_problem(grid, spec.lengths.substr(sizeof kEqualTo - 1), spec.name);
  const std::vector<int32_t> others = lengths_of(other, grid, depth + 1);
  const double total = std::accumulate(others.begin(), others.end(), 0.0);
  // Python's round() of the same double: to nearest, ties to even.
  const auto mean = static_cast<int32_t>(std::nearbyint(total / static_cast<double>(others.size())));
  return std::vector<int32_t>(static_cast<size_t>(spec.batch), mean);
}

bool same_shape(const GridProblem &a, const GridProblem &b) {
  return a.batch == b.batch && a.kv_len == b.kv_len && a.heads_q == b.heads_q && a.heads_kv == b.heads_kv &&
         a.head_dim == b.head_dim && a.q_len == b.q_len && a.lengths == b.lengths;
}

bool quantised(const GridProblem &problem) { return problem.quant.kv_quant != FMHA_KV_QUANT_NONE; }

}  // namespace

std::vector<GridProblem> read_problem_grid(const std::string &path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot read the problem grid '" + path + "'");
  std::vector<GridProblem> grid;
  std::set<std::string> names;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string word; words >> word;) fields.push_back(word);
    if (fields.empty()) continue;
    const std::string where = path + ":" + std::to_string(number);
    if (fields.size() != 10 && fields.size() != 11) {
      throw std::runtime_error(where +
                               ": expected 10 or 11 fields (name kind batch kv_len heads_q heads_kv head_dim q_len "
                               "page_size lengths [quant]), found " +
                               std::to_string(fields.size()));
    }
    GridProblem problem;
    problem.name = fields[0];
    problem.kind = fields[1];
    if (problem.kind != "decode" && problem.kind != "paged" && problem.kind != "varlen" && problem.kind != "int4" &&
        problem.kind != "fp8") {
      throw std::runtime_error(where + ": kind must be decode, paged, varlen, int4 or fp8, not '" + problem.kind +
                               "'");
    }
    if (fields.size() == 11) problem.quant = parse_quant(fields[10], where);
    // The kind is the label reports group by: it must say what the K/V is.
    const std::string quant_kind = problem.quant.kv_quant == FMHA_KV_QUANT_INT4  ? "int4"
                                   : problem.quant.kv_quant == FMHA_KV_QUANT_FP8 ? "fp8"
                                                                                 : "";
    if ((problem.kind == "int4" || problem.kind == "fp8" || !quant_kind.empty()) && problem.kind != quant_kind) {
      throw std::runtime_error(where + ": kind " + problem.kind + " with quant " + problem.quant.text +
                               " (kind int4 goes with quant int4:gN, kind fp8 with quant fp8:..., the others "
                               "with none)");
    }
    problem.batch = parse_field(fields[2], "batch", 1, where);
    problem.lengths = fields[9];
    const bool equal_to = is_equal_to(problem.lengths);
    if (!equal_to && problem.lengths != "uniform" && problem.lengths != "random") {
      throw std::runtime_error(where + ": lengths must be uniform, random or equal_to:NAME, not '" + problem.lengths +
                               "'");
    }
    problem.kv_len = parse_field(fields[3], "kv_len", equal_to ? 0 : 1, where);
    problem.heads_q = static_cast<int32_t>(parse_field(fields[4], "heads_q", 1, where));
    problem.heads_kv = static_cast<int32_t>(parse_field(fields[5], "heads_kv", 1, where));
    problem.head_dim = static_cast<int32_t>(parse_field(fields[6], "head_dim", 1, where));
    problem.q_len = parse_field(fields[7], "q_len", 1, where);
    problem.page_size = static_cast<int32_t>(parse_field(fields[8], "page_size", 0, where));
    if (!names.insert(problem.name).second)
      throw std::runtime_error(where + ": problem '" + problem.name + "' is named twice");
    grid.push_back(problem);
  }
  return grid;
}

std::vector<int32_t> grid_kv_lengths(const GridProblem &spec, const std::vector<GridProblem> &grid) {
  return lengths_of(spec, grid, 0);
}

void set_kv_quant(fmha_splitk_problem &problem, const KvQuant &quant) {
  problem.kv_quant = quant.kv_quant;
  if (quant.kv_quant == FMHA_KV_QUANT_INT4) problem.kv_quant_groups = quant.groups;
  if (quant.fp8()) {
    problem.fp8_format = quant.fp8_format;
    problem.kv_scale_kind = quant.scale_kind;
    problem.kv_scale_granularity = quant.scale_granularity;
  }
}

BenchCase resolve_case(const GridProblem &spec, const std::vector<GridProblem> &grid) {
  BenchCase c;
  c.spec = spec;
  c.kv_lengths = grid_kv_lengths(spec, grid);
  c.max_kv_len = *std::max_element(c.kv_lengths.begin(), c.kv_lengths.end());
  if (c.max_kv_len < 1) throw std::runtime_error(spec.name + ": its sequences have no keys");
  if (spec.page_size > 0) {
    c.layout = FMHA_KV_PAGED;
    for (const int32_t length : c.kv_lengths) c.num_pages += (length + spec.page_size - 1) / spec.page_size;
    c.pages_per_seq = (c.max_kv_len + spec.page_size - 1) / spec.page_size;
    if (c.num_pages > INT32_MAX) throw std::runtime_error(spec.name + ": more pages than int32 page ids hold");
  } else {
    const bool full =
        std::all_of(c.kv_lengths.begin(), c.kv_lengths.end(), [&](int32_t length) { return length == c.max_kv_len; });
    c.layout = full ? FMHA_KV_DENSE : FMHA_KV_PADDED;
  }

  if (is_equal_to(spec.lengths)) {
    c.reference = spec.lengths.substr(sizeof kEqualTo - 1);
  } else if (quantised(spec)) {
    for (const GridProblem &other : grid) {
      if (!quantised(other) && other.page_size == spec.page_size && same_shape(other, spec)) {
        c.reference = other.name;
        break;
      }
    }
  } else if (spec.page_size > 0) {
    const GridProblem *largest = &spec;
    for (const GridProblem &other : grid) {
      if (other.page_size > largest->page_size && !quantised(other) && same_shape(other, spec)) largest = &other;
    }
    if (largest != &spec) c.reference = largest->name;
  }
  return c;
}

DecodeShape BenchCase::shape() const {
  DecodeShape shape;
  shape.batch = spec.batch;
  shape.q_len = spec.q_len;
  shape.kv_len = max_kv_len;
  shape.heads_q = spec.heads_q;
  shape.heads_kv = spec.heads_kv;
  shape.head_dim = spec.head_dim;
  shape.dtype = FMHA_DTYPE_BF16;
  return shape;
}

int64_t BenchCase::kv_rows() const {
  return layout == FMHA_KV_PAGED ? num_pages * spec.page_size : spec.batch * max_kv_len;
}

int64_t BenchCase::kv_head_bytes() const {
  switch (spec.quant.kv_quant) {
    case FMHA_KV_QUANT_INT4:
      return int64_t{4} * (spec.quant.groups + spec.head_dim / 8);  // int32 words
    case FMHA_KV_QUANT_FP8:
      return spec.head_dim;
    default:
      return static_cast<int64_t>(spec.head_dim * kElementBytes);
  }
}

int64_t BenchCase::scale_element_bytes() const {
  return spec.quant.fp8() ? 4 : 0;  // float32, or an int32 of two fp16
}

int64_t BenchCase::scale_elements() const {
  if (!spec.quant.fp8()) return 0;
  switch (spec.quant.scale_granularity) {
    case FMHA_SCALE_PER_ROW:
      return kv_rows() * spec.heads_kv;
    case FMHA_SCALE_PER_HEAD:
      return spec.heads_kv;
    default:
      return 1;
  }
}

double BenchCase::kv_allocated_bytes() const {
  return 2.0 * (static_cast<double>(kv_rows()) * spec.heads_kv * static_cast<double>(kv_head_bytes()) +
                static_cast<double>(scale_elements() * scale_element_bytes()));
}

double BenchCase::kv_bytes() const {
  const double keys = std::accumulate(kv_lengths.begin(), kv_lengths.end(), 0.0);
  const double scales = spec.quant.scale_granularity == FMHA_SCALE_PER_ROW
                            ? keys * spec.heads_kv
                            : static_cast<double>(scale_elements());  // 0 without fp8
  return 2.0 * (keys * spec.heads_kv * static_cast<double>(kv_head_bytes()) +
                scales * static_cast<double>(scale_element_bytes()));
}

double BenchCase::bytes_moved() const {
  const double q_bytes = static_cast<double>(spec.batch * spec.q_len) * spec.heads_q * spec.head_dim * kElementBytes;
  return kv_bytes() + 2.0 * q_bytes;  // O is shaped like Q
}

fmha_splitk_problem BenchCase::library_problem(int32_t backend) const {
  fmha_splitk_problem problem = make_problem(shape(), backend, 0);
  set_kv_quant(problem, spec.quant);
  problem.kv_layout = layout;
  if (layout != FMHA_KV_DENSE) problem.kv_seqlen_hint = kv_lengths.data();
  if (layout == FMHA_KV_PAGED) {
    problem.page_size = spec.page_size;
    problem.num_pages = num_pages;
    problem.max_pages_per_seq = pages_per_seq;
  }
  return problem;
}

std::vector<int32_t> BenchCase::block_table(uint64_t seed) const {
  // Fisher-Yates over every page, so that a sequence's pages are scattered
  // over the cache as in a server that has run a while.
  std::vector<int32_t> pages(static_cast<size_t>(num_pages));
  std::iota(pages.begin(), pages.end(), 0);
  for (size_t i = pages.size(); i > 1; --i) {
    std::swap(pages[i - 1], pages[random_bits(seed, i) % i]);
  }
  std::vector<int32_t> table(static_cast<size_t>(spec.batch * pages_per_seq), 0);
  size_t next = 0;
  for (int64_t b = 0; b < spec.batch; ++b) {
    const int64_t used = (kv_lengths[static_cast<size_t>(b)] + spec.page_size - 1) / spec.page_size;
    for (int64_t p = 0; p < used; ++p) table[static_cast<size_t>(b * pages_per_seq + p)] = pages[next++];
  }
  return table;
}

}  // namespace fmha_cli
