// Autotuning and the tuning cache (issue 11) on the CPU backend: candidates
// and their report, autotune's result against the float64 oracle, the
// accuracy guard (through its test hook), the cache's round trip, its
// rejection of corrupt, foreign-version and foreign-device buffers, files,
// option and argument errors, and two threads tuning the same class.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu/test_api_support.h"
#include "oracle/oracle.h"

namespace fmha_api_test {
namespace {

// Long enough that the CPU's balanced partition has several candidates
// whatever its thread count: 2 sequences x 2048 keys, Hkv 2.
fmha_splitk_problem tunable_problem() {
  fmha_splitk_problem problem = basic_problem();
  problem.max_kv_seqlen = 2048;
  return problem;
}

// Fresh random inputs per test, O and LSE poisoned.
struct Inputs : DenseTensors {
  explicit Inputs(const fmha_splitk_problem &problem, uint64_t seed = 11) : DenseTensors(problem) {
    std::mt19937_64 rng(seed);
    q.fill_uniform(rng, -1, 1);
    k.fill_uniform(rng, -1, 1);
    v.fill_uniform(rng, -1, 1);
    o.poison();
    lse.poison();
  }
};

// ||O - O_oracle|| / ||O_oracle||.
double relative_error_to_oracle(const Inputs &inputs) {
  fmha_oracle::AttentionInputs in;
  in.q = &inputs.q;
  in.k = &inputs.k;
  in.v = &inputs.v;
  const fmha_oracle::AttentionOutput ref = fmha_oracle::AttentionOracle(in).forward();
  const std::vector<double> got = fmha_oracle::to_doubles(inputs.o);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.o.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - ref.o[i]) * (got[i] - ref.o[i]);
    norm += ref.o[i] * ref.o[i];
  }
  return std::sqrt(diff / norm);
}

fmha_splitk_config config_of(fmha_splitk_plan_t plan, int32_t index) {
  fmha_splitk_config config = FMHA_SPLITK_CONFIG_INIT;
  EXPECT_FMHA_OK(fmha_splitk_get_plan_config(plan, index, &config));
  return config;
}

int32_t config_count(fmha_splitk_plan_t plan) {
  int32_t count = 0;
  EXPECT_FMHA_OK(fmha_splitk_plan_config_count(plan, &count));
  return count;
}

fmha_splitk_plan_info info_of(fmha_splitk_plan_t plan) {
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  EXPECT_FMHA_OK(fmha_splitk_get_plan_info(plan, &info));
  return info;
}

std::vector<uint8_t> saved_cache() {
  size_t size = 0;
  EXPECT_FMHA_OK(fmha_tuning_cache_save(nullptr, 0, &size));
  std::vector<uint8_t> bytes(size);
  EXPECT_FMHA_OK(fmha_tuning_cache_save(bytes.data(), bytes.size(), &size));
  return bytes;
}

size_t cache_entries() {
  size_t entries = 0;
  EXPECT_FMHA_OK(fmha_tuning_cache_entries(&entries));
  return entries;
}

// The cache format's checksum (FNV-1a 64 over every byte before the last
// eight), recomputed so that a test can forge a well-formed buffer.
void reseal(std::vector<uint8_t> &bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes.size() - 8; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  for (int i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = static_cast<uint8_t>(hash >> (8 * i));
}

// Tunes a fresh plan of tunable_problem() and returns its serialized cache.
std::vector<uint8_t> cache_with_one_entry() {
  fmha_tuning_cache_clear();
  const fmha_splitk_problem problem = tunable_problem();
  fmha_splitk_plan_t plan = make_plan(problem);
  Inputs inputs(problem);
  const fmha_splitk_args args = inputs.args();
  EXPECT_FMHA_OK(fmha_splitk_autotune(plan, &args, nullptr));
  fmha_splitk_destroy_plan(plan);
  EXPECT_EQ(cache_entries(), 1u);
  return saved_cache();
}

class Autotune : public ::testing::Test {
 protected:
  void SetUp() override {
    fmha_tuning_cache_clear();
    unsetenv("FMHA_SPLITK_TEST_CORRUPT_CANDIDATE");
  }
  void TearDown() override {
    fmha_tuning_cache_clear();
    unsetenv("FMHA_SPLITK_TEST_CORRUPT_CANDIDATE");
  }
};

TEST_F(Autotune, CandidatesListTheHeuristicFirst) {
  fmha_splitk_plan_t plan = make_plan(tunable_problem());
  const int32_t count = config_count(plan);
  EXPECT_GT(count, 1);
  const fmha_splitk_config first = config_of(plan, 0);
  EXPECT_EQ(first.index, 0);
  EXPECT_NE(first.heuristic, 0);
  EXPECT_NE(first.selected, 0);
  EXPECT_EQ(first.tune_state, FMHA_TUNE_UNTIMED);
  EXPECT_EQ(first.time_us, -1);
  const fmha_splitk_plan_info info = info_of(plan);
  EXPECT_EQ(info.config_index, 0);
  EXPECT_EQ(info.config_source, FMHA_CONFIG_HEURISTIC);
  EXPECT_EQ(first.workspace_size, info.workspace_size);
  for (int32_t i = 1; i < count; ++i) {
    const fmha_splitk_config other = config_of(plan, i);
    EXPECT_EQ(other.heuristic, 0);
    EXPECT_EQ(other.selected, 0);
    EXPECT_GE(other.waves, 0);
    EXPECT_GE(other.num_ranges, 1);
    EXPECT_GT(other.min_chunk_keys, 0);
    EXPECT_NE(std::string(other.name), "");
  }
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Autotune, SchedulesTheProblemFixesHaveOneCandidate) {
  fmha_splitk_problem forced = tunable_problem();
  forced.split_k = 4;
  fmha_splitk_problem invariant = tunable_problem();
  invariant.flags = FMHA_FLAG_BATCH_INVARIANT;
  for (const fmha_splitk_problem &problem : {forced, invariant}) {
    fmha_splitk_plan_t plan = make_plan(problem);
    EXPECT_EQ(config_count(plan), 1);
    EXPECT_EQ(config_of(plan, 0).waves, -1);
    Inputs inputs(problem);
    const fmha_splitk_args args = inputs.args();
    EXPECT_FMHA_OK(fmha_splitk_autotune(plan, &args, nullptr));
    EXPECT_EQ(config_of(plan, 0).tune_state, FMHA_TUNE_ACCEPTED);
    // Nothing worth caching: the problem fixed the partition.
    EXPECT_EQ(cache_entries(), 0u);
    EXPECT_LT(relative_error_to_oracle(inputs), 2e-3);
    fmha_splitk_destroy_plan(plan);
  }
}

TEST_F(Autotune, BadConfigIndexNamesTheRange) {
  fmha_splitk_plan_t plan = make_plan(tunable_problem());
  const int32_t count = config_count(plan);
  fmha_splitk_config config = FMHA_SPLITK_CONFIG_INIT;
  EXPECT_FMHA_ERROR(fmha_splitk_get_plan_config(plan, count, &config), FMHA_STATUS_INVALID_ARGUMENT, "index");
  EXPECT_FMHA_ERROR(fmha_splitk_get_plan_config(plan, -1, &config), FMHA_STATUS_INVALID_ARGUMENT, "index = -1");
  EXPECT_FMHA_ERROR(fmha_splitk_get_plan_config(plan, 0, nullptr), FMHA_STATUS_INVALID_ARGUMENT, "config");
  config.struct_size = 4;
  EXPECT_FMHA_ERROR(fmha_splitk_get_plan_config(plan, 0, &config), FMHA_STATUS_INVALID_ARGUMENT,
                    "config.struct_size");
  EXPECT_FMHA_ERROR(fmha_splitk_plan_config_count(plan, nullptr), FMHA_STATUS_INVALID_ARGUMENT, "count");
  EXPECT_FMHA_ERROR(fmha_splitk_plan_config_count(nullptr, nullptr), FMHA_STATUS_INVALID_ARGUMENT, "plan");
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Autotune, FixesTheFastestAgreeingCandidateAndCachesIt) {
  const fmha_splitk_problem problem = tunable_problem();
  fmha_splitk_plan_t plan = make_plan(problem);
  Inputs inputs(problem);
  const fmha_splitk_args args = inputs.args();
  fmha_splitk_autotune_options options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  // Every candidate timed, also in the sanitizer builds on a busy machine
  // (the default 2 s budget skipped the last one there once).
  options.max_total_ms = 1e7;
  EXPECT_FMHA_OK(fmha_splitk_autotune(plan, &args, &options));
  // O holds the winner's result.
  EXPECT_LT(relative_error_to_oracle(inputs), 2e-3);

  const fmha_splitk_plan_info info = info_of(plan);
  EXPECT_EQ(info.config_source, FMHA_CONFIG_AUTOTUNE);
  const fmha_splitk_config chosen = config_of(plan, info.config_index);
  EXPECT_NE(chosen.selected, 0);
  EXPECT_EQ(chosen.tune_state, FMHA_TUNE_ACCEPTED);
  EXPECT_EQ(info.workspace_size, chosen.workspace_size);
  for (int32_t i = 0; i < config_count(plan); ++i) {
    const fmha_splitk_config config = config_of(plan, i);
    EXPECT_EQ(config.tune_state, FMHA_TUNE_ACCEPTED) << config.name;
    EXPECT_GE(config.time_us, 0) << config.name;
    EXPECT_GE(config.error_ratio, 0) << config.name;
    EXPECT_LE(config.error_ratio, 1) << config.name;
    EXPECT_LE(chosen.time_us, config.time_us) << config.name;
  }
  EXPECT_EQ(cache_entries(), 1u);

  // The tuned plan runs (its own workspace sized for the winner) and stays
  // correct.
  inputs.o.poison();
  EXPECT_FMHA_OK(fmha_splitk_run(plan, &args));
  EXPECT_LT(relative_error_to_oracle(inputs), 2e-3);

  // A new plan of the class takes the winner at creation, untimed.
  fmha_splitk_plan_t again = make_plan(problem);
  const fmha_splitk_plan_info cached = info_of(again);
  EXPECT_EQ(cached.config_source, FMHA_CONFIG_TUNING_CACHE);
  EXPECT_EQ(cached.config_index, info.config_index);
  EXPECT_EQ(config_of(again, cached.config_index).tune_state, FMHA_TUNE_UNTIMED);
  inputs.o.poison();
  EXPECT_FMHA_OK(fmha_splitk_run(again, &args));
  EXPECT_LT(relative_error_to_oracle(inputs), 2e-3);
  fmha_splitk_destroy_plan(again);

  // Another class (other heads) does not.
  fmha_splitk_problem other = problem;
  other.heads_q = 8;
  fmha_splitk_plan_t unrelated = make_plan(other);
  EXPECT_EQ(info_of(unrelated).config_source, FMHA_CONFIG_HEURISTIC);
  fmha_splitk_destroy_plan(unrelated);
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Autotune, NoCacheStoreKeepsTheWinnerInThePlanOnly) {
  const fmha_splitk_problem problem = tunable_problem();
  fmha_splitk_plan_t plan = make_plan(problem);
  Inputs inputs(problem);
  const fmha_splitk_args args = inputs.args();
  fmha_splitk_autotune_options options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  options.flags = FMHA_AUTOTUNE_NO_CACHE_STORE;
  options.timed_runs = 3;
  options.warmup_runs = 1;
  EXPECT_FMHA_OK(fmha_splitk_autotune(plan, &args, &options));
  EXPECT_EQ(info_of(plan).config_source, FMHA_CONFIG_AUTOTUNE);
  EXPECT_EQ(cache_entries(), 0u);
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Autotune, AccuracyGuardRejectsAWrongCandidate) {
  const fmha_splitk_problem problem = tunable_problem();
  fmha_splitk_plan_t plan = make_plan(problem);
  ASSERT_GT(config_count(plan), 1);
  // The test hook makes candidate 1's read-back output wrong.
  ASSERT_EQ(setenv("FMHA_SPLITK_TEST_CORRUPT_CANDIDATE", "1", 1), 0);
  Inputs inputs(problem);
  const fmha_splitk_args args = inputs.args();
  EXPECT_FMHA_OK(fmha_splitk_autotune(plan, &args, nullptr));
  const fmha_splitk_config wrong = config_of(plan, 1);
  EXPECT_EQ(wrong.tune_state, FMHA_TUNE_REJECTED);
  EXPECT_GT(wrong.error_ratio, 1.0);
  EXPECT_EQ(wrong.selected, 0);
  EXPECT_NE(info_of(plan).config_index, 1);
  EXPECT_LT(relative_error_to_oracle(inputs), 2e-3);
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Autotune, TimeBudgetSkipsAllButTheHeuristic) {
  const fmha_splitk_problem problem = tunable_problem();
  fmha_splitk_plan_t plan = make_plan(problem);
  Inputs inputs(problem);
  const fmha_splitk_args args = inputs.args();
  fmha_splitk_autotune_options options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  options.max_total_ms = 1e-9;
  EXPECT_FMHA_OK(fmha_splitk_autotune(plan, &args, &options));
  EXPECT_EQ(config_of(plan, 0).tune_state, FMHA_TUNE_ACCEPTED);
  for (int32_t i = 1; i < config_count(plan); ++i) EXPECT_EQ(config_of(plan, i).tune_state, FMHA_TUNE_SKIPPED);
  EXPECT_EQ(info_of(plan).config_index, 0);
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Autotune, BadOptionsAndArgumentsAreNamed) {
  const fmha_splitk_problem problem = tunable_problem();
  fmha_splitk_plan_t plan = make_plan(problem);
  Inputs inputs(problem);
  fmha_splitk_args args = inputs.args();
  fmha_splitk_autotune_options options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  options.reserved0 = 1;
  EXPECT_FMHA_ERROR(fmha_splitk_autotune(plan, &args, &options), FMHA_STATUS_INVALID_ARGUMENT, "options.reserved0");
  options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  options.timed_runs = -1;
  EXPECT_FMHA_ERROR(fmha_splitk_autotune(plan, &args, &options), FMHA_STATUS_INVALID_ARGUMENT, "options.timed_runs");
  options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  options.max_total_ms = NAN;
  EXPECT_FMHA_ERROR(fmha_splitk_autotune(plan, &args, &options), FMHA_STATUS_INVALID_ARGUMENT,
                    "options.max_total_ms");
  options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  options.flags = 1u << 7;
  EXPECT_FMHA_ERROR(fmha_splitk_autotune(plan, &args, &options), FMHA_STATUS_INVALID_ARGUMENT, "options.flags");
  options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
  options.struct_size = 3;
  EXPECT_FMHA_ERROR(fmha_splitk_autotune(plan, &args, &options), FMHA_STATUS_INVALID_ARGUMENT,
                    "options.struct_size");
  EXPECT_FMHA_ERROR(fmha_splitk_autotune(nullptr, &args, nullptr), FMHA_STATUS_INVALID_ARGUMENT, "plan");
  EXPECT_FMHA_ERROR(fmha_splitk_autotune(plan, nullptr, nullptr), FMHA_STATUS_INVALID_ARGUMENT, "args");
  args.q = nullptr;
  EXPECT_FMHA_ERROR(fmha_splitk_autotune(plan, &args, nullptr), FMHA_STATUS_INVALID_ARGUMENT, "q");
  // Nothing was tuned.
  EXPECT_EQ(info_of(plan).config_source, FMHA_CONFIG_HEURISTIC);
  EXPECT_EQ(config_of(plan, 0).tune_state, FMHA_TUNE_UNTIMED);
  EXPECT_EQ(cache_entries(), 0u);
  fmha_splitk_destroy_plan(plan);
}

TEST_F(Autotune, CacheRoundTrip) {
  const std::vector<uint8_t> bytes = cache_with_one_entry();
  fmha_tuning_cache_clear();
  EXPECT_EQ(cache_entries(), 0u);
  EXPECT_FMHA_OK(fmha_tuning_cache_load(bytes.data(), bytes.size()));
  EXPECT_EQ(cache_entries(), 1u);
  EXPECT_EQ(saved_cache(), bytes);
  // Loading it again replaces the entry rather than adding one.
  EXPECT_FMHA_OK(fmha_tuning_cache_load(bytes.data(), bytes.size()));
  EXPECT_EQ(cache_entries(), 1u);
  fmha_splitk_plan_t plan = make_plan(tunable_problem());
  EXPECT_EQ(info_of(plan).config_source, FMHA_CONFIG_TUNING_CACHE);
  fmha_splitk_destroy_plan(plan);
  // An empty cache round-trips too.
  fmha_tuning_cache_clear();
  const std::vector<uint8_t> empty = saved_cache();
  EXPECT_FMHA_OK(fmha_tuning_cache_load(empty.data(), empty.size()));
  EXPECT_EQ(cache_entries(), 0u);
}

TEST_F(Autotune, SaveNeedsRoom) {
  cache_with_one_entry();
  size_t size = 0;
  EXPECT_FMHA_ERROR(fmha_tuning_cache_save(nullptr, 0, nullptr), FMHA_STATUS_INVALID_ARGUMENT, "size");
  EXPECT_FMHA_ERROR(fmha_tuning_cache_save(nullptr, 8, &size), FMHA_STATUS_INVALID_ARGUMENT, "buffer");
  EXPECT_FMHA_OK(fmha_tuning_cache_save(nullptr, 0, &size));
  std::vector<uint8_t> small(size - 1, 0xab);
  EXPECT_FMHA_ERROR(fmha_tuning_cache_save(small.data(), small.size(), &size), FMHA_STATUS_INVALID_ARGUMENT,
                    "capacity");
  EXPECT_EQ(small, std::vector<uint8_t>(size - 1, 0xab));  // nothing written
  EXPECT_FMHA_ERROR(fmha_tuning_cache_entries(nullptr), FMHA_STATUS_INVALID_ARGUMENT, "entries");
}

TEST_F(Autotune, CorruptBuffersAreRejectedWholly) {
  const std::vector<uint8_t> bytes = cache_with_one_entry();
  // Every truncation, and every single-bit flip: INVALID_ARGUMENT, and the
  // cache keeps what it held.
  for (size_t length = 0; length < bytes.size(); ++length) {
    EXPECT_EQ(fmha_tuning_cache_load(bytes.data(), length), FMHA_STATUS_INVALID_ARGUMENT) << length;
  }
  for (size_t at = 0; at < bytes.size(); ++at) {
    std::vector<uint8_t> flipped = bytes;
    flipped[at] ^= static_cast<uint8_t>(1u << (at % 8));
    EXPECT_EQ(fmha_tuning_cache_load(flipped.data(), flipped.size()), FMHA_STATUS_INVALID_ARGUMENT) << at;
  }
  EXPECT_EQ(saved_cache(), bytes);
  std::vector<uint8_t> junk(bytes.size(), 0x5a);
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load(junk.data(), junk.size()), FMHA_STATUS_INVALID_ARGUMENT, "FMHATUNE");
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load(bytes.data(), 3), FMHA_STATUS_INVALID_ARGUMENT, "truncated");
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load(nullptr, 5), FMHA_STATUS_INVALID_ARGUMENT, "buffer");
  // A well-sealed buffer whose count disagrees with its length.
  std::vector<uint8_t> miscounted = bytes;
  miscounted[16] = 2;
  reseal(miscounted);
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load(miscounted.data(), miscounted.size()), FMHA_STATUS_INVALID_ARGUMENT,
                    "entries its header announces");
  // ... or whose entry holds a value out of range (waves = 1000).
  std::vector<uint8_t> wild = bytes;
  const size_t value_offset = 24 + 31 * 4 + 96;
  wild[value_offset] = 0xe8;
  wild[value_offset + 1] = 0x03;
  wild[value_offset + 2] = 0;
  wild[value_offset + 3] = 0;
  reseal(wild);
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load(wild.data(), wild.size()), FMHA_STATUS_INVALID_ARGUMENT, "waves = 1000");
  EXPECT_EQ(saved_cache(), bytes);
}

TEST_F(Autotune, OtherLibraryVersionOrDeviceIsNotSupported) {
  const std::vector<uint8_t> bytes = cache_with_one_entry();
  std::vector<uint8_t> other_version = bytes;
  other_version[12] ^= 1;  // the library version code
  reseal(other_version);
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load(other_version.data(), other_version.size()), FMHA_STATUS_NOT_SUPPORTED,
                    "made by fmha_splitk");
  std::vector<uint8_t> other_device = bytes;
  other_device[24 + 31 * 4] ^= 0x20;  // the device name's first letter
  reseal(other_device);
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load(other_device.data(), other_device.size()), FMHA_STATUS_NOT_SUPPORTED,
                    "which this process does not have");
  std::vector<uint8_t> other_workers = bytes;
  other_workers[24 + 2 * 4] ^= 0x40;  // the worker count (SMs, threads)
  reseal(other_workers);
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load(other_workers.data(), other_workers.size()), FMHA_STATUS_NOT_SUPPORTED,
                    "workers");
  EXPECT_EQ(saved_cache(), bytes);
}

TEST_F(Autotune, Files) {
  const std::vector<uint8_t> bytes = cache_with_one_entry();
  const std::string path = ::testing::TempDir() + "fmha_tuning_cache_test.bin";
  EXPECT_FMHA_OK(fmha_tuning_cache_save_file(path.c_str()));
  fmha_tuning_cache_clear();
  EXPECT_FMHA_OK(fmha_tuning_cache_load_file(path.c_str()));
  EXPECT_EQ(saved_cache(), bytes);
  std::remove(path.c_str());
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load_file(path.c_str()), FMHA_STATUS_INVALID_ARGUMENT, path);
  EXPECT_FMHA_ERROR(fmha_tuning_cache_save_file("/nonexistent-dir/cache.bin"), FMHA_STATUS_INVALID_ARGUMENT,
                    "/nonexistent-dir/cache.bin");
  EXPECT_FMHA_ERROR(fmha_tuning_cache_save_file(nullptr), FMHA_STATUS_INVALID_ARGUMENT, "path");
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load_file(nullptr), FMHA_STATUS_INVALID_ARGUMENT, "path");
  // An empty file is a truncated cache.
  std::FILE *empty = std::fopen(path.c_str(), "wb");
  ASSERT_NE(empty, nullptr);
  std::fclose(empty);
  EXPECT_FMHA_ERROR(fmha_tuning_cache_load_file(path.c_str()), FMHA_STATUS_INVALID_ARGUMENT, "truncated");
  std::remove(path.c_str());
}

// Two threads tune plans of the same class at once (TSan runs this under
// the `threads` label); both succeed and the class has one entry.
TEST_F(Autotune, ConcurrentTuningOfOneClass) {
  const fmha_splitk_problem problem = tunable_problem();
  std::vector<std::thread> threads;
  fmha_status statuses[2] = {FMHA_STATUS_INTERNAL_ERROR, FMHA_STATUS_INTERNAL_ERROR};
  double errors[2] = {INFINITY, INFINITY};
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      fmha_splitk_plan_t plan = nullptr;
      if (fmha_splitk_create_plan(&problem, &plan) != FMHA_STATUS_SUCCESS) return;
      Inputs inputs(problem, 100 + t);
      const fmha_splitk_args args = inputs.args();
      fmha_splitk_autotune_options options = FMHA_SPLITK_AUTOTUNE_OPTIONS_INIT;
      options.timed_runs = 5;
      statuses[t] = fmha_splitk_autotune(plan, &args, &options);
      errors[t] = relative_error_to_oracle(inputs);
      fmha_splitk_destroy_plan(plan);
    });
  for (std::thread &thread : threads) thread.join();
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(statuses[t], FMHA_STATUS_SUCCESS);
    EXPECT_LT(errors[t], 2e-3);
  }
  EXPECT_EQ(cache_entries(), 1u);
}

}  // namespace
}  // namespace fmha_api_test
