// Autotuning and the tuning cache (see tuning.h).
#include "core/tuning.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "backends/cpu/elements.h"
#include "core/error.h"
#include "core/names.h"
#include "core/plan.h"
#include "core/registry.h"
#include "core/run_views.h"

namespace fmha::core {
namespace {

// ------------------------------------------------------------ candidates --

// The grid autotune searches. Waves: 0 is one range (nothing split by the
// partition); the heuristic uses 3 or 2 (GPU; small batches 2 / row tiles)
// and 2 (CPU). The shortest piece trades parallelism against the partial
// rows a split writes and merges; the heuristic uses 256 keys (GPU; 512
// for small batches) and 64 (CPU). GPU pieces of 64 keys (one tile of the
// D <= 128 kernels) are tried last: since the block-per-row combine the
// merge of many short pieces costs less (docs/performance.md).
constexpr int32_t kGpuWaves[] = {0, 1, 2, 3, 4, 6, 8};
constexpr int32_t kGpuMinPieces[] = {256, 128, 512, 64};
constexpr int32_t kCpuWaves[] = {0, 1, 2, 4, 8};
constexpr int32_t kCpuMinPieces[] = {64, 256};

int64_t expected_total_keys(const fmha_plan_data &data, const std::vector<int32_t> &hint) {
  const bool use_hint = !hint.empty() && data.problem.kv_layout != FMHA_KV_DENSE;
  if (!use_hint) return data.problem.batch * data.problem.max_kv_seqlen;
  int64_t total = 0;
  for (const int32_t length : hint) total += length;
  return total;
}

// Candidates that run alike for the expected lengths share this key: the
// schedule, the planned ranges and the ranges a run of the expected total
// actually uses (the minimum piece matters only through the latter).
std::array<int64_t, 3> behaviour_key(const fmha_plan_data &data, int64_t total_keys) {
  if (data.schedule != FMHA_SCHEDULE_BALANCED) return {data.schedule, 0, 0};
  return {data.schedule, data.num_ranges, effective_ranges(data, total_keys)};
}

void compute_candidates(fmha_splitk_plan_s &plan) {
  std::vector<Candidate> &candidates = plan.candidates;
  // Candidate 0: the heuristic, re-planned from the problem so that a plan
  // running a cached winner still lists it first.
  fmha_plan_data base;
  std::memset(&base, 0, sizeof(base));
  base.problem = plan.data.problem;
  base.device = plan.data.device;
  {
    Candidate heuristic;
    heuristic.data = base;
    plan_with_choice(heuristic.data, plan.backend, plan.kv_seqlen_hint, heuristic.choice);
    candidates.push_back(heuristic);
  }
  if (candidates[0].data.schedule != FMHA_SCHEDULE_BALANCED) return;

  const int64_t total_keys = expected_total_keys(base, plan.kv_seqlen_hint);
  std::vector<std::array<int64_t, 3>> seen = {behaviour_key(candidates[0].data, total_keys)};
  const bool cpu = base.device.dl_device_type == kDLCPU;
  const int32_t *waves_begin = cpu ? std::begin(kCpuWaves) : std::begin(kGpuWaves);
  const int32_t *waves_end = cpu ? std::end(kCpuWaves) : std::end(kGpuWaves);
  const int32_t *pieces_begin = cpu ? std::begin(kCpuMinPieces) : std::begin(kGpuMinPieces);
  const int32_t *pieces_end = cpu ? std::end(kCpuMinPieces) : std::end(kGpuMinPieces);
  for (const int32_t *piece = pieces_begin; piece != pieces_end; ++piece) {
    for (const int32_t *waves = waves_begin; waves != waves_end; ++waves) {
      Candidate candidate;
      candidate.data = base;
      candidate.choice = ScheduleChoice{*waves, *piece};
      try {
        plan_with_choice(candidate.data, plan.backend, plan.kv_seqlen_hint, candidate.choice);
      } catch (const Error &error) {
        // A partition the backend cannot launch (a grid too large) is no
        // candidate; anything else is a real failure.
        if (error.status() != FMHA_STATUS_NOT_SUPPORTED && error.status() != FMHA_STATUS_INVALID_ARGUMENT) throw;
        continue;
      }
      const std::array<int64_t, 3> key = behaviour_key(candidate.data, total_keys);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      candidates.push_back(candidate);
    }
  }
}

// ------------------------------------------------------------------ keys --

int32_t ceil_log2(int64_t value) {
  int32_t log2 = 0;
  while (log2 < 62 && (int64_t{1} << log2) < value) ++log2;
  return log2;
}

}  // namespace

TuningKey make_tuning_key(const fmha_plan_data &plan, const std::vector<int32_t> &kv_seqlen_hint) {
  const fmha_splitk_problem &p = plan.problem;
  const int64_t total_keys = expected_total_keys(plan, kv_seqlen_hint);
  const int64_t mean_length = p.batch > 0 ? (total_keys + p.batch - 1) / p.batch : 0;
  const uint32_t kernel_flags = p.flags & (FMHA_FLAG_V_FROM_K | FMHA_FLAG_FP8_QK | FMHA_FLAG_FP8_PV | FMHA_FLAG_CHECKED);
  TuningKey key;
  key.fields = {p.backend,
                plan.device.compute_capability,
                plan.device.num_workers,
                plan.device.driver_version,
                p.q_dtype,
                p.kv_dtype,
                p.o_dtype,
                p.kv_quant,
                p.kv_quant_groups,
                p.fp8_format,
                p.kv_scale_kind,
                p.kv_scale_granularity,
                p.q_scale_granularity,
                p.head_dim_qk,
                p.head_dim_v,
                p.q_layout,
                p.kv_layout,
                p.page_size,
                p.mask,
                p.has_bias != 0,
                p.has_sinks != 0,
                p.softcap > 0.f,
                static_cast<int32_t>(kernel_flags),
                static_cast<int32_t>(std::min<int64_t>(p.max_q_seqlen, std::numeric_limits<int32_t>::max())),
                p.groups,
                p.heads_q,
                p.heads_kv,
                ceil_log2(p.batch),
                ceil_log2(mean_length),
                0,
                0};
  static_assert(TuningKey::kFields == 31, "key fields listed above");
  std::memcpy(key.device_name.data(), plan.device.name, std::min(sizeof(plan.device.name), key.device_name.size()));
  key.device_name.back() = '\0';
  return key;
}

// ----------------------------------------------------------------- cache --

namespace {

constexpr char kMagic[8] = {'F', 'M', 'H', 'A', 'T', 'U', 'N', 'E'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 * 4;
constexpr size_t kEntryBytes = TuningKey::kFields * 4 + 96 + 4 * 4;
constexpr size_t kChecksumBytes = 8;
constexpr int32_t kMaxWaves = 64;
constexpr int32_t kMaxMinPiece = 1 << 20;

std::mutex cache_lock;
std::map<TuningKey, TunedEntry> &cache_map() {
  static std::map<TuningKey, TunedEntry> map;
  return map;
}

uint64_t fnv1a(const uint8_t *bytes, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

void put_u32(std::vector<uint8_t> &out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}
void put_u64(std::vector<uint8_t> &out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}
void put_f32(std::vector<uint8_t> &out, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  put_u32(out, bits);
}
uint32_t get_u32(const uint8_t *bytes) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= static_cast<uint32_t>(bytes[i]) << (8 * i);
  return value;
}
uint64_t get_u64(const uint8_t *bytes) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  return value;
}
float get_f32(const uint8_t *bytes) {
  const uint32_t bits = get_u32(bytes);
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

std::string version_string(uint32_t code) {
  return cat(code / 10000, ".", code / 100 % 100, ".", code % 100);
}

std::string describe_device(const TuningKey &key) {
  return cat(backend_kind_name(key.fields[0]), " device '", key.device_name.data(), "' (", key.fields[2],
             " workers, compute capability ", key.fields[1], ", driver ", key.fields[3], ")");
}

// The devices this process has, as the first four key fields and the name.
struct PresentDevice {
  std::array<int32_t, 4> identity;
  std::array<char, 96> name;
};

std::vector<PresentDevice> present_devices() {
  std::vector<PresentDevice> devices;
  for (const BackendCandidate &backend : Registry::instance().candidates()) {
    if (!backend.available || backend.table == nullptr) continue;
    for (int32_t id = 0; id < backend.device_count; ++id) {
      fmha_device_props props;
      std::memset(&props, 0, sizeof(props));
      BackendMessage message;
      if (backend.table->device_props(id, &props, message.msg()) != FMHA_STATUS_SUCCESS) continue;
      PresentDevice device{};
      device.identity = {backend.table->kind, props.compute_capability, props.num_workers, props.driver_version};
      std::memcpy(device.name.data(), props.name, std::min(sizeof(props.name), device.name.size()));
      device.name.back() = '\0';
      devices.push_back(device);
    }
  }
  return devices;
}

}  // namespace

TuningCache &TuningCache::instance() {
  static TuningCache cache;
  return cache;
}

std::optional<TunedEntry> TuningCache::find(const TuningKey &key) const {
  std::lock_guard<std::mutex> lock(cache_lock);
  const auto &map = cache_map();
  const auto found = map.find(key);
  if (found == map.end()) return std::nullopt;
  return found->second;
}

void TuningCache::store(const TuningKey &key, const TunedEntry &entry) {
  std::lock_guard<std::mutex> lock(cache_lock);
  cache_map()[key] = entry;
}

size_t TuningCache::entries() const {
  std::lock_guard<std::mutex> lock(cache_lock);
  return cache_map().size();
}

void TuningCache::clear() {
  std::lock_guard<std::mutex> lock(cache_lock);
  cache_map().clear();
}

std::vector<uint8_t> TuningCache::save() const {
  std::lock_guard<std::mutex> lock(cache_lock);
  const auto &map = cache_map();
  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + map.size() * kEntryBytes + kChecksumBytes);
  for (const char c : kMagic) out.push_back(static_cast<uint8_t>(c));
  put_u32(out, kFormatVersion);
  put_u32(out, FMHA_SPLITK_VERSION_CODE);
  put_u32(out, static_cast<uint32_t>(map.size()));
  put_u32(out, TuningKey::kFields);
  for (const auto &[key, entry] : map) {
    for (const int32_t field : key.fields) put_u32(out, static_cast<uint32_t>(field));
    for (const char c : key.device_name) out.push_back(static_cast<uint8_t>(c));
    put_u32(out, static_cast<uint32_t>(entry.choice.waves));
    put_u32(out, static_cast<uint32_t>(entry.choice.min_piece));
    put_f32(out, entry.time_us);
    put_f32(out, entry.heuristic_time_us);
  }
  put_u64(out, fnv1a(out.data(), out.size()));
  return out;
}

void TuningCache::load(const uint8_t *bytes, size_t size) {
  if (size < kHeaderBytes + kChecksumBytes)
    invalid(cat("tuning cache: ", size, " bytes is shorter than the ", kHeaderBytes + kChecksumBytes,
                "-byte header and checksum of an empty cache (truncated?)"));
  if (std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0)
    invalid("tuning cache: the buffer does not start with \"FMHATUNE\" (not a tuning cache)");
  const uint32_t format = get_u32(bytes + 8);
  if (format != kFormatVersion)
    invalid(cat("tuning cache: format version ", format, " is not ", kFormatVersion, ", the one this library reads"));
  const uint64_t stored_sum = get_u64(bytes + size - kChecksumBytes);
  const uint64_t actual_sum = fnv1a(bytes, size - kChecksumBytes);
  if (stored_sum != actual_sum) invalid("tuning cache: checksum mismatch (the buffer is corrupt or truncated)");
  const uint32_t library = get_u32(bytes + 12);
  if (library != static_cast<uint32_t>(FMHA_SPLITK_VERSION_CODE))
    fail(FMHA_STATUS_NOT_SUPPORTED, cat("tuning cache: made by fmha_splitk ", version_string(library),
                                        "; this is ", version_string(FMHA_SPLITK_VERSION_CODE),
                                        ", whose kernels it was not tuned for: tune again"));
  const uint32_t count = get_u32(bytes + 16);
  const uint32_t fields = get_u32(bytes + 20);
  if (fields != static_cast<uint32_t>(TuningKey::kFields))
    invalid(cat("tuning cache: ", fields, " key fields per entry, not ", TuningKey::kFields));
  if ((size - kHeaderBytes - kChecksumBytes) / kEntryBytes != count ||
      (size - kHeaderBytes - kChecksumBytes) % kEntryBytes != 0)
    invalid(cat("tuning cache: ", size, " bytes do not hold the ", count, " entries its header announces"));

  std::vector<std::pair<TuningKey, TunedEntry>> parsed;
  parsed.reserve(count);
  const uint8_t *entry_bytes = bytes + kHeaderBytes;
  for (uint32_t index = 0; index < count; ++index, entry_bytes += kEntryBytes) {
    TuningKey key;
    for (int f = 0; f < TuningKey::kFields; ++f) key.fields[f] = static_cast<int32_t>(get_u32(entry_bytes + 4 * f));
    const uint8_t *after_fields = entry_bytes + 4 * TuningKey::kFields;
    std::memcpy(key.device_name.data(), after_fields, key.device_name.size());
    if (key.device_name.back() != '\0') invalid(cat("tuning cache: entry ", index, "'s device name is not terminated"));
    const uint8_t *value = after_fields + key.device_name.size();
    TunedEntry entry;
    entry.choice.waves = static_cast<int32_t>(get_u32(value));
    entry.choice.min_piece = static_cast<int32_t>(get_u32(value + 4));
    entry.time_us = get_f32(value + 8);
    entry.heuristic_time_us = get_f32(value + 12);
    const bool heuristic = entry.choice.waves == -1 && entry.choice.min_piece == 0;
    if (!heuristic && (entry.choice.waves < 0 || entry.choice.waves > kMaxWaves || entry.choice.min_piece < 1 ||
                       entry.choice.min_piece > kMaxMinPiece))
      invalid(cat("tuning cache: entry ", index, " has waves = ", entry.choice.waves, " and min_piece = ",
                  entry.choice.min_piece, " (expected 0..", kMaxWaves, " and 1..", kMaxMinPiece,
                  ", or -1 and 0 for the heuristic)"));
    parsed.emplace_back(key, entry);
  }

  const std::vector<PresentDevice> devices = present_devices();
  for (uint32_t index = 0; index < count; ++index) {
    const TuningKey &key = parsed[index].first;
    const bool present = std::any_of(devices.begin(), devices.end(), [&](const PresentDevice &device) {
      return std::equal(device.identity.begin(), device.identity.end(), key.fields.begin()) &&
             device.name == key.device_name;
    });
    if (!present) {
      std::string have;
      for (const PresentDevice &device : devices) {
        TuningKey shown;
        std::copy(device.identity.begin(), device.identity.end(), shown.fields.begin());
        shown.device_name = device.name;
        have += (have.empty() ? "" : "; ") + describe_device(shown);
      }
      fail(FMHA_STATUS_NOT_SUPPORTED, cat("tuning cache: entry ", index, " was tuned on ", describe_device(key),
                                          ", which this process does not have (it has: ", have, ")"));
    }
  }
  std::lock_guard<std::mutex> lock(cache_lock);
  auto &map = cache_map();
  for (auto &[key, entry] : parsed) map[key] = entry;
}

std::optional<ScheduleChoice> cached_choice(const fmha_plan_data &plan, const std::vector<int32_t> &kv_seqlen_hint) {
  if (plan.schedule != FMHA_SCHEDULE_BALANCED) return std::nullopt;
  TuningCache &cache = TuningCache::instance();
  if (cache.entries() == 0) return std::nullopt;  // keeps plan creation free of the key when nothing is tuned
  const std::optional<TunedEntry> entry = cache.find(make_tuning_key(plan, kv_seqlen_hint));
  if (!entry) return std::nullopt;
  return entry->choice;
}

// ------------------------------------------------------- plan candidates --

std::vector<Candidate> &plan_candidates(fmha_splitk_plan_s &plan) {
  if (plan.candidates.empty()) compute_candidates(plan);
  return plan.candidates;
}

int32_t selected_candidate(fmha_splitk_plan_s &plan) {
  const std::vector<Candidate> &candidates = plan_candidates(plan);
  const int64_t total_keys = expected_total_keys(plan.data, plan.kv_seqlen_hint);
  const std::array<int64_t, 3> current = behaviour_key(plan.data, total_keys);
  for (size_t i = 0; i < candidates.size(); ++i)
    if (behaviour_key(candidates[i].data, total_keys) == current) return static_cast<int32_t>(i);
  return 0;  // a cached choice outside the grid: reported as its closest kin, the heuristic
}

fmha_splitk_config candidate_config(fmha_splitk_plan_s &plan, int32_t index) {
  std::vector<Candidate> &candidates = plan_candidates(plan);
  if (index < 0 || static_cast<size_t>(index) >= candidates.size())
    invalid(cat("index = ", index, " is outside the plan's ", candidates.size(), " configurations (0 to ",
                candidates.size() - 1, ")"));
  const Candidate &candidate = candidates[index];
  fmha_splitk_config config;
  std::memset(&config, 0, sizeof(config));
  config.struct_size = sizeof(config);
  config.index = index;
  config.heuristic = index == 0;
  config.selected = index == selected_candidate(plan);
  const bool balanced = candidate.data.schedule == FMHA_SCHEDULE_BALANCED;
  config.waves = balanced ? candidate.choice.waves : -1;
  config.num_ranges = balanced ? candidate.data.num_ranges : 0;
  config.min_chunk_keys = candidate.data.kv_chunk_size;
  config.split_k = candidate.data.split_k;
  config.tune_state = candidate.tune_state;
  config.time_us = candidate.time_us;
  config.error_ratio = candidate.error_ratio;
  config.workspace_size = candidate.data.workspace_size;
  copy_name(config.name, balanced ? cat(candidate.data.kernel_name, " w", candidate.choice.waves, " r",
                                        candidate.data.num_ranges, " p", candidate.data.kv_chunk_size)
                                  : std::string(candidate.data.kernel_name));
  return config;
}

// -------------------------------------------------------------- autotune --

namespace {

// Device memory from the plan's backend, freed on every exit.
class DeviceBuffer {
 public:
  DeviceBuffer(const fmha_backend_v1 &backend, int32_t device, size_t bytes) : backend_(backend), device_(device) {
    if (bytes == 0) return;
    BackendMessage message;
    check_backend(backend.alloc(device, bytes, &ptr_, message.msg()), message, backend.name,
                  cat("allocating a ", bytes, "-byte autotune workspace").c_str());
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) backend_.free(device_, ptr_);
  }
  void *get() const { return ptr_; }

 private:
  const fmha_backend_v1 &backend_;
  int32_t device_;
  void *ptr_ = nullptr;
};

// The elements of a view, read back from the device and decoded, in the
// view's index order (O: any float dtype; LSE: float32).
class HostCopy {
 public:
  void read(const fmha_backend_v1 &backend, int32_t device, const fmha_view &view, void *stream) {
    values_.clear();
    if (view.data == nullptr) return;
    int64_t span = 1;
    int64_t count = 1;
    for (int d = 0; d < view.ndim; ++d) {
      if (view.shape[d] == 0) return;
      span += (view.shape[d] - 1) * view.stride[d];
      count *= view.shape[d];
    }
    const size_t elem = fmha_elem_bytes(view.elem);
    raw_.resize(static_cast<size_t>(span) * elem);
    BackendMessage message;
    check_backend(backend.copy_to_host(device, raw_.data(), view.data, raw_.size(), stream, message.msg()), message,
                  backend.name, "copy_to_host");
    values_.resize(static_cast<size_t>(count));
    int64_t index[FMHA_MAX_VIEW_RANK] = {};
    for (int64_t i = 0; i < count; ++i) {
      int64_t offset = 0;
      for (int d = 0; d < view.ndim; ++d) offset += index[d] * view.stride[d];
      values_[static_cast<size_t>(i)] = decode(view.elem, raw_.data() + offset * elem);
      for (int d = view.ndim - 1; d >= 0; --d) {
        if (++index[d] < view.shape[d]) break;
        index[d] = 0;
      }
    }
  }
  std::vector<double> &values() { return values_; }
  const std::vector<double> &values() const { return values_; }

 private:
  static double decode(int32_t elem, const uint8_t *bytes) {
    uint16_t half;
    float single;
    switch (elem) {
      case FMHA_ELEM_F16:
        std::memcpy(&half, bytes, 2);
        return cpu::half_to_float(half);
      case FMHA_ELEM_BF16:
        std::memcpy(&half, bytes, 2);
        return cpu::bf16_to_float(half);
      default:
        std::memcpy(&single, bytes, 4);
        return single;
    }
  }
  std::vector<uint8_t> raw_;
  std::vector<double> values_;
};

// The bound two valid configurations' outputs stay within: twice the
// forward bound of the mode (docs/numerics.md) plus the output's rounding.
double output_bound(const fmha_splitk_problem &problem, int32_t o_elem) {
  double mode = problem.q_dtype == FMHA_DTYPE_F16 ? 1e-3 : 2e-3;
  if (problem.flags & FMHA_FLAG_FP8_QK) mode = 4e-3;
  if (problem.flags & FMHA_FLAG_FP8_PV) mode = 5e-2;
  const double rounding = o_elem == FMHA_ELEM_BF16 ? 1.5e-3 : o_elem == FMHA_ELEM_F16 ? 2e-4 : 0.0;
  return 2.0 * (mode + rounding);
}

constexpr double kLseBound = 2e-3;

// ||c - h|| / ||h|| over O divided by the bound, and LSE's worst deviation
// divided by its bound; infinity when the non-finite values differ.
double error_ratio(const HostCopy &o, const HostCopy &o_ref, const HostCopy &lse, const HostCopy &lse_ref,
                   double bound) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double diff2 = 0, ref2 = 0;
  const std::vector<double> &c = o.values(), &h = o_ref.values();
  for (size_t i = 0; i < h.size(); ++i) {
    if (std::isfinite(h[i]) != std::isfinite(c[i])) return kInf;
    if (!std::isfinite(h[i])) {
      if (std::isnan(h[i]) != std::isnan(c[i]) || (!std::isnan(h[i]) && h[i] != c[i])) return kInf;
      continue;
    }
    diff2 += (c[i] - h[i]) * (c[i] - h[i]);
    ref2 += h[i] * h[i];
  }
  double ratio = ref2 > 0 ? std::sqrt(diff2 / ref2) / bound : (diff2 > 0 ? kInf : 0.0);
  const std::vector<double> &lc = lse.values(), &lh = lse_ref.values();
  for (size_t i = 0; i < lh.size(); ++i) {
    if (std::isfinite(lh[i]) != std::isfinite(lc[i])) return kInf;
    if (!std::isfinite(lh[i])) {
      if (std::isnan(lh[i]) != std::isnan(lc[i]) || (!std::isnan(lh[i]) && lh[i] != lc[i])) return kInf;
      continue;
    }
    ratio = std::max(ratio, std::abs(lc[i] - lh[i]) / (kLseBound * std::max(1.0, std::abs(lh[i]))));
  }
  return ratio;
}

// Test hook (tests/cpu/test_autotune.cpp): FMHA_SPLITK_TEST_CORRUPT_CANDIDATE
// = i makes candidate i's read-back output wrong, so that the accuracy
// guard's rejection can be tested on any backend.
int32_t corrupt_candidate_for_test() {
  const char *value = std::getenv("FMHA_SPLITK_TEST_CORRUPT_CANDIDATE");
  if (value == nullptr || *value == '\0') return -1;
  char *end = nullptr;
  const long index = std::strtol(value, &end, 10);
  return *end == '\0' && index >= 0 && index < std::numeric_limits<int32_t>::max() ? static_cast<int32_t>(index) : -1;
}

}  // namespace

void autotune(fmha_splitk_plan_s &plan, const fmha_splitk_args &args, const fmha_splitk_autotune_options &options) {
  if (options.reserved0 != 0) invalid(cat("options.reserved0 = ", options.reserved0, " must be 0"));
  if (options.warmup_runs < 0 || options.timed_runs < 0 || !(options.max_total_ms >= 0))
    invalid(cat("options.warmup_runs = ", options.warmup_runs, ", options.timed_runs = ", options.timed_runs,
                ", options.max_total_ms = ", options.max_total_ms, ": each must be >= 0 (0: the default)"));
  const uint32_t known_flags = FMHA_AUTOTUNE_NO_CACHE_STORE | FMHA_AUTOTUNE_KEEP_L2;
  if (options.flags & ~known_flags)
    invalid(cat("options.flags = 0x", std::hex, options.flags, " has unknown bits 0x", options.flags & ~known_flags));
  const int32_t warmup = options.warmup_runs > 0 ? options.warmup_runs : 3;
  const int32_t timed = options.timed_runs > 0 ? options.timed_runs : 20;
  const double budget_ms = options.max_total_ms > 0 ? options.max_total_ms : 2000.0;
  const fmha_backend_v1 &backend = plan.backend;
  if (backend.time_run == nullptr || backend.copy_to_host == nullptr)
    fail(FMHA_STATUS_NOT_SUPPORTED, cat("the ", backend.name, " backend cannot time runs: no autotuning there"));

  // The arguments are checked against the plan once (the candidates share
  // every shape); a problem with nothing to compute has nothing to tune.
  run_views(plan.data, args);
  const fmha_splitk_problem &problem = plan.data.problem;
  std::lock_guard<std::mutex> lock(plan.tuning_lock);
  std::vector<Candidate> &candidates = plan_candidates(plan);
  if (problem.batch == 0 || problem.max_q_seqlen == 0) return;

  size_t workspace_bytes = 0;
  for (const Candidate &candidate : candidates)
    workspace_bytes = std::max(workspace_bytes, candidate.data.workspace_size);
  const int32_t device = plan.data.device.device_id;
  DeviceBuffer workspace(backend, device, workspace_bytes);
  const auto views_of = [&](const Candidate &candidate) {
    fmha_run_views views = run_views(candidate.data, args);
    views.workspace = workspace.get();
    views.workspace_size = workspace_bytes;
    views.stream = args.stream;
    return views;
  };

  const bool partials = (problem.flags & FMHA_FLAG_WRITE_PARTIALS) != 0;
  const int32_t corrupt = corrupt_candidate_for_test();
  HostCopy o_ref, lse_ref, o, lse;
  double bound = 0;
  const auto started = std::chrono::steady_clock::now();
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate &candidate = candidates[i];
    candidate.time_us = -1;
    candidate.error_ratio = -1;
    const double elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    if (i > 0 && elapsed_ms > budget_ms) {
      candidate.tune_state = FMHA_TUNE_SKIPPED;
      continue;
    }
    const fmha_run_views views = views_of(candidate);
    double median_us = 0;
    BackendMessage message;
    const fmha_status st = backend.time_run(&candidate.data, &views, warmup, timed,
                                            (options.flags & FMHA_AUTOTUNE_KEEP_L2) != 0, &median_us, message.msg());
    if (st != FMHA_STATUS_SUCCESS) {
      // The heuristic's failure is the plan's own: report it as a run would.
      if (i == 0) check_backend(st, message, backend.name, "autotune run of the heuristic's configuration");
      candidate.tune_state = FMHA_TUNE_FAILED;
      continue;
    }
    candidate.time_us = median_us;
    const fmha_view &o_view = partials ? views.o_partial : views.o;
    const fmha_view &lse_view = partials ? views.lse_partial : views.lse;
    HostCopy &o_out = i == 0 ? o_ref : o;
    HostCopy &lse_out = i == 0 ? lse_ref : lse;
    o_out.read(backend, device, o_view, args.stream);
    lse_out.read(backend, device, lse_view, args.stream);
    if (i == 0) {
      bound = output_bound(problem, o_view.elem);
      candidate.error_ratio = 0;
      candidate.tune_state = FMHA_TUNE_ACCEPTED;
      continue;
    }
    if (static_cast<int32_t>(i) == corrupt && !o.values().empty()) o.values()[0] += 1.0 + std::abs(o.values()[0]);
    candidate.error_ratio = error_ratio(o, o_ref, lse, lse_ref, bound);
    candidate.tune_state = candidate.error_ratio <= 1.0 ? FMHA_TUNE_ACCEPTED : FMHA_TUNE_REJECTED;
  }

  size_t winner = 0;
  for (size_t i = 1; i < candidates.size(); ++i)
    if (candidates[i].tune_state == FMHA_TUNE_ACCEPTED && candidates[i].time_us < candidates[winner].time_us)
      winner = i;
  const Candidate &best = candidates[winner];

  // The winner's output is what the caller's O and LSE keep.
  {
    const fmha_run_views views = views_of(best);
    BackendMessage message;
    check_backend(backend.run(&best.data, &views, message.msg()), message, backend.name, "run");
  }
  // Fix it in the plan, growing the plan's own workspace first (a failed
  // allocation leaves the plan as it was).
  // The owned workspace (if the plan has one) always holds at least
  // plan.data.workspace_size.
  if (best.data.workspace_size > 0 && !(problem.flags & FMHA_FLAG_EXTERNAL_WORKSPACE) &&
      (plan.owned_workspace == nullptr || best.data.workspace_size > plan.data.workspace_size)) {
    void *grown = alloc_owned_workspace(backend, best.data);
    std::lock_guard<std::mutex> workspace_lock(plan.owned_workspace_lock);
    if (plan.owned_workspace != nullptr) backend.free(device, plan.owned_workspace);
    plan.owned_workspace = grown;
  }
  // ... and its merge counters (zero, as the runs on it leave them).
  if (plan.owned_workspace != nullptr) give_merge_counters(plan, best.data);
  // A plan that had no workspace of its own until now has no run order yet.
  give_run_order(plan);
  {
    std::lock_guard<std::mutex> workspace_lock(plan.owned_workspace_lock);
    plan.data = best.data;
    plan.choice = best.choice;
    plan.config_source = FMHA_CONFIG_AUTOTUNE;
  }
  if (!(options.flags & FMHA_AUTOTUNE_NO_CACHE_STORE) && best.data.schedule == FMHA_SCHEDULE_BALANCED) {
    TunedEntry entry;
    // The heuristic's own partition is stored as "the heuristic" (waves
    // -1): its ranges may differ from what its waves alone would give.
    entry.choice = winner == 0 ? ScheduleChoice{-1, 0} : best.choice;
    entry.time_us = static_cast<float>(best.time_us);
    entry.heuristic_time_us = static_cast<float>(candidates[0].time_us);
    TuningCache::instance().store(make_tuning_key(plan.data, plan.kv_seqlen_hint), entry);
  }
}

}  // namespace fmha::core
