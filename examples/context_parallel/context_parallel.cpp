// context_parallel: context-parallel decode across GPUs. The KV cache of
// each sequence is cut into N x K consecutive shards, K on each of N GPUs;
// every GPU attends the (replicated) queries over each of its shards with
// fmha_splitk_run(), writing float32 O and its LSE: a partial result. NCCL
// all-gathers the partials, so that every GPU holds all N x K of them, and
// fmha_merge() (stacked form) combines them into the final bf16 O and LSE on
// every GPU (docs/merging.md).
//
// Built in: a check of every GPU's merged result against one unsharded run
// over the whole KV cache on GPU 0, and CUDA-event timings of the unsharded
// run and of each step of the sharded one. Options: usage() below and
// README.md. Exit status 0 when every GPU's result matches, 1 on a mismatch
// or a failed call, 2 for bad options, 77 (skip) when there are fewer GPUs
// than asked for (none at all included).
#include <cuda_runtime.h>
#include <fmha_splitk/fmha_splitk.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

namespace {

constexpr int kExitMismatch = 1, kExitUsage = 2, kExitSkip = 77;
constexpr int64_t kQLen = 1;  // decode: one query per sequence
// Each partial is one record of the gather buffer: its O [B, Mq, Hq, Dv]
// then its LSE [B, Hq, Mq], padded to 256 bytes, so that one all-gather
// moves both and every partial's O starts 256-byte aligned (the kernels
// move O rows in 16-byte vectors).
constexpr int64_t kRecordAlignFloats = 64;

// The merged O and the unsharded O are each the exact attention computed in
// float32 (the CUDA kernels measured within 2e-4 of float64, numerics.md)
// and rounded once to bf16 (the merge rounds its float32 sum once, as the
// unsharded run rounds its own): each is within about 1.1e-3 (RMS, the bf16
// rounding) + 2e-4 of the exact result, so by the triangle inequality they
// differ by at most about 2.6e-3 in relative norm. 4e-3 keeps a margin and
// is still far below what a lost, doubled or misweighted shard gives (tens
// of percent). LSE is float32 in both: the tests' 1e-3 (numerics.md).
constexpr double kOBound = 4e-3;
constexpr double kLseBound = 1e-3;

constexpr DLDataType kBf16 = {kDLBfloat, 16, 1};
constexpr DLDataType kF32 = {kDLFloat, 32, 1};

// ---------------------------------------------------------------------------
// Checked calls: each failure prints the call and the reason.

bool cuda_ok(cudaError_t error, const char *call) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "context_parallel: %s: %s\n", call, cudaGetErrorString(error));
  return false;
}

bool nccl_ok(ncclResult_t result, const char *call) {
  if (result == ncclSuccess) return true;
  std::fprintf(stderr, "context_parallel: %s: %s (%s)\n", call, ncclGetErrorString(result), ncclGetLastError(nullptr));
  return false;
}

bool fmha_ok(fmha_status status, const char *call) {
  if (status == FMHA_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "context_parallel: %s: %s: %s\n", call, fmha_status_string(status), fmha_last_error_message());
  return false;
}

// ---------------------------------------------------------------------------
// The problem and its pieces.

struct Dims {
  int64_t batch, kv_len, heads_q, heads_kv, dim_qk, dim_v;
  bool mla;  // V is the first dim_v dims of the K rows (FMHA_FLAG_V_FROM_K)

  int64_t k_row() const { return heads_kv * dim_qk; }  // elements of one key's K row, all K/V heads
  int64_t v_row() const { return heads_kv * dim_v; }
  int64_t q_count() const { return batch * kQLen * heads_q * dim_qk; }
  int64_t o_count() const { return batch * kQLen * heads_q * dim_v; }
  int64_t lse_count() const { return batch * heads_q * kQLen; }
  int64_t record() const {
    return (o_count() + lse_count() + kRecordAlignFloats - 1) / kRecordAlignFloats * kRecordAlignFloats;
  }
  // Bytes of K/V cache per key of one sequence (what attention reads).
  int64_t kv_bytes_per_key() const { return 2 * (k_row() + (mla ? 0 : v_row())); }
};

// Keys [begin, end) of every sequence.
struct Range {
  int64_t begin, end;
  int64_t size() const { return end - begin; }
};

// Shard s of `shards`: lengths differ by at most one key.
Range shard_keys(const Dims &dims, int64_t shard, int64_t shards) {
  return {dims.kv_len * shard / shards, dims.kv_len * (shard + 1) / shards};
}

// A DLTensor with its own shape and strides (compact row-major when none
// are given). get() points the DLTensor at them, so a copy stays valid.
class Tensor {
 public:
  Tensor(const void *data, DLDataType dtype, DLDevice device, std::initializer_list<int64_t> shape,
         std::initializer_list<int64_t> strides = {}) {
    tensor_.data = const_cast<void *>(data);  // DLPack has no const; the library only reads inputs
    tensor_.device = device;
    tensor_.dtype = dtype;
    tensor_.ndim = static_cast<int32_t>(shape.size());
    std::copy(shape.begin(), shape.end(), shape_);
    if (strides.size() == shape.size()) {
      std::copy(strides.begin(), strides.end(), strides_);
    } else {
      int64_t stride = 1;
      for (int32_t d = tensor_.ndim - 1; d >= 0; --d) {
        strides_[d] = stride;
        stride *= shape_[d];
      }
    }
  }
  const DLTensor *get() {
    tensor_.shape = shape_;
    tensor_.strides = strides_;
    return &tensor_;
  }

 private:
  int64_t shape_[6] = {}, strides_[6] = {};
  DLTensor tensor_{};
};

fmha_splitk_problem make_problem(const Dims &dims, int64_t keys, int32_t backend, int device, int32_t o_dtype) {
  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  problem.backend = backend;
  problem.device_id = device;
  problem.batch = dims.batch;
  problem.max_q_seqlen = kQLen;
  problem.max_kv_seqlen = keys;
  problem.heads_q = static_cast<int32_t>(dims.heads_q);
  problem.heads_kv = static_cast<int32_t>(dims.heads_kv);
  problem.head_dim_qk = static_cast<int32_t>(dims.dim_qk);
  problem.head_dim_v = static_cast<int32_t>(dims.dim_v);
  // Dense: the CUDA backend takes every layout for MLA (plan_forward checks
  // only the head dims and dtypes), and a shard is then a strided view.
  problem.kv_layout = FMHA_KV_DENSE;
  problem.q_dtype = FMHA_DTYPE_BF16;
  problem.o_dtype = o_dtype;
  if (dims.mla) problem.flags = FMHA_FLAG_V_FROM_K;
  return problem;
}

// A K/V buffer holding `rows` keys of each sequence ([B, rows, Hkv, D]);
// v is null for MLA.
struct KvBuffer {
  const uint16_t *k, *v;
  int64_t rows;
};

// Attention of the queries over keys [keys.begin, keys.end) of `kv` (indices
// into the buffer): a strided view of the buffer, no copy. O in `o_type`.
bool attend(fmha_splitk_plan_t plan, const Dims &dims, DLDevice device, const uint16_t *q, const KvBuffer &kv,
            Range keys, void *o, DLDataType o_type, float *lse, void *stream) {
  const int64_t n = keys.size();
  Tensor q_tensor(q, kBf16, device, {dims.batch, kQLen, dims.heads_q, dims.dim_qk});
  Tensor k_tensor(kv.k + keys.begin * dims.k_row(), kBf16, device, {dims.batch, n, dims.heads_kv, dims.dim_qk},
                  {kv.rows * dims.k_row(), dims.k_row(), dims.dim_qk, 1});
  Tensor v_tensor(dims.mla ? nullptr : kv.v + keys.begin * dims.v_row(), kBf16, device,
                  {dims.batch, n, dims.heads_kv, dims.dim_v}, {kv.rows * dims.v_row(), dims.v_row(), dims.dim_v, 1});
  Tensor o_tensor(o, o_type, device, {dims.batch, kQLen, dims.heads_q, dims.dim_v});
  Tensor lse_tensor(lse, kF32, device, {dims.batch, dims.heads_q, kQLen});
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = q_tensor.get();
  args.k = k_tensor.get();
  args.v = dims.mla ? nullptr : v_tensor.get();  // MLA: V comes from the K rows
  args.o = o_tensor.get();
  args.lse = lse_tensor.get();
  args.stream = stream;  // workspace NULL: the plan's own (one run at a time per plan)
  return fmha_ok(fmha_splitk_run(plan, &args), "fmha_splitk_run");
}

// Merges the `partials` records at `records` into bf16 O and float32 LSE.
bool merge_partials(const Dims &dims, DLDevice device, const float *records, int64_t partials, uint16_t *o, float *lse,
                    void *stream) {
  const int64_t m = kQLen, h = dims.heads_q, dv = dims.dim_v;
  Tensor o_stacked(records, kF32, device, {partials, dims.batch, m, h, dv}, {dims.record(), m * h * dv, h * dv, dv, 1});
  Tensor lse_stacked(records + dims.o_count(), kF32, device, {partials, dims.batch, h, m},
                     {dims.record(), h * m, m, 1});
  Tensor o_tensor(o, kBf16, device, {dims.batch, m, h, dv});
  Tensor lse_tensor(lse, kF32, device, {dims.batch, h, m});
  fmha_merge_args args = FMHA_MERGE_ARGS_INIT;
  args.o_stacked = o_stacked.get();
  args.lse_stacked = lse_stacked.get();
  args.o = o_tensor.get();
  args.lse = lse_tensor.get();
  args.stream = stream;
  return fmha_ok(fmha_merge(&args), "fmha_merge");
}

// ---------------------------------------------------------------------------
// Host data and comparison.

uint16_t bf16_from_float(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

double bf16_to_double(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

// Fills `values` uniform in [-amplitude, amplitude): a hash of the index
// (splitmix64), so that the result is the same whatever the thread count,
// and no two keys repeat (a periodic cache could hide a shard offset bug).
void fill_random(std::vector<uint16_t> &values, uint64_t seed, float amplitude) {
  const size_t count = values.size();
  const unsigned threads = std::max(1u, std::min(std::thread::hardware_concurrency(), 64u));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&values, count, threads, t, seed, amplitude] {
      for (size_t i = count * t / threads; i < count * (t + 1) / threads; ++i) {
        uint64_t z = seed * 0x9e3779b97f4a7c15ull + i;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const float unit = static_cast<float>(z >> 40) / 8388608.0f - 1.0f;  // 24 bits -> [-1, 1)
        values[i] = bf16_from_float(unit * amplitude);
      }
    });
  }
  for (std::thread &thread : pool) thread.join();
}

// ||o - reference|| / ||reference|| over bf16 values; infinite with a NaN.
double relative_error(const std::vector<uint16_t> &o, const std::vector<uint16_t> &reference) {
  double difference = 0.0, norm = 0.0;
  for (size_t i = 0; i < o.size(); ++i) {
    const double x = bf16_to_double(o[i]), r = bf16_to_double(reference[i]);
    if (std::isnan(x) || std::isnan(r)) return INFINITY;
    difference += (x - r) * (x - r);
    norm += r * r;
  }
  return std::sqrt(difference) / (norm > 0.0 ? std::sqrt(norm) : 1.0);
}

// Largest |lse - reference|; infinite with a NaN.
double max_difference(const std::vector<float> &lse, const std::vector<float> &reference) {
  double worst = 0.0;
  for (size_t i = 0; i < lse.size(); ++i) {
    const double difference = std::fabs(static_cast<double>(lse[i]) - reference[i]);
    if (!(difference <= worst)) worst = difference;  // NaN too
  }
  return worst;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// ---------------------------------------------------------------------------
// Device resources, released on every exit.

struct DeviceBuffer {
  int device = -1;
  void *data = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  bool allocate(int device_id, size_t size, const char *what) {
    device = device_id;
    bytes = size;
    if (!cuda_ok(cudaSetDevice(device_id), "cudaSetDevice")) return false;
    if (cuda_ok(cudaMalloc(&data, size == 0 ? 1 : size), what)) return true;
    std::fprintf(stderr, "context_parallel: (%zu bytes on GPU %d)\n", size, device_id);
    return false;
  }
  // NaN in every float and bf16 element: whatever a run does not write
  // shows up in the check.
  bool poison(cudaStream_t stream) const {
    return cuda_ok(cudaMemsetAsync(data, 0xff, bytes, stream), "cudaMemsetAsync");
  }
  template <class T>
  T *as() const {
    return static_cast<T *>(data);
  }
  ~DeviceBuffer() {
    if (data != nullptr && cudaSetDevice(device) == cudaSuccess) cudaFree(data);
  }
};

// Copies keys `part` of every sequence of a host K or V cache
// [B, kv_len, row] into a device buffer [B, part.size(), row].
bool upload_keys(const DeviceBuffer &buffer, const std::vector<uint16_t> &host, const Dims &dims, int64_t row,
                 Range part, cudaStream_t stream) {
  for (int64_t b = 0; b < dims.batch; ++b) {
    const uint16_t *source = host.data() + (b * dims.kv_len + part.begin) * row;
    uint16_t *destination = buffer.as<uint16_t>() + b * part.size() * row;
    if (!cuda_ok(cudaMemcpyAsync(destination, source, part.size() * row * 2, cudaMemcpyHostToDevice, stream),
                 "cudaMemcpyAsync K/V"))
      return false;
  }
  return true;
}

enum Mark { kStart, kAttended, kGathered, kMerged, kMarks };

// One GPU of the sharded run: its part of the keys, its shards' plans, the
// gather buffer of every partial, its merged result.
struct Gpu {
  int id = 0;
  Range part{0, 0};  // keys of every sequence this GPU holds
  cudaStream_t stream = nullptr;
  cudaEvent_t marks[kMarks] = {};
  DeviceBuffer q, k, v, records, o, lse;
  std::vector<fmha_splitk_plan_t> plans;  // one per shard of the part
  std::vector<Range> shards;              // keys of each shard, relative to the part

  ~Gpu() {
    if (cudaSetDevice(id) != cudaSuccess) return;
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (fmha_splitk_plan_t plan : plans) fmha_splitk_destroy_plan(plan);
    for (cudaEvent_t event : marks)
      if (event != nullptr) cudaEventDestroy(event);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// The unsharded run on GPU 0 (on GPU 0's stream): the whole KV cache.
struct Reference {
  DeviceBuffer k, v, o, lse;
  fmha_splitk_plan_t plan = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Reference() {
    if (cudaSetDevice(0) != cudaSuccess) return;
    cudaDeviceSynchronize();
    fmha_splitk_destroy_plan(plan);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
};

// The NCCL communicators, one per GPU (ncclCommInitAll). Finalised in a
// group, as one thread drives them all; aborted when the run failed, so that
// an error exit never waits on a collective that will not come.
struct Comms {
  std::vector<ncclComm_t> comms;
  bool closed = false;
  bool close() {
    closed = true;
    if (!nccl_ok(ncclGroupStart(), "ncclGroupStart")) return false;
    ncclResult_t result = ncclSuccess;
    for (ncclComm_t comm : comms)
      if (result == ncclSuccess) result = ncclCommFinalize(comm);
    const ncclResult_t ended = ncclGroupEnd();
    if (!nccl_ok(result, "ncclCommFinalize") || !nccl_ok(ended, "ncclGroupEnd (finalize)")) return false;
    bool ok = true;
    for (ncclComm_t comm : comms) ok = nccl_ok(ncclCommDestroy(comm), "ncclCommDestroy") && ok;
    return ok;
  }
  ~Comms() {
    if (!closed)
      for (ncclComm_t comm : comms) ncclCommAbort(comm);
  }
};

// ---------------------------------------------------------------------------
// Options.

struct Options {
  int gpus = 0;  // 0: every visible GPU
  int shards_per_gpu = 1;
  int64_t kv_len = 1048576;
  int64_t batch = 1;
  int64_t heads_q = 32, heads_kv = 8, head_dim = 128;
  bool shape_given = false;
  bool mla = false;
  int iters = 20;
};

void usage(FILE *to) {
  std::fprintf(to,
               "usage: fmha_example_context_parallel [options]\n"
               "  --gpus N            GPUs to shard over (default: all visible)\n"
               "  --shards-per-gpu K  consecutive shards per GPU (default 1): N x K partials\n"
               "  --kv-len L          keys per sequence (default 1048576)\n"
               "  --batch B           sequences (default 1)\n"
               "  --heads-q H         query heads (default 32)\n"
               "  --heads-kv H        K/V heads (default 8; GQA decode, bf16, one query)\n"
               "  --head-dim D        head dim (default 128)\n"
               "  --mla               MLA decode instead: Hq 16, Hkv 1, Dqk 576, Dv 512, V from K\n"
               "  --iters N           timed iterations, medians reported (default 20)\n");
}

bool parse_int(const char *text, int64_t low, int64_t high, int64_t *value) {
  if (text == nullptr) return false;
  char *end = nullptr;
  const long long parsed = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || parsed < low || parsed > high) return false;
  *value = parsed;
  return true;
}

// 0: parsed; -1: --help printed the usage (exit 0); else the exit status.
int parse_options(int argc, char **argv, Options *options) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  for (int i = 1; i < argc; ++i) {
    const char *name = argv[i];
    const char *value = i + 1 < argc ? argv[i + 1] : nullptr;
    int64_t number = 0;
    const auto take = [&](int64_t low, int64_t high) {
      if (!parse_int(value, low, high, &number)) {
        std::fprintf(stderr, "context_parallel: %s needs an integer in [%lld, %lld], got %s\n", name,
                     static_cast<long long>(low), static_cast<long long>(high), value ? value : "nothing");
        return false;
      }
      ++i;
      return true;
    };
    if (std::strcmp(name, "--help") == 0 || std::strcmp(name, "-h") == 0) {
      usage(stdout);
      return -1;
    } else if (std::strcmp(name, "--mla") == 0) {
      options->mla = true;
    } else if (std::strcmp(name, "--gpus") == 0) {
      if (!take(1, 1024)) return kExitUsage;
      options->gpus = static_cast<int>(number);
    } else if (std::strcmp(name, "--shards-per-gpu") == 0) {
      if (!take(1, 4096)) return kExitUsage;
      options->shards_per_gpu = static_cast<int>(number);
    } else if (std::strcmp(name, "--kv-len") == 0) {
      if (!take(1, kInt32Max)) return kExitUsage;  // lengths are int32 on the device
      options->kv_len = number;
    } else if (std::strcmp(name, "--batch") == 0) {
      if (!take(1, 1 << 20)) return kExitUsage;
      options->batch = number;
    } else if (std::strcmp(name, "--heads-q") == 0) {
      if (!take(1, 4096)) return kExitUsage;
      options->heads_q = number;
      options->shape_given = true;
    } else if (std::strcmp(name, "--heads-kv") == 0) {
      if (!take(1, 4096)) return kExitUsage;
      options->heads_kv = number;
      options->shape_given = true;
    } else if (std::strcmp(name, "--head-dim") == 0) {
      if (!take(1, 576)) return kExitUsage;
      options->head_dim = number;
      options->shape_given = true;
    } else if (std::strcmp(name, "--iters") == 0) {
      if (!take(1, 100000)) return kExitUsage;
      options->iters = static_cast<int>(number);
    } else {
      std::fprintf(stderr, "context_parallel: unknown option %s\n", name);
      usage(stderr);
      return kExitUsage;
    }
  }
  if (options->mla && options->shape_given) {
    std::fprintf(stderr, "context_parallel: --mla fixes the heads and head dims (16 / 1 / 576, Dv 512)\n");
    return kExitUsage;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// The runs.

// The unsharded run: poison, then one plan over every key, timed.
bool run_reference(Reference &reference, Gpu &gpu0, const Dims &dims, const uint16_t *q) {
  const DLDevice device = {kDLCUDA, 0};
  return cuda_ok(cudaSetDevice(0), "cudaSetDevice") && reference.o.poison(gpu0.stream) &&
         reference.lse.poison(gpu0.stream) &&
         cuda_ok(cudaEventRecord(reference.start, gpu0.stream), "cudaEventRecord") &&
         attend(reference.plan, dims, device, q, {reference.k.as<uint16_t>(), reference.v.as<uint16_t>(), dims.kv_len},
                {0, dims.kv_len}, reference.o.data, kBf16, reference.lse.as<float>(), gpu0.stream) &&
         cuda_ok(cudaEventRecord(reference.stop, gpu0.stream), "cudaEventRecord") &&
         cuda_ok(cudaStreamSynchronize(gpu0.stream), "cudaStreamSynchronize (unsharded run)");
}

// The sharded run on every GPU: poison; each shard's attention into its
// record of the gather buffer; the all-gather; the merge. One thread drives
// every GPU: each call only enqueues work on that GPU's stream.
bool run_sharded(std::vector<std::unique_ptr<Gpu>> &gpus, const Comms &comms, const Dims &dims) {
  const int64_t per_gpu = static_cast<int64_t>(gpus.front()->shards.size());
  const int64_t partials = per_gpu * static_cast<int64_t>(gpus.size());
  for (auto &gpu : gpus) {
    if (!(cuda_ok(cudaSetDevice(gpu->id), "cudaSetDevice") && gpu->records.poison(gpu->stream) &&
          gpu->o.poison(gpu->stream) && gpu->lse.poison(gpu->stream) &&
          cuda_ok(cudaEventRecord(gpu->marks[kStart], gpu->stream), "cudaEventRecord")))
      return false;
  }
  for (auto &gpu : gpus) {
    const DLDevice device = {kDLCUDA, gpu->id};
    const KvBuffer kv = {gpu->k.as<uint16_t>(), gpu->v.as<uint16_t>(), gpu->part.size()};
    for (int64_t j = 0; j < per_gpu; ++j) {
      // Partial number (GPU, shard): the order of the keys, which is also
      // the order in which every GPU merges them.
      float *record = gpu->records.as<float>() + (gpu->id * per_gpu + j) * dims.record();
      if (!attend(gpu->plans[j], dims, device, gpu->q.as<uint16_t>(), kv, gpu->shards[j], record, kF32,
                  record + dims.o_count(), gpu->stream))
        return false;
    }
    if (!(cuda_ok(cudaSetDevice(gpu->id), "cudaSetDevice") &&
          cuda_ok(cudaEventRecord(gpu->marks[kAttended], gpu->stream), "cudaEventRecord")))
      return false;
  }
  // In place: GPU g's records already sit in slots g x K .. g x K + K - 1 of
  // its gather buffer, which is where ncclAllGather puts rank g's data.
  if (!nccl_ok(ncclGroupStart(), "ncclGroupStart")) return false;
  ncclResult_t result = ncclSuccess;
  const size_t count = static_cast<size_t>(per_gpu * dims.record());
  for (size_t g = 0; g < gpus.size() && result == ncclSuccess; ++g) {
    float *gathered = gpus[g]->records.as<float>();
    result = ncclAllGather(gathered + g * count, gathered, count, ncclFloat32, comms.comms[g], gpus[g]->stream);
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (!nccl_ok(result, "ncclAllGather") || !nccl_ok(ended, "ncclGroupEnd (all-gather)")) return false;
  for (auto &gpu : gpus) {
    if (!(cuda_ok(cudaSetDevice(gpu->id), "cudaSetDevice") &&
          cuda_ok(cudaEventRecord(gpu->marks[kGathered], gpu->stream), "cudaEventRecord") &&
          merge_partials(dims, {kDLCUDA, gpu->id}, gpu->records.as<float>(), partials, gpu->o.as<uint16_t>(),
                         gpu->lse.as<float>(), gpu->stream) &&
          cuda_ok(cudaSetDevice(gpu->id), "cudaSetDevice") &&
          cuda_ok(cudaEventRecord(gpu->marks[kMerged], gpu->stream), "cudaEventRecord")))
      return false;
  }
  for (auto &gpu : gpus) {
    if (!(cuda_ok(cudaSetDevice(gpu->id), "cudaSetDevice") &&
          cuda_ok(cudaStreamSynchronize(gpu->stream), "cudaStreamSynchronize (sharded run)")))
      return false;
  }
  return true;
}

bool elapsed_ms(cudaEvent_t from, cudaEvent_t to, double *ms) {
  float value = 0.0f;
  if (!cuda_ok(cudaEventElapsedTime(&value, from, to), "cudaEventElapsedTime")) return false;
  *ms = value;
  return true;
}

template <class T>
bool download(std::vector<T> &host, const DeviceBuffer &buffer, cudaStream_t stream) {
  return cuda_ok(cudaSetDevice(buffer.device), "cudaSetDevice") &&
         cuda_ok(cudaMemcpyAsync(host.data(), buffer.data, host.size() * sizeof(T), cudaMemcpyDeviceToHost, stream),
                 "cudaMemcpyAsync (result)") &&
         cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize (result)");
}

// Every GPU's merged O and LSE against the unsharded run's. Sets *match;
// false only when a call failed.
bool check_results(const std::vector<std::unique_ptr<Gpu>> &gpus, const Reference &reference, const Dims &dims,
                   const char *when, bool *match) {
  std::vector<uint16_t> o_ref(dims.o_count()), o(dims.o_count()), o_gpu0(dims.o_count());
  std::vector<float> lse_ref(dims.lse_count()), lse(dims.lse_count());
  if (!download(o_ref, reference.o, gpus[0]->stream) || !download(lse_ref, reference.lse, gpus[0]->stream))
    return false;
  *match = true;
  for (const auto &gpu : gpus) {
    if (!download(o, gpu->o, gpu->stream) || !download(lse, gpu->lse, gpu->stream)) return false;
    const double o_error = relative_error(o, o_ref), lse_error = max_difference(lse, lse_ref);
    const bool ok = o_error <= kOBound && lse_error <= kLseBound;
    if (gpu->id == 0) o_gpu0 = o;
    // Every GPU merges the same partials in the same order with the same
    // kernel: the results should be bitwise equal (reported, not required).
    const bool same = o == o_gpu0;
    std::printf(
        "context_parallel: check %s: GPU %d: relative error of O %.2e (bound %.0e), largest LSE difference "
        "%.2e (bound %.0e)%s%s\n",
        when, gpu->id, o_error, kOBound, lse_error, kLseBound, gpu->id > 0 && same ? ", bitwise as GPU 0" : "",
        ok ? "" : "  MISMATCH");
    *match = *match && ok;
  }
  return true;
}

void print_plan(const char *what, fmha_splitk_plan_t plan) {
  fmha_splitk_plan_info info = FMHA_SPLITK_PLAN_INFO_INIT;
  if (fmha_splitk_get_plan_info(plan, &info) == FMHA_STATUS_SUCCESS)
    std::printf("context_parallel: %s plan: %s on %s, split_k %d\n", what, info.kernel_name, info.device_name,
                info.split_k);
}

int run(const Options &options) {
  int visible = 0;
  const cudaError_t counted = cudaGetDeviceCount(&visible);
  if (counted != cudaSuccess || visible == 0) {
    std::printf("context_parallel: no CUDA GPU (%s); skipped\n",
                counted != cudaSuccess ? cudaGetErrorString(counted) : "cudaGetDeviceCount found none");
    return kExitSkip;
  }
  const int num_gpus = options.gpus > 0 ? options.gpus : visible;
  if (num_gpus > visible) {
    std::printf("context_parallel: --gpus %d asks for more GPUs than the %d visible; skipped\n", num_gpus, visible);
    return kExitSkip;
  }
  const int64_t per_gpu = options.shards_per_gpu;
  const int64_t partials = per_gpu * num_gpus;
  Dims dims{};
  dims.batch = options.batch;
  dims.kv_len = options.kv_len;
  dims.mla = options.mla;
  dims.heads_q = options.mla ? 16 : options.heads_q;
  dims.heads_kv = options.mla ? 1 : options.heads_kv;
  dims.dim_qk = options.mla ? 576 : options.head_dim;
  dims.dim_v = options.mla ? 512 : options.head_dim;
  if (dims.kv_len < partials) {
    std::fprintf(stderr, "context_parallel: --kv-len %lld is less than the %lld shards (a key each at least)\n",
                 static_cast<long long>(dims.kv_len), static_cast<long long>(partials));
    return kExitUsage;
  }
  std::printf(
      "context_parallel: %s decode, batch %lld, %lld keys, Hq %lld, Hkv %lld, Dqk %lld, Dv %lld, bf16; "
      "%d GPU(s) x %lld shard(s) = %lld partials\n",
      dims.mla ? "MLA" : "GQA", static_cast<long long>(dims.batch), static_cast<long long>(dims.kv_len),
      static_cast<long long>(dims.heads_q), static_cast<long long>(dims.heads_kv), static_cast<long long>(dims.dim_qk),
      static_cast<long long>(dims.dim_v), num_gpus, static_cast<long long>(per_gpu), static_cast<long long>(partials));

  // Random inputs on the host (Q a little wider than K and V, so that the
  // softmax is not flat); V only for GQA, MLA reads it from the K rows.
  std::vector<uint16_t> q_host(dims.q_count()), k_host(dims.batch * dims.kv_len * dims.k_row()), v_host;
  fill_random(q_host, 1, 4.0f);
  fill_random(k_host, 2, 1.0f);
  if (!dims.mla) {
    v_host.resize(dims.batch * dims.kv_len * dims.v_row());
    fill_random(v_host, 3, 1.0f);
  }

  // Each GPU: the queries, its part of the cache, one plan per shard (float32
  // O: partials to merge), the gather buffer and the merged result.
  std::vector<std::unique_ptr<Gpu>> gpus;
  for (int g = 0; g < num_gpus; ++g) {
    gpus.push_back(std::make_unique<Gpu>());
    Gpu &gpu = *gpus.back();
    gpu.id = g;
    gpu.part = {shard_keys(dims, g * per_gpu, partials).begin, shard_keys(dims, (g + 1) * per_gpu - 1, partials).end};
    if (!(cuda_ok(cudaSetDevice(g), "cudaSetDevice") &&
          cuda_ok(cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking), "cudaStreamCreate")))
      return kExitMismatch;
    for (cudaEvent_t &event : gpu.marks)
      if (!cuda_ok(cudaEventCreate(&event), "cudaEventCreate")) return kExitMismatch;
    const size_t part_keys = static_cast<size_t>(dims.batch * gpu.part.size());
    if (!(gpu.q.allocate(g, dims.q_count() * 2, "cudaMalloc Q") &&
          gpu.k.allocate(g, part_keys * dims.k_row() * 2, "cudaMalloc K") &&
          (dims.mla || gpu.v.allocate(g, part_keys * dims.v_row() * 2, "cudaMalloc V")) &&
          gpu.records.allocate(g, partials * dims.record() * 4, "cudaMalloc partials") &&
          gpu.o.allocate(g, dims.o_count() * 2, "cudaMalloc O") &&
          gpu.lse.allocate(g, dims.lse_count() * 4, "cudaMalloc LSE")))
      return kExitMismatch;
    if (!(cuda_ok(cudaMemcpyAsync(gpu.q.data, q_host.data(), dims.q_count() * 2, cudaMemcpyHostToDevice, gpu.stream),
                  "cudaMemcpyAsync Q") &&
          upload_keys(gpu.k, k_host, dims, dims.k_row(), gpu.part, gpu.stream) &&
          (dims.mla || upload_keys(gpu.v, v_host, dims, dims.v_row(), gpu.part, gpu.stream))))
      return kExitMismatch;
    for (int64_t j = 0; j < per_gpu; ++j) {
      const Range keys = shard_keys(dims, g * per_gpu + j, partials);
      gpu.shards.push_back({keys.begin - gpu.part.begin, keys.end - gpu.part.begin});
      const fmha_splitk_problem problem = make_problem(dims, keys.size(), FMHA_BACKEND_CUDA, g, FMHA_DTYPE_F32);
      fmha_splitk_plan_t plan = nullptr;
      if (!fmha_ok(fmha_splitk_create_plan(&problem, &plan), "fmha_splitk_create_plan (shard)")) return kExitMismatch;
      gpu.plans.push_back(plan);
    }
  }
  print_plan("shard 0", gpus[0]->plans[0]);

  // GPU 0 also holds the whole cache for the unsharded run (bf16 O).
  Reference reference;
  const Range all_keys = {0, dims.kv_len};
  const size_t all_rows = static_cast<size_t>(dims.batch * dims.kv_len);
  if (!(reference.k.allocate(0, all_rows * dims.k_row() * 2, "cudaMalloc K (unsharded)") &&
        (dims.mla || reference.v.allocate(0, all_rows * dims.v_row() * 2, "cudaMalloc V (unsharded)")) &&
        reference.o.allocate(0, dims.o_count() * 2, "cudaMalloc O (unsharded)") &&
        reference.lse.allocate(0, dims.lse_count() * 4, "cudaMalloc LSE (unsharded)") &&
        cuda_ok(cudaEventCreate(&reference.start), "cudaEventCreate") &&
        cuda_ok(cudaEventCreate(&reference.stop), "cudaEventCreate") &&
        upload_keys(reference.k, k_host, dims, dims.k_row(), all_keys, gpus[0]->stream) &&
        (dims.mla || upload_keys(reference.v, v_host, dims, dims.v_row(), all_keys, gpus[0]->stream))))
    return kExitMismatch;
  {
    const fmha_splitk_problem problem = make_problem(dims, dims.kv_len, FMHA_BACKEND_CUDA, 0, FMHA_DTYPE_BF16);
    if (!fmha_ok(fmha_splitk_create_plan(&problem, &reference.plan), "fmha_splitk_create_plan (unsharded)"))
      return kExitMismatch;
  }
  print_plan("unsharded", reference.plan);
  // The uploads read the host arrays until they complete.
  for (auto &gpu : gpus) {
    if (!(cuda_ok(cudaSetDevice(gpu->id), "cudaSetDevice") &&
          cuda_ok(cudaStreamSynchronize(gpu->stream), "cudaStreamSynchronize (upload)")))
      return kExitMismatch;
  }
  std::vector<uint16_t>().swap(k_host);
  std::vector<uint16_t>().swap(v_host);

  Comms comms;
  comms.comms.resize(num_gpus);
  std::vector<int> devices(num_gpus);
  for (int g = 0; g < num_gpus; ++g) devices[g] = g;  // rank g is GPU g
  if (!nccl_ok(ncclCommInitAll(comms.comms.data(), num_gpus, devices.data()), "ncclCommInitAll")) return kExitMismatch;
  int nccl_version = 0;
  if (!nccl_ok(ncclGetVersion(&nccl_version), "ncclGetVersion")) return kExitMismatch;
  std::printf("context_parallel: NCCL %d.%d.%d, %d rank(s), NCCL_NVLS_ENABLE=%s\n", nccl_version / 10000,
              nccl_version / 100 % 100, nccl_version % 100, num_gpus, std::getenv("NCCL_NVLS_ENABLE"));

  // First runs: the check (and the warm-up of the timings).
  bool match = false, all_match = true;
  const uint16_t *q0 = gpus[0]->q.as<uint16_t>();
  if (!run_reference(reference, *gpus[0], dims, q0) || !run_sharded(gpus, comms, dims) ||
      !check_results(gpus, reference, dims, "after the first run", &match))
    return kExitMismatch;
  all_match = all_match && match;

  // Timings: the unsharded runs, then the sharded ones (never at once, so
  // that neither slows the other). Each sharded step is the slowest GPU's
  // time from the previous mark; the total is the slowest GPU's total.
  std::vector<double> unsharded, attention, gather, merge, total;
  for (int i = 0; i < options.iters; ++i) {
    double ms = 0.0;
    if (!run_reference(reference, *gpus[0], dims, q0) || !elapsed_ms(reference.start, reference.stop, &ms))
      return kExitMismatch;
    unsharded.push_back(ms);
  }
  for (int i = 0; i < options.iters; ++i) {
    if (!run_sharded(gpus, comms, dims)) return kExitMismatch;
    double steps[4] = {0.0, 0.0, 0.0, 0.0};  // attention, gather, merge, total
    for (const auto &gpu : gpus) {
      double ms[4];
      if (!(elapsed_ms(gpu->marks[kStart], gpu->marks[kAttended], &ms[0]) &&
            elapsed_ms(gpu->marks[kAttended], gpu->marks[kGathered], &ms[1]) &&
            elapsed_ms(gpu->marks[kGathered], gpu->marks[kMerged], &ms[2]) &&
            elapsed_ms(gpu->marks[kStart], gpu->marks[kMerged], &ms[3])))
        return kExitMismatch;
      for (int s = 0; s < 4; ++s) steps[s] = std::max(steps[s], ms[s]);
    }
    attention.push_back(steps[0]);
    gather.push_back(steps[1]);
    merge.push_back(steps[2]);
    total.push_back(steps[3]);
  }
  // The last timed runs were poisoned first too: check what they left.
  if (!check_results(gpus, reference, dims, "after the timed runs", &match)) return kExitMismatch;
  all_match = all_match && match;

  int64_t largest_part = 0;
  for (const auto &gpu : gpus) largest_part = std::max(largest_part, gpu->part.size());
  const double unsharded_bytes = static_cast<double>(dims.batch * dims.kv_len) * dims.kv_bytes_per_key();
  const double part_bytes = static_cast<double>(dims.batch * largest_part) * dims.kv_bytes_per_key();
  const double gathered_kib = static_cast<double>(partials * dims.record()) * 4.0 / 1024.0;
  const double t_unsharded = median(unsharded), t_attention = median(attention);
  std::printf("context_parallel: median of %d iterations, ms (sharded steps: the slowest GPU)\n", options.iters);
  std::printf("  %-44s %9.3f  %7.0f GB/s of K/V read\n", "unsharded run (GPU 0, every key)", t_unsharded,
              unsharded_bytes / (t_unsharded * 1e6));
  std::printf("  %-44s %9.3f  %7.0f GB/s of K/V read per GPU\n", "sharded: shard attention", t_attention,
              part_bytes / (t_attention * 1e6));
  std::printf("  %-44s %9.3f  (%.1f KiB gathered on each GPU)\n", "sharded: NCCL all-gather", median(gather),
              gathered_kib);
  std::printf("  %-44s %9.3f  (%lld partials)\n", "sharded: merge", median(merge), static_cast<long long>(partials));
  std::printf("  %-44s %9.3f\n", "sharded: total", median(total));

  if (!comms.close()) return kExitMismatch;
  std::printf("context_parallel: %s\n", all_match ? "every GPU's merged result matches the unsharded run"
                                                  : "MISMATCH: a merged result differs from the unsharded run");
  return all_match ? 0 : kExitMismatch;
}

}  // namespace

int main(int argc, char **argv) {
  // NVLink multicast (NVLS) must stay off on the shared machines: forced to
  // 0 (overwriting any value from the environment) before any NCCL call.
  if (setenv("NCCL_NVLS_ENABLE", "0", 1) != 0) {
    std::perror("context_parallel: setenv NCCL_NVLS_ENABLE");
    return kExitMismatch;
  }
  Options options;
  const int parsed = parse_options(argc, argv, &options);
  if (parsed != 0) return parsed < 0 ? 0 : parsed;
  return run(options);
}
