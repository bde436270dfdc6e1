// cuda_graph: one fmha_splitk_run() captured in a CUDA graph and replayed
// with different sequence lengths, the way a serving engine replays its
// decode step. The lengths live in device memory (PADDED layout) and are
// updated between replays outside the graph; the plan's balanced schedule
// is recomputed on the device inside each replay, so the captured graph
// stays correct. Each replay is checked against a float64 reference.
// Needs an NVIDIA GPU and the CUDA plugin; exit status 0 when every replay
// matches, 1 otherwise.
#include <cuda_runtime.h>
#include <fmha_splitk/fmha_splitk.h>

#include <cstdio>
#include <vector>

#include "../common/example_reference.h"

namespace {

constexpr int64_t kBatch = 4, kQLen = 1, kHeadsQ = 32, kHeadsKv = 8, kHeadDim = 128, kKvCapacity = 2048;
constexpr size_t kQCount = kBatch * kQLen * kHeadsQ * kHeadDim;
constexpr size_t kKvCount = kBatch * kKvCapacity * kHeadsKv * kHeadDim;
constexpr size_t kLseCount = kBatch * kHeadsQ * kQLen;

bool cuda_ok(cudaError_t error, const char *call) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "cuda_graph: %s: %s\n", call, cudaGetErrorString(error));
  return false;
}

bool fmha_ok(fmha_status status, const char *call) {
  if (status == FMHA_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "cuda_graph: %s: %s: %s\n", call, fmha_status_string(status), fmha_last_error_message());
  return false;
}

// Device memory freed on scope exit, so that every early return is clean.
struct DeviceBuffer {
  void *data = nullptr;
  bool allocate(size_t bytes) { return cuda_ok(cudaMalloc(&data, bytes == 0 ? 1 : bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(data); }
};

struct Plan {
  fmha_splitk_plan_t handle = nullptr;
  ~Plan() { fmha_splitk_destroy_plan(handle); }
};

struct Graph {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (stream) cudaStreamDestroy(stream);
  }
};

DLTensor device_tensor(void *data, DLDataType dtype, int32_t ndim, int64_t *shape) {
  DLTensor tensor{};
  tensor.data = data;
  tensor.device = {kDLCUDA, 0};
  tensor.ndim = ndim;
  tensor.dtype = dtype;
  tensor.shape = shape;
  tensor.strides = nullptr;  // compact row-major
  return tensor;
}

}  // namespace

int main() {
  std::vector<uint16_t> q(kQCount), k(kKvCount), v(kKvCount);
  example_fill_bf16(q.data(), q.size(), 21u);
  example_fill_bf16(k.data(), k.size(), 22u);
  example_fill_bf16(v.data(), v.size(), 23u);

  fmha_splitk_problem problem = FMHA_SPLITK_PROBLEM_INIT;
  problem.backend = FMHA_BACKEND_CUDA;
  problem.batch = kBatch;
  problem.max_q_seqlen = kQLen;
  problem.max_kv_seqlen = kKvCapacity;  // any replay's lengths may go up to this
  problem.heads_q = kHeadsQ;
  problem.heads_kv = kHeadsKv;
  problem.head_dim_qk = kHeadDim;
  problem.kv_layout = FMHA_KV_PADDED;
  problem.q_dtype = FMHA_DTYPE_BF16;
  problem.o_dtype = FMHA_DTYPE_F32;
  Plan plan;
  if (!fmha_ok(fmha_splitk_create_plan(&problem, &plan.handle), "fmha_splitk_create_plan")) return 1;
  size_t workspace_size = 0;
  if (!fmha_ok(fmha_splitk_plan_workspace_size(plan.handle, &workspace_size), "fmha_splitk_plan_workspace_size"))
    return 1;

  DeviceBuffer q_dev, k_dev, v_dev, o_dev, lse_dev, kv_seqlen_dev, workspace;
  if (!(q_dev.allocate(kQCount * 2) && k_dev.allocate(kKvCount * 2) && v_dev.allocate(kKvCount * 2) &&
        o_dev.allocate(kQCount * 4) && lse_dev.allocate(kLseCount * 4) && kv_seqlen_dev.allocate(kBatch * 4) &&
        workspace.allocate(workspace_size)))
    return 1;
  if (!(cuda_ok(cudaMemcpy(q_dev.data, q.data(), kQCount * 2, cudaMemcpyHostToDevice), "cudaMemcpy Q") &&
        cuda_ok(cudaMemcpy(k_dev.data, k.data(), kKvCount * 2, cudaMemcpyHostToDevice), "cudaMemcpy K") &&
        cuda_ok(cudaMemcpy(v_dev.data, v.data(), kKvCount * 2, cudaMemcpyHostToDevice), "cudaMemcpy V")))
    return 1;

  int64_t q_shape[4] = {kBatch, kQLen, kHeadsQ, kHeadDim};
  int64_t kv_shape[4] = {kBatch, kKvCapacity, kHeadsKv, kHeadDim};
  int64_t lse_shape[3] = {kBatch, kHeadsQ, kQLen};
  int64_t batch_shape[1] = {kBatch};
  const DLDataType bf16 = {kDLBfloat, 16, 1}, f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1};
  const DLTensor q_tensor = device_tensor(q_dev.data, bf16, 4, q_shape);
  const DLTensor k_tensor = device_tensor(k_dev.data, bf16, 4, kv_shape);
  const DLTensor v_tensor = device_tensor(v_dev.data, bf16, 4, kv_shape);
  const DLTensor o_tensor = device_tensor(o_dev.data, f32, 4, q_shape);
  const DLTensor lse_tensor = device_tensor(lse_dev.data, f32, 3, lse_shape);
  const DLTensor kv_seqlen_tensor = device_tensor(kv_seqlen_dev.data, i32, 1, batch_shape);

  Graph graph;
  if (!cuda_ok(cudaStreamCreateWithFlags(&graph.stream, cudaStreamNonBlocking), "cudaStreamCreate")) return 1;
  fmha_splitk_args args = FMHA_SPLITK_ARGS_INIT;
  args.q = &q_tensor;
  args.k = &k_tensor;
  args.v = &v_tensor;
  args.o = &o_tensor;
  args.lse = &lse_tensor;
  args.kv_seqlen = &kv_seqlen_tensor;
  // A caller-owned workspace: the graph records its address, so it must
  // outlive every replay.
  args.workspace = workspace.data;
  args.workspace_size = workspace_size;
  args.stream = graph.stream;

  // The run only enqueues work on the stream: it can be captured as it is.
  if (!cuda_ok(cudaStreamBeginCapture(graph.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"))
    return 1;
  const fmha_status captured = fmha_splitk_run(plan.handle, &args);
  const cudaError_t ended = cudaStreamEndCapture(graph.stream, &graph.graph);
  if (!fmha_ok(captured, "fmha_splitk_run (captured)") || !cuda_ok(ended, "cudaStreamEndCapture")) return 1;
  if (!cuda_ok(cudaGraphInstantiate(&graph.exec, graph.graph, 0), "cudaGraphInstantiate")) return 1;

  // Each replay: new lengths (one of them zero keys), then the same graph.
  const int32_t replay_lengths[3][kBatch] = {{2048, 1, 777, 1500}, {64, 2000, 0, 333}, {1024, 1024, 1024, 1024}};
  std::vector<float> o(kQCount), lse(kLseCount);
  std::vector<double> o_ref(kQCount), lse_ref(kLseCount);
  const example_shape shape = {kBatch, kQLen, kHeadsQ, kHeadsKv, kHeadDim, kKvCapacity};
  bool all_match = true;
  for (const auto &lengths : replay_lengths) {
    if (!(cuda_ok(cudaMemcpyAsync(kv_seqlen_dev.data, lengths, sizeof lengths, cudaMemcpyHostToDevice, graph.stream),
                  "cudaMemcpyAsync lengths") &&
          cuda_ok(cudaGraphLaunch(graph.exec, graph.stream), "cudaGraphLaunch") &&
          cuda_ok(cudaMemcpyAsync(o.data(), o_dev.data, kQCount * 4, cudaMemcpyDeviceToHost, graph.stream),
                  "cudaMemcpyAsync O") &&
          cuda_ok(cudaMemcpyAsync(lse.data(), lse_dev.data, kLseCount * 4, cudaMemcpyDeviceToHost, graph.stream),
                  "cudaMemcpyAsync LSE") &&
          cuda_ok(cudaStreamSynchronize(graph.stream), "cudaStreamSynchronize")))
      return 1;
    example_reference_attention(&shape, q.data(), k.data(), v.data(), lengths, o_ref.data(), lse_ref.data());
    const double o_error = example_relative_error(o.data(), o_ref.data(), kQCount);
    const double lse_error = example_max_difference(lse.data(), lse_ref.data(), kLseCount);
    // bf16 inputs, fp32 accumulation and output (DESIGN.md section 6).
    const bool match = o_error < 2e-3 && lse_error < 1e-3;
    std::printf("cuda_graph: lengths {%d, %d, %d, %d}: relative error of O %.2e, largest LSE difference %.2e%s\n",
                lengths[0], lengths[1], lengths[2], lengths[3], o_error, lse_error, match ? "" : "  MISMATCH");
    all_match = all_match && match;
  }
  return all_match ? 0 : 1;
}
